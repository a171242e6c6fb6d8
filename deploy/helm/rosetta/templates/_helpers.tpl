{{/* The chart's name. */}}
{{- define "rosetta.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name. */}}
{{- define "rosetta.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "rosetta.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "rosetta.labels" -}}
app.kubernetes.io/name: {{ include "rosetta.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Labels that select the node's pod. */}}
{{- define "rosetta.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rosetta.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Where Kafka clients are told to connect. */}}
{{- define "rosetta.kafkaAdvertised" -}}
{{- if .Values.kafkaAdvertised -}}
{{- .Values.kafkaAdvertised -}}
{{- else -}}
{{- printf "%s.%s.svc.cluster.local:%d" (include "rosetta.fullname" .) .Release.Namespace (int .Values.service.ports.kafka) -}}
{{- end -}}
{{- end -}}
