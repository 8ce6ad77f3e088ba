{{/*
Object names are fixed (one release per cluster): the docs, the log lines, the admission
policies and the RBAC subject name them.
*/}}

{{/* Labels every object carries. */}}
{{- define "hyperlight.labels" -}}
app.kubernetes.io/part-of: hyperlight
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* registry/repository:tag, or registry/repository@digest; the tag defaults to appVersion. */}}
{{- define "hyperlight.image" -}}
{{- $name := .Values.image.repository -}}
{{- if .Values.image.registry -}}{{- $name = printf "%s/%s" .Values.image.registry $name -}}{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $name .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $name (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The pod spec fields both DaemonSets share (indented 6, under the pod's spec:). */}}
{{- define "hyperlight.podScheduling" -}}
enableServiceLinks: false
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
terminationGracePeriodSeconds: 10
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Pod template metadata: the fixed labels last, so podLabels cannot change the selector. */}}
{{- define "hyperlight.podMetadata" -}}
{{- $root := index . 0 -}}
{{- $fixed := index . 1 -}}
{{- with $root.Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
labels:
  {{- toYaml (merge (deepCopy $fixed) (deepCopy $root.Values.podLabels)) | nindent 2 }}
{{- end -}}

{{/* OnDelete takes no rollingUpdate (the API server refuses it). */}}
{{- define "hyperlight.updateStrategy" -}}
{{- if eq .Values.updateStrategy.type "OnDelete" -}}
type: OnDelete
{{- else -}}
{{- toYaml .Values.updateStrategy -}}
{{- end -}}
{{- end -}}

{{/* monitors require metrics.enabled */}}
{{- define "hyperlight.checkMetrics" -}}
{{- if and (or .Values.metrics.serviceMonitor.enabled .Values.metrics.podMonitor.enabled) (not .Values.metrics.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled / metrics.podMonitor.enabled need metrics.enabled=true" -}}
{{- end -}}
{{- end -}}

{{/*
The companions (companion.h): name, its values key and its variables' prefix, in the daemon's
table order. COMPANIONS lists the enabled ones in this order, whatever companions.enabled's.
*/}}
{{- define "hyperlight.companionTable" -}}
- {name: tun, key: tun, env: TUN}
- {name: vhost-net, key: vhostNet, env: VHOST_NET}
- {name: vhost-vsock, key: vhostVsock, env: VHOST_VSOCK}
{{- end -}}

{{/* COMPANIONS' value: the enabled companions, comma-separated; empty when none. */}}
{{- define "hyperlight.companions" -}}
{{- $names := list -}}
{{- range (include "hyperlight.companionTable" . | fromYamlArray) -}}
{{- if has .name $.Values.companions.enabled -}}{{- $names = append $names .name -}}{{- end -}}
{{- end -}}
{{- join "," $names -}}
{{- end -}}

{{/* The enabled companions' node labels, hyperlight.dev/<resource>, in the table's order. */}}
{{- define "hyperlight.companionLabels" -}}
{{- range (include "hyperlight.companionTable" . | fromYamlArray) -}}
{{- if has .name $.Values.companions.enabled }}
- {{ printf "hyperlight.dev/%s" (index $.Values.companions .key).resource | quote }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The main container's env items of the enabled companions (none: nothing). */}}
{{- define "hyperlight.companionEnv" -}}
{{- with include "hyperlight.companions" . }}
- name: COMPANIONS
  value: {{ . | quote }}
{{- end }}
{{- range (include "hyperlight.companionTable" . | fromYamlArray) }}
{{- if has .name $.Values.companions.enabled }}
{{- $c := index $.Values.companions .key }}
- name: {{ .env }}_RESOURCE
  value: {{ $c.resource | quote }}
- name: {{ .env }}_COUNT
  value: {{ $c.count | int64 | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
What the schema cannot say, and api=dra again for a render without schema validation
(--skip-schema-validation): the daemon would exit 1 on either.
*/}}
{{- define "hyperlight.checkCompanions" -}}
{{- if and .Values.companions.enabled (eq .Values.api "dra") -}}
{{- fail (printf "companions.enabled=%s with api=dra: companions are served through the device-plugin API only (COMPANIONS is refused with PLUGIN_API=dra); set api=devicePlugin or companions.enabled=[]" (join "," .Values.companions.enabled)) -}}
{{- end -}}
{{- $seen := dict -}}
{{- range (include "hyperlight.companionTable" . | fromYamlArray) -}}
{{- if has .name $.Values.companions.enabled -}}
{{- $r := (index $.Values.companions .key).resource -}}
{{- if hasKey $seen $r -}}
{{- fail (printf "companions: %s and %s are both hyperlight.dev/%s: give them different companions.*.resource" (index $seen $r) .name $r) -}}
{{- end -}}
{{- $_ := set $seen $r .name -}}
{{- end -}}
{{- end -}}
{{- end -}}
