// slowpath monitoring mixin, in the kube-prometheus convention:
//
//   prometheusAlerts    the rule groups that hold alerts (with the records
//                       their alerts read: the agent's own CPU)
//   prometheusRules     the recording-rule groups
//   grafanaDashboards   the dashboards, by file name
//   _config             thresholds, `for` durations, the runbook's URL and
//                       label selectors (below)
//
// Nothing here is a second copy: the rules are the Helm chart's
// PrometheusRule (deploy/helm/slowpath/templates/prometheusrule.yaml),
// rendered by deploy/render.sh with a placeholder for every _config setting
// (rules.template.json), and the defaults are the chart's values. With the
// defaults it renders exactly deploy/prometheus/slowpath-rules.yaml and
// dashboards/*.json (tests/e2e/test_mixin.py).
//
local values = std.parseYaml(importstr '../helm/slowpath/values.yaml').prometheusRule;
local template = import 'rules.template.json';

{
  _config+:: {
    // PromQL label matchers (without braces) added to every series of the
    // agent the rules read, e.g. 'cluster="eu1"'; empty: every slowpath_*.
    slowpathSelector: values.selector,
    // The matcher of the agent's scrape jobs (SlowpathAgentDown, the
    // agent's own CPU).
    slowpathJobSelector: if values.jobSelector != '' then values.jobSelector else 'job=~".*slowpath.*"',
    // Alert thresholds and durations: docs/runbook.md explains each default.
    slowpathThresholds: values.thresholds,
    slowpathFor: values['for'],
    // The runbook's URL: the chart's value, or when empty the chart's
    // default, the project's runbook of the chart's appVersion.
    slowpathRunbookBaseURL: if values.runbookBaseURL != '' then values.runbookBaseURL else template.defaultRunbookBaseURL,
    // Your Grafana's external URL, which each alert's dashboard_url starts
    // with (the chart's prometheusRule.grafanaURL); empty: the path alone.
    slowpathGrafanaURL: values.grafanaURL,
    // The label that names a cluster (kubernetes-mixin's clusterLabel): every
    // aggregate, recorded rate and join keeps it, so a central ruler keeps
    // clusters apart; series without it give what one cluster's rules give.
    clusterLabel: values.clusterLabel,
    // Where the agent runs, for the kubectl commands in the alerts'
    // descriptions (the doctor in the alert's node's agent pod, the agent's
    // findings through the API server's pod proxy): its namespace and its
    // Helm release (the pods' app.kubernetes.io/instance label). The
    // defaults are deploy/kubernetes/slowpath.yaml's.
    slowpathNamespace: 'slowpath',
    slowpathRelease: 'slowpath',
  },

  local config = self._config,

  // A threshold as the chart prints it: 10000, 0.05 (jsonnet's own
  // std.toString(0.05) is 0.050000000000000003).
  local number(x) =
    if std.isNumber(x) then (if std.floor(x) == x then std.format('%d', x) else std.format('%g', x))
    else x,

  // Every setting and its placeholder, computed once and not for each of the
  // template's strings: std.format (number) is jsonnet code, and per string
  // it is most of a render's time.
  local settings =
    [['__t_%s__' % k, number(config.slowpathThresholds[k])] for k in std.objectFields(config.slowpathThresholds)]
    + [['__for_%s__' % k, config.slowpathFor[k]] for k in std.objectFields(config.slowpathFor)]
    + [['__runbook__', config.slowpathRunbookBaseURL], ['__grafana__', std.rstripChars(config.slowpathGrafanaURL, '/')],
       ['__cluster__', config.clusterLabel],
       ['__job__', config.slowpathJobSelector],
       ['__namespace__', config.slowpathNamespace], ['__release__', config.slowpathRelease]],

  local fill(s) =
    local selector =
      if config.slowpathSelector == '' then
        std.strReplace(std.strReplace(s, '{__selector__}', ''), ', __selector__', '')
      else std.strReplace(s, '__selector__', config.slowpathSelector);
    std.foldl(function(acc, kv) std.strReplace(acc, kv[0], kv[1]), settings, selector),

  local filled(v) =
    if std.isString(v) then fill(v)
    else if std.isArray(v) then std.map(filled, v)
    else if std.isObject(v) then { [k]: filled(v[k]) for k in std.objectFields(v) }
    else v,

  local groups = filled(template.groups),
  local hasAlerts(g) = std.length([r for r in g.rules if std.objectHas(r, 'alert')]) > 0,

  prometheusAlerts+:: {
    groups+: [g for g in groups if hasAlerts(g)],
  },

  prometheusRules+:: {
    groups+: [g for g in groups if !hasAlerts(g)],
  },

  // The dashboards' cluster variable selects, groups and joins by the label
  // `cluster`; another clusterLabel is written into each of those instead
  // (the chart's grafanaDashboards do the same: slowpath.dashboardClusterLabel).
  local dashboard(text) =
    local l = config.clusterLabel;
    local renames = [
      ['cluster=~\\"$cluster\\"', l + '=~\\"$cluster\\"'],
      ['by (cluster, ', 'by (' + l + ', '],
      ['on (cluster, ', 'on (' + l + ', '],
      ['slowpath_build_info, cluster)', 'slowpath_build_info, ' + l + ')'],
    ];
    std.parseJson(if l == 'cluster' then text else std.foldl(function(acc, kv) std.strReplace(acc, kv[0], kv[1]), renames, text)),

  grafanaDashboards+:: {
    'slowpath-overview.json': dashboard(importstr '../../dashboards/slowpath-overview.json'),
    'slowpath-drilldown.json': dashboard(importstr '../../dashboards/slowpath-drilldown.json'),
    'slowpath-fleet.json': dashboard(importstr '../../dashboards/slowpath-fleet.json'),
  },
}
