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

{{/* The address Pulsar lookups name (single node). */}}
{{- define "rosetta.pulsarAdvertised" -}}
{{- if .Values.pulsarAdvertised -}}
{{- .Values.pulsarAdvertised -}}
{{- else -}}
{{- printf "%s.%s.svc.cluster.local:%d" (include "rosetta.fullname" .) .Release.Namespace (int .Values.service.ports.pulsar) -}}
{{- end -}}
{{- end -}}

{{/* The headless Service naming the members. */}}
{{- define "rosetta.headless" -}}
{{- printf "%s-headless" (include "rosetta.fullname" .) -}}
{{- end -}}

{{/* Member n's host (pod n-1 of the StatefulSet, by the headless Service). */}}
{{- define "rosetta.memberHost" -}}
{{- printf "%s-%d.%s.%s.svc.cluster.local" (include "rosetta.fullname" .root) (int .ordinal) (include "rosetta.headless" .root) .root.Release.Namespace -}}
{{- end -}}

{{/* cluster.members: the members the cluster is made with. */}}
{{- define "rosetta.members" -}}
{{- $out := list -}}
{{- range $i := until (int .Values.cluster.members) -}}
{{- $out = append $out (printf "%d=%s" (add $i 1) (include "rosetta.memberHost" (dict "root" $ "ordinal" $i))) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/* cluster.join: the admin API of the members the cluster is made with. */}}
{{- define "rosetta.join" -}}
{{- $out := list -}}
{{- range $i := until (int .Values.cluster.members) -}}
{{- $out = append $out (printf "http://%s:%d" (include "rosetta.memberHost" (dict "root" $ "ordinal" $i)) (int $.Values.service.ports.http)) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/* The secret holding cluster.secret ("" for none). */}}
{{- define "rosetta.secretName" -}}
{{- if .Values.cluster.existingSecret -}}
{{- .Values.cluster.existingSecret -}}
{{- else if .Values.cluster.secret -}}
{{- printf "%s-cluster" (include "rosetta.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the protocol-only nodes' pods. */}}
{{- define "rosetta.protocolSelectorLabels" -}}
app.kubernetes.io/name: {{ include "rosetta.name" . }}-protocol
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
