{{- define "tessera.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tessera.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tessera.labels" -}}
{{ include "tessera.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tessera.adminSecretName" -}}
{{- .Values.restrictedApi.existingSecret | default (printf "%s-admin-key" (include "tessera.fullname" .)) -}}
{{- end -}}

{{- define "tessera.restrictedRule" -}}
{{- join "," .Values.restrictedApi.categories }}:{{ .Values.restrictedApi.header }}=$(TESSERA_ADMIN_KEY)
{{- end -}}
