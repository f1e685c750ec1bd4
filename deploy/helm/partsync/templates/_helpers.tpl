{{- define "partsync.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "partsync.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "partsync.selectorLabels" -}}
app.kubernetes.io/name: {{ include "partsync.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "partsync.labels" -}}
{{ include "partsync.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "partsync.configMapName" -}}
{{- default (include "partsync.fullname" .) .Values.existingConfigMap -}}
{{- end -}}

{{- define "partsync.secretName" -}}
{{- default (include "partsync.fullname" .) .Values.secret.existingSecret -}}
{{- end -}}

{{- define "partsync.hasSecret" -}}
{{- if or .Values.secret.existingSecret .Values.secret.files -}}true{{- end -}}
{{- end -}}
