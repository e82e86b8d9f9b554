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

{{/*
A probe of PATH on the metrics port: HTTP, HTTPS when the endpoint serves
TLS, TCP when it requires client certificates. Called with (list . PATH).
*/}}
{{- define "slowpath.probe" -}}
{{- $ := index . 0 -}}
{{- $path := index . 1 -}}
{{- if $.Values.webConfig.clientCertificateRequired -}}
tcpSocket:
  port: metrics
{{- else -}}
httpGet:
  path: {{ $path }}
  port: metrics
  {{- if $.Values.webConfig.tls }}
  scheme: HTTPS
  {{- end }}
{{- end -}}
{{- end -}}

{{/*
Scheme, TLS, basic auth and bearer token of a ServiceMonitor/PodMonitor
endpoint, from the monitor's values (.scheme, .tlsConfig, .basicAuth,
.bearerTokenFile) and webConfig.tls.
Called with (list . MONITOR-VALUES).
*/}}
{{- define "slowpath.scrapeAuth" -}}
{{- $ := index . 0 -}}
{{- $m := index . 1 -}}
{{- $scheme := $m.scheme | default (ternary "https" "" (eq $.Values.webConfig.tls true)) -}}
{{- with $scheme }}
scheme: {{ . }}
{{- end }}
{{- with $m.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.bearerTokenFile }}
bearerTokenFile: {{ . }}
{{- end }}
{{- end -}}

{{/*
A per-process alert condition joined with the agent's finding for the same
process: the alert keeps its value and gains the finding's known_source label
(the row of files/known-sources.yaml its call sites matched; a matched row
wins over an empty one), and fires as before when the agent holds no such
finding. Arguments: expr (the condition over instance_cgroup_comm series),
findings (a regex of finding ids), proc (the process labels), root.
*/}}
{{/*
The label matchers of a series of the agent in a rule: its own (labels, may
be empty) and prometheusRule.selector, in braces; nothing when both are
empty. Arguments: labels, root.
*/}}
{{- define "slowpath.sel" -}}
{{- $m := compact (list .labels .root.Values.prometheusRule.selector) -}}
{{- if $m }}{{ printf "{%s}" (join ", " $m) }}{{ end -}}
{{- end }}

{{/*
The matcher of the agent's scrape jobs (prometheusRule.jobSelector, or the
release's job regex).
*/}}
{{- define "slowpath.jobSelector" -}}
{{- .Values.prometheusRule.jobSelector | default (printf "job=~%q" (include "slowpath.jobRegex" .)) }}
{{- end }}

{{- define "slowpath.withFinding" -}}
({{ .expr }})
+ on ({{ .proc }}) group_left (known_source)
(0 * topk by ({{ .proc }}) (1,
  2 * slowpath_finding_info{{ include "slowpath.sel" (dict "labels" (printf "finding=~%q, known_source!=\"\"" .findings) "root" .root) }}
  or slowpath_finding_info{{ include "slowpath.sel" (dict "labels" (printf "finding=~%q" .findings) "root" .root) }}))
or on ({{ .proc }})
({{ .expr }})
{{- end }}

{{/*
The absolute URL of docs/runbook.md the alerts link to:
prometheusRule.runbookBaseURL, or when it is empty the project's copy at the
tag of the chart's appVersion (release vX.Y.Z is tagged vX.Y.Z), the runbook
of the version the chart deploys.
*/}}
{{- define "slowpath.runbookBaseURL" -}}
{{- .Values.prometheusRule.runbookBaseURL | default (printf "https://github.com/slowpath/slowpath/blob/v%s/docs/runbook.md" .Chart.AppVersion) }}
{{- end }}

{{/*
An alert's dashboard_url: prometheusRule.grafanaURL plus Drill-down on the
alert's process (view "process": its instance, namespace, pod and comm, the
labels URL-escaped; empty namespace and pod outside Kubernetes select series
without them) or Overview on its node (view "node"). Arguments: view, root.
*/}}
{{- define "slowpath.dashboardURL" -}}
{{- $base := trimSuffix "/" .root.Values.prometheusRule.grafanaURL -}}
{{- if eq .view "process" -}}
{{ $base }}/d/slowpath-drilldown/slowpath-drilldown?var-instance={{`{{ $labels.instance | urlquery }}`}}&var-namespace={{`{{ $labels.namespace | urlquery }}`}}&var-pod={{`{{ $labels.pod | urlquery }}`}}&var-comm={{`{{ $labels.comm | urlquery }}`}}
{{- else -}}
{{ $base }}/d/slowpath-overview/slowpath-overview?var-instance={{`{{ $labels.instance | urlquery }}`}}
{{- end -}}
{{- end }}

{{/*
The agent pod on a node, as a shell command substitution for the commands
an alert gives: kubectl finds it by the release's selector labels and
spec.nodeName. Arguments: root (the chart's top context), node (default the
alert's instance label, the node's name as the ServiceMonitor and PodMonitor
relabel it).
*/}}
{{- define "slowpath.agentPodOfNode" -}}
{{- $sel := list }}
{{- range $k, $v := include "slowpath.selectorLabels" .root | fromYaml }}{{ $sel = append $sel (printf "%s=%s" $k $v) }}{{ end -}}
$(kubectl -n {{ .root.Release.Namespace }} get pod -l {{ join "," $sel }} --field-selector spec.nodeName={{ .node | default `{{ $labels.instance }}` }} -o jsonpath='{.items[0].metadata.name}')
{{- end }}

{{/*
The doctor for a process (by comm) on a node, in the node's agent pod: the
pod's privileges, its environment (the host's sysfs and BTF) and the binary
of the version running; measured there, it fits in the pod's default limits
next to the agent (docs/runbook.md, "Running the doctor"). One line to copy. Arguments: root, node (as
slowpath.agentPodOfNode), comm (default the alert's comm label, quoted).
*/}}
{{- define "slowpath.doctorCommand" -}}
kubectl -n {{ .root.Release.Namespace }} exec {{ include "slowpath.agentPodOfNode" . }} -c slowpath -- slowpath doctor --comm {{ .comm | default `'{{ $labels.comm }}'` }}
{{- end }}

{{/*
The agent's findings on a node (JSON, with evidence and call sites), through
the API server's pod proxy: works wherever kubectl does, with the right to
get pods/proxy; over https when the agent serves TLS. Arguments: root, node
(as slowpath.agentPodOfNode).
*/}}
{{- define "slowpath.findingsCommand" -}}
kubectl get --raw /api/v1/namespaces/{{ .root.Release.Namespace }}/pods/{{ if .root.Values.webConfig.tls }}https:{{ end }}{{ include "slowpath.agentPodOfNode" . }}:{{ .root.Values.service.port }}/proxy/debug/findings
{{- end }}

{{/*
Which commands the alerts give (prometheusRule.fixCommands): "kubernetes",
the kubectl commands above (the agent's pod on the alert's node), or
"host", the commands a person logged in on the node runs (the systemd unit,
the .deb, a bare binary: deploy/prometheus/slowpath-rules-host.yaml).
Anything else fails the render; no such key at all (values an upgrade with
--reuse-values kept from a chart before it) is kubernetes, what the alerts
said then. Argument: the chart's top context.
*/}}
{{- define "slowpath.fixCommands" -}}
{{- $c := "kubernetes" }}
{{- if hasKey .Values.prometheusRule "fixCommands" }}{{ $c = .Values.prometheusRule.fixCommands }}{{ end }}
{{- if not (has $c (list "kubernetes" "host")) }}
{{- fail (printf "prometheusRule.fixCommands must be kubernetes (the alerts give kubectl commands: the doctor in the agent's pod on the alert's node) or host (the commands on the node itself: the systemd unit, the .deb, a bare binary), not %v" $c) }}
{{- end }}
{{- $c }}
{{- end }}

{{/*
The doctor for the alert's process (its comm label), as the alerts give
it: in the node's agent pod (slowpath.doctorCommand), or with fixCommands
host on the node itself, as root, whose privileges load the doctor's own
programs and read every process's call sites (docs/doctor.md). Argument:
root.
*/}}
{{- define "slowpath.alertDoctorCommand" -}}
{{- if eq (include "slowpath.fixCommands" .root) "host" -}}
sudo slowpath doctor --comm {{ `'{{ $labels.comm }}'` }}
{{- else -}}
{{ include "slowpath.doctorCommand" (dict "root" .root) }}
{{- end -}}
{{- end }}

{{/*
The agent's findings on the alert's node, as the alerts give them: through
the API server's pod proxy (slowpath.findingsCommand), or with fixCommands
host from the agent's port on the node itself (service.port, the systemd
unit's default too; https when the agent serves TLS). Argument: root.
*/}}
{{- define "slowpath.alertFindingsCommand" -}}
{{- if eq (include "slowpath.fixCommands" .root) "host" -}}
curl -s {{ ternary "https" "http" (eq .root.Values.webConfig.tls true) }}://localhost:{{ .root.Values.service.port }}/debug/findings
{{- else -}}
{{ include "slowpath.findingsCommand" (dict "root" .root) }}
{{- end -}}
{{- end }}

{{/*
Where the agent's log is, after "the agent's log" in an alert's text:
nothing with fixCommands kubernetes (the pod's log), " (journalctl -u
slowpath)" with host. Argument: the chart's top context.
*/}}
{{- define "slowpath.agentLogCommand" -}}
{{- if eq (include "slowpath.fixCommands" .) "host" }} (journalctl -u slowpath){{ end -}}
{{- end }}

{{/*
The rows of files/known-sources.yaml of the signals named in `signals`, as
YAML {rows: [...]}. Arguments: signals, root.
*/}}
{{- define "slowpath.knownSourceRows" -}}
{{- $all := .root.Files.Get "files/known-sources.yaml" | fromYaml }}
{{- $rows := list }}
{{- range .signals }}{{ $rows = concat $rows (get $all .) }}{{ end -}}
{{- toYaml (dict "rows" $rows) }}
{{- end }}

{{/*
The fix of an alert with a known_source label: the row's fix of
files/known-sources.yaml of the signals named in `signals`, else the doctor
for the process on its node, which names the call sites and the fix.
Arguments: signals (a list of signal names), root (the chart's top context).
*/}}
{{- define "slowpath.fixText" -}}
{{- $rows := (include "slowpath.knownSourceRows" . | fromYaml).rows -}}
{{`{{ if not $labels.known_source }}`}}Run the doctor for the process on its node, which names its call sites and the fix: {{ include "slowpath.alertDoctorCommand" (dict "root" .root) }}
{{- range $rows }}{{`{{ else if eq $labels.known_source "`}}{{ .id }}{{`" }}`}}{{ .fix }}{{ end }}{{`{{ else }}`}}See the runbook's known sources.{{`{{ end }}`}}
{{- end }}

{{/*
The end of a per-process alert's description, for the receivers that show
only summary and description: the fix (the doctor's command when no known
source matched, else the fix and the doctor's command) and the command that
prints the agent's findings on the node; with fixCommands host also slowpath
top and the agent's journal, which a person on the node reads next.
Arguments: as slowpath.fixText.
*/}}
{{- define "slowpath.descriptionFix" -}}
Fix: {{ include "slowpath.fixText" . }}
{{- `{{ if $labels.known_source }}` }} The doctor for the process on its node: {{ include "slowpath.alertDoctorCommand" (dict "root" .root) }}{{ `{{ end }}` }}
The agent's findings on the node, with their call sites: {{ include "slowpath.alertFindingsCommand" (dict "root" .root) }}
{{- if eq (include "slowpath.fixCommands" .root) "host" }}
The node's processes, costliest first, with their findings: slowpath top. The agent's log, which names what it could not read: journalctl -u slowpath.
{{- end }}
{{- end }}

{{/*
The cause and fix annotations of an alert with a known_source label: one
branch per row of files/known-sources.yaml of the signals named in
`signals`, the agent's findings on the node when no row matched. Arguments:
signals (a list of signal names), root (the chart's top context).
*/}}
{{- define "slowpath.causeAnnotations" -}}
{{- $rows := (include "slowpath.knownSourceRows" . | fromYaml).rows -}}
cause: >-
  {{`{{ if not $labels.known_source }}`}}No known source matched the process's sampled call sites (or they could not be sampled): the agent's findings on the node, with their call sites: {{ include "slowpath.alertFindingsCommand" (dict "root" .root) }}
  {{- range $rows }}{{`{{ else if eq $labels.known_source "`}}{{ .id }}{{`" }}`}}{{ .cause }}{{ end }}{{`{{ else }}`}}Known source {{`{{ $labels.known_source }}`}}: see the runbook's known sources.{{`{{ end }}`}}
fix: >-
  {{ include "slowpath.fixText" . }}
{{- end }}

{{/*
A dashboard's JSON text (files/dashboards/, from dashboards/generate.sh) with
the cluster label it selects, groups and joins by, `cluster`, renamed: (list
TEXT LABEL). The cluster variable keeps its name; recorded series named
cluster:... keep theirs. The mixin's grafanaDashboards do the same.
*/}}
{{- define "slowpath.dashboardClusterLabel" -}}
{{- $text := index . 0 }}
{{- $label := index . 1 }}
{{- if ne $label "cluster" }}
{{- $text = $text | replace "cluster=~\\\"$cluster\\\"" (printf "%s=~\\\"$cluster\\\"" $label) }}
{{- $text = $text | replace "by (cluster, " (printf "by (%s, " $label) }}
{{- $text = $text | replace "on (cluster, " (printf "on (%s, " $label) }}
{{- $text = $text | replace "slowpath_build_info, cluster)" (printf "slowpath_build_info, %s)" $label) }}
{{- end }}
{{- $text }}
{{- end }}
