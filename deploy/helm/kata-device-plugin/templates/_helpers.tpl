{{/* The release's name, at most 63 characters (a label value). */}}
{{- define "kata-device-plugin.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: stable across upgrades (a DaemonSet's selector is immutable). */}}
{{- define "kata-device-plugin.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kata-device-plugin.labels" -}}
{{ include "kata-device-plugin.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: device-plugin
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "kata-device-plugin.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The node selector: the user's, plus kubernetes.io/os=linux unless the user sets it. */}}
{{- define "kata-device-plugin.nodeSelector" -}}
{{- toYaml (merge (deepCopy .Values.nodeSelector) (dict "kubernetes.io/os" "linux")) -}}
{{- end -}}
