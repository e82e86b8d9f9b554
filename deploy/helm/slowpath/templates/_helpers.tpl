{{/* Name of the chart, overridable (used in labels). */}}
{{- define "slowpath.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Object names: the release name when it already contains the chart name
(`helm install slowpath ...` gives "slowpath", not "slowpath-slowpath"),
else "<release>-slowpath". 63 characters at most (DNS label).
*/}}
{{- define "slowpath.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "slowpath.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "slowpath.labels" -}}
helm.sh/chart: {{ include "slowpath.chart" . }}
{{ include "slowpath.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: node-agent
{{- end }}

{{/*
Selector labels: immutable once the DaemonSet exists, so nothing that changes
between upgrades (versions) goes here.
*/}}
{{- define "slowpath.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slowpath.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "slowpath.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "slowpath.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, or repository@digest when a digest is pinned. */}}
{{- define "slowpath.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
Regex matching the Prometheus `job` of the agent's targets: a ServiceMonitor
names the job after the Service ("<fullname>"), a PodMonitor
"<namespace>/<podmonitor name>"; both contain the fullname. (A "." in a
release name then matches any character: harmless, and PromQL strings would
need "\\." to escape it.)
*/}}
{{- define "slowpath.jobRegex" -}}
{{- printf ".*%s.*" (include "slowpath.fullname" .) }}
{{- end }}
