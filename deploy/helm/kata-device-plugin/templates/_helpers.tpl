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

{{/* registry/repository:tag, or registry/repository@digest; the tag defaults to appVersion. */}}
{{- define "kata-device-plugin.image" -}}
{{- $name := .Values.image.repository -}}
{{- if .Values.image.registry -}}{{- $name = printf "%s/%s" .Values.image.registry $name -}}{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $name .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $name (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The node selector: the user's, plus kubernetes.io/os=linux unless the user sets it. */}}
{{- define "kata-device-plugin.nodeSelector" -}}
{{- toYaml (merge (deepCopy .Values.nodeSelector) (dict "kubernetes.io/os" "linux")) -}}
{{- end -}}


{{/* Pod template labels: the chart's labels win over podLabels (the selector must hold). */}}
{{- define "kata-device-plugin.podLabels" -}}
{{- $fixed := include "kata-device-plugin.labels" . | fromYaml -}}
{{- toYaml (merge $fixed (deepCopy .Values.podLabels)) -}}
{{- end -}}

{{/* OnDelete takes no rollingUpdate (the API server refuses it). */}}
{{- define "kata-device-plugin.updateStrategy" -}}
{{- if eq .Values.updateStrategy.type "OnDelete" -}}
type: OnDelete
{{- else -}}
{{- toYaml .Values.updateStrategy -}}
{{- end -}}
{{- end -}}
