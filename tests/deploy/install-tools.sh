#!/usr/bin/env bash
# Installs the tools the chart and Prometheus tests (tests/e2e/test_helm.py,
# the Prometheus-side tests through tests/e2e/helpers/tools.py) need, idempotently,
# into a cache outside the repository (default /var/cache/slowpath-tools,
# override with SLOWPATH_TOOLS_CACHE), and prints the cache path on stdout:
#
#   bin/helm          helm, built from its Go module (no release tarballs can be
#                     fetched here: only package registries are reachable)
#   bin/kubeconform   kubeconform, built from its Go module
#   bin/actionlint    actionlint (GitHub Actions workflows), from its Go module
#   bin/sp-crdcheck   strict decoder for ServiceMonitor/PodMonitor/PrometheusRule
#                     (the prometheus-operator's own Go API types; see below)
#   bin/sp-opconfig   the Prometheus configuration the Prometheus Operator
#                     generates for the chart's ServiceMonitor and PodMonitor, by
#                     the operator's own code (tests/deploy/opconfig, its module
#                     pinned there: the only version of the operator's main
#                     module the Go module proxy serves here is v0.85.0)
#   prometheus3/bin/  prometheus and promtool of Prometheus 3, built from the
#                     Go module github.com/prometheus/prometheus (its v0.3xx.y
#                     is Prometheus 3.xx.y; no replace directives, so `go
#                     install` builds it; the web UI's assets are not embedded:
#                     the tests use the HTTP API)
#   thanos/bin/thanos Thanos (receive, query, rule: the distributed backend of
#                     scripts/fleet-sim.sh and tests/e2e/test_fleet_backend.py),
#                     built from github.com/thanos-io/thanos through a wrapper
#                     module that copies its replace directives (`go install`
#                     refuses a module that has them)
#   venv/             PyPI kubernetes-validate, which bundles the Kubernetes
#                     JSON schemas for 1.25-1.37 (and validates with them itself)
#   schemas/          those schemas rewritten for kubeconform (see below)
#
# Cold about 15 minutes on an idle 2-core machine (Prometheus 3: 5 min, helm:
# 2.5 min, Thanos: 3 min measured with its modules already downloaded, so
# about 5 min cold; 7.5 minutes for helm alone while other builds shared the
# CPUs; sp-opconfig: 6 min alone, 50 s of it downloading, on 2 busy cores,
# 2.2 min after the others), warm
# 0.05 s.
# Only the Go module proxy and PyPI are used.
#
#   install-tools.sh --check   builds nothing: exits 1 naming every tool that
#                              is missing or stale (a test's way to find out)
set -euo pipefail
check=0
[[ ${1:-} == --check ]] && check=1

# Pinned versions: bump deliberately, the tests' expectations follow them.
HELM_VERSION=v3.22.0
KUBECONFORM_VERSION=v0.8.0
ACTIONLINT_VERSION=v1.7.12
KUBERNETES_VALIDATE_VERSION=1.37.0          # schemas 1.25 .. 1.37
PROMETHEUS_OPERATOR_API_VERSION=v0.94.1     # github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring
SIGS_YAML_VERSION=v1.6.0                    # sigs.k8s.io/yaml
PROMETHEUS_MODULE_VERSION=v0.316.0          # github.com/prometheus/prometheus: Prometheus 3.16.0
THANOS_VERSION=v0.42.4                      # the newest whose go.mod this Go (1.26.x) builds (v0.42.5 wants 1.26.10)

cache=${SLOWPATH_TOOLS_CACHE:-/var/cache/slowpath-tools}
log() { echo "install-tools.sh: $*" >&2; }

# --check reads the stamps only: no lock (a build under way may hold it),
# nothing created.
stale=()
if ((check)); then
  [[ -d $cache ]] || { log "no cache $cache: run scripts/setup.sh --test"; exit 1; }
  cache=$(cd "$cache" && pwd)
else
  mkdir -p "$cache/bin"
  cache=$(cd "$cache" && pwd)
  # One installer at a time (pytest sessions or humans may race).
  exec 9>"$cache/.install-tools.lock"
  flock 9
fi

# A stamp per tool records what was installed; a changed pin reinstalls.
have() { [[ -e "$cache/$1" && "$(cat "$cache/.stamp-$2" 2>/dev/null)" == "$3" ]]; }
stamp() { echo "$2" >"$cache/.stamp-$1"; }
# `if ! have ... && build NAME`: true when NAME is to be built now; with
# --check it only records NAME as missing.
build() { ((check)) && { stale+=("$1"); return 1; }; return 0; }

# Go builds stay inside the cache too (module and build caches), so a cold run
# is really cold and nothing outside the cache is touched. GOTOOLCHAIN=local:
# never try to download another Go toolchain, fail instead.
export GOPATH="$cache/go" GOMODCACHE="$cache/go/pkg/mod" GOCACHE="$cache/go/build-cache"
export GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -modcacherw" CGO_ENABLED=0
need_go() { command -v go >/dev/null || { log "go is not installed (needed to build $1)"; exit 1; }; }

# helm's release build (its Makefile) stamps its version and the Kubernetes
# version it assumes without a cluster (.Capabilities.KubeVersion for
# `helm template`/`lint`) through -ldflags; a bare `go install` leaves the
# latter at v1.20.0, which our chart's kubeVersion (>=1.25) rejects. Same
# flags here, the Kubernetes minor taken from helm's client-go like the Makefile.
if ! have bin/helm helm "$HELM_VERSION" && build helm; then
  log "building helm $HELM_VERSION (about 150 s cold)"
  need_go helm
  helm_mod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  k8s_minor=$(awk '$1 == "k8s.io/client-go" { split($2, v, "."); print v[2] }' "$helm_mod")
  [[ $k8s_minor =~ ^[0-9]+$ ]] || { log "cannot find helm's client-go version in $helm_mod"; exit 1; }
  GOBIN="$cache/bin" go install -trimpath -ldflags="-s -w \
    -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
    -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$k8s_minor \
    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$k8s_minor" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  stamp helm "$HELM_VERSION"
fi

if ! have bin/kubeconform kubeconform "$KUBECONFORM_VERSION" && build kubeconform; then
  log "building kubeconform $KUBECONFORM_VERSION"
  need_go kubeconform
  GOBIN="$cache/bin" go install -trimpath -ldflags="-s -w" "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
  stamp kubeconform "$KUBECONFORM_VERSION"
fi

# actionlint checks .github/workflows (tests/e2e/test_release.py); its
# version stamp as its release build sets it.
if ! have bin/actionlint actionlint "$ACTIONLINT_VERSION" && build actionlint; then
  log "building actionlint $ACTIONLINT_VERSION"
  need_go actionlint
  GOBIN="$cache/bin" go install -trimpath \
    -ldflags="-s -w -X github.com/rhysd/actionlint.version=${ACTIONLINT_VERSION#v}" \
    "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
  stamp actionlint "$ACTIONLINT_VERSION"
fi

# Prometheus 3 and its promtool, with the version they report stamped as
# Prometheus' own build does (.promu.yml: github.com/prometheus/common/version).
if ! have prometheus3/bin/promtool prometheus3 "$PROMETHEUS_MODULE_VERSION" && build prometheus3; then
  log "building prometheus and promtool $PROMETHEUS_MODULE_VERSION (about 5 min cold)"
  need_go prometheus
  mkdir -p "$cache/prometheus3/bin"
  GOBIN="$cache/prometheus3/bin" go install -trimpath \
    -ldflags="-s -w -X github.com/prometheus/common/version.Version=3.${PROMETHEUS_MODULE_VERSION#v0.3}" \
    "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_MODULE_VERSION" \
    "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION"
  stamp prometheus3 "$PROMETHEUS_MODULE_VERSION"
fi

# Thanos: its go.mod replaces six modules, and the replace directives of a
# dependency are ignored, so the wrapper module copies them from Thanos' own
# go.mod; the build list is then Thanos' own. Build tags and version stamp as
# its .promu.yml has them: without `slicelabels` Prometheus' labels package
# takes another memory layout than Thanos assumes, and query and receive
# panic at their first gRPC call.
THANOS_RECIPE="$THANOS_VERSION tags=netgo,slicelabels"
if ! have thanos/bin/thanos thanos "$THANOS_RECIPE" && build thanos; then
  log "building thanos $THANOS_VERSION (about 5 min cold)"
  need_go thanos
  src="$cache/thanos/src"
  rm -rf "$src"
  mkdir -p "$src" "$cache/thanos/bin"
  thanos_mod=$(cd "$src" && go mod download -json "github.com/thanos-io/thanos@$THANOS_VERSION" |
    sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  [[ -f "$thanos_mod" ]] || { log "cannot download github.com/thanos-io/thanos@$THANOS_VERSION"; exit 1; }
  {
    echo "module slowpath.local/thanos"
    echo
    sed -n 's/^go \([0-9.]*\)$/go \1/p' "$thanos_mod"
    echo
    echo "require github.com/thanos-io/thanos $THANOS_VERSION"
    echo
    sed -n '/^replace (/,/^)/p' "$thanos_mod"
  } >"$src/go.mod"
  (cd "$src" && go get "github.com/thanos-io/thanos/cmd/thanos@$THANOS_VERSION" &&
    go build -mod=mod -trimpath -tags netgo,slicelabels -o "$cache/thanos/bin/thanos.tmp" \
      -ldflags="-s -w -X github.com/prometheus/common/version.Version=${THANOS_VERSION#v}" \
      github.com/thanos-io/thanos/cmd/thanos)
  mv -f "$cache/thanos/bin/thanos.tmp" "$cache/thanos/bin/thanos"
  stamp thanos "$THANOS_RECIPE"
fi

# kubernetes-validate in its own venv (Debian's Python refuses a system-wide
# pip install; PEP 668). Its wheel carries the schemas, so nothing is
# downloaded at validation time.
if ! have venv/bin/kubernetes-validate kubernetes-validate "$KUBERNETES_VALIDATE_VERSION" && build kubernetes-validate; then
  log "installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION into $cache/venv"
  rm -rf "$cache/venv"
  /usr/bin/python3 -m venv "$cache/venv"
  "$cache/venv/bin/pip" install --quiet --disable-pip-version-check \
    "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
  rm -rf "$cache/schemas"
  stamp kubernetes-validate "$KUBERNETES_VALIDATE_VERSION"
fi

# kubeconform reads schemas from a directory laid out like
# yannh/kubernetes-json-schema: <vX.Y.Z>-standalone-strict/<kind>-<group>-<version>.json.
# kubernetes-validate's bundle uses the same file names (v1.27.0-local-strict/
# daemonset-apps-v1.json), but each file declares an "$id" under
# https://kubernetes.io/api/ and refers to "/api/_definitions.json#/...",
# which resolves to a URL kubernetes-validate serves from memory and
# kubeconform would try to download (and, offline, report as "could
# not find schema"). Turning the $id into a $comment and the refs into
# sibling-relative ones ("_definitions.json#/...") makes the very same schemas
# resolve from disk: two independent validators, one set of schemas.
if [[ ! -e "$cache/schemas/.complete" ]] && build schemas; then
  log "preparing kubeconform schemas from kubernetes-validate's bundle"
  src=$("$cache/venv/bin/python" -c \
    'import kubernetes_validate, os; print(os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema"))')
  rm -rf "$cache/schemas.tmp"
  mkdir -p "$cache/schemas.tmp"
  for dir in "$src"/v*-local-strict; do
    name=$(basename "$dir")
    out="$cache/schemas.tmp/${name%-local-strict}-standalone-strict"
    cp -r "$dir" "$out"
    find "$out" -name '*.json' -exec sed -i \
      -e 's#"\$id": "https://kubernetes\.io/api/#"$comment": "was https://kubernetes.io/api/#' \
      -e 's#"/api/_definitions\.json\##"_definitions.json\##g' {} +
  done
  rm -rf "$cache/schemas"
  mv "$cache/schemas.tmp" "$cache/schemas"
  touch "$cache/schemas/.complete"
fi

# The Prometheus operator's custom resources have no schema in either bundle.
# sp-crdcheck decodes each ServiceMonitor/PodMonitor/PrometheusRule into the
# operator's own Go API types with unknown fields and duplicate keys rejected:
# a misspelt or misplaced field, or a list where a map belongs, fails, as it
# would against the CRD's structural schema. It does not check the schema's
# patterns and enums, and (like sigs.k8s.io/yaml) takes a number where a
# string is expected.
crdcheck_go_mod() {
  cat <<EOF
module slowpath.local/crdcheck

go 1.22

require (
	github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring $PROMETHEUS_OPERATOR_API_VERSION
	sigs.k8s.io/yaml $SIGS_YAML_VERSION
)
EOF
}
crdcheck_main_go() {
  cat <<'EOF'
// sp-crdcheck FILE...: strictly decodes every monitoring.coreos.com/v1
// ServiceMonitor, PodMonitor and PrometheusRule in the YAML streams given
// into the prometheus-operator's Go types. Prints one line per object;
// exits 1 if any object fails, 2 on unreadable input. Other kinds are
// reported as "skip" (they are the Kubernetes schema validators' job).
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

func main() {
	failed := false
	for _, path := range os.Args[1:] {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
		for {
			doc, err := reader.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, path, err)
				os.Exit(2)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var meta typeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				fmt.Printf("FAIL %s: %v\n", path, err)
				failed = true
				continue
			}
			var obj interface{}
			if meta.APIVersion == "monitoring.coreos.com/v1" {
				switch meta.Kind {
				case "ServiceMonitor":
					obj = &monitoringv1.ServiceMonitor{}
				case "PodMonitor":
					obj = &monitoringv1.PodMonitor{}
				case "PrometheusRule":
					obj = &monitoringv1.PrometheusRule{}
				}
			}
			id := fmt.Sprintf("%s %s/%s", meta.APIVersion, meta.Kind, meta.Metadata.Name)
			if obj == nil {
				fmt.Printf("skip %s\n", id)
				continue
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				fmt.Printf("FAIL %s: %v\n", id, err)
				failed = true
				continue
			}
			fmt.Printf("ok %s\n", id)
		}
		f.Close()
	}
	if failed {
		os.Exit(1)
	}
}
EOF
}
# Rebuilt when a pin or the source above changes.
crd_pin="$PROMETHEUS_OPERATOR_API_VERSION $SIGS_YAML_VERSION $( (crdcheck_go_mod; crdcheck_main_go) | sha256sum | cut -c1-16)"
if ! have bin/sp-crdcheck crdcheck "$crd_pin" && build crdcheck; then
  log "building sp-crdcheck (prometheus-operator API $PROMETHEUS_OPERATOR_API_VERSION)"
  need_go sp-crdcheck
  src="$cache/crdcheck-src"
  rm -rf "$src"
  mkdir -p "$src"
  crdcheck_go_mod >"$src/go.mod"
  crdcheck_main_go >"$src/main.go"
  (cd "$src" && go mod tidy >&2 && go build -trimpath -ldflags=-s -o "$cache/bin/sp-crdcheck" .)
  stamp crdcheck "$crd_pin"
fi

# sp-opconfig: tests/deploy/opconfig's go.mod and go.sum pin the operator
# and everything it builds with; rebuilt when they or its source change.
opconfig_src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/opconfig"
opconfig_pin="$(cat "$opconfig_src"/go.mod "$opconfig_src"/go.sum "$opconfig_src"/*.go | sha256sum | cut -c1-16)"
if ! have bin/sp-opconfig opconfig "$opconfig_pin" && build opconfig; then
  log "building sp-opconfig ($(sed -n 's|^\tgithub.com/prometheus-operator/prometheus-operator \(v.*\)$|prometheus-operator \1|p' "$opconfig_src/go.mod"))"
  need_go sp-opconfig
  (cd "$opconfig_src" && go build -mod=readonly -trimpath -ldflags=-s -o "$cache/bin/sp-opconfig" .)
  stamp opconfig "$opconfig_pin"
fi

if ((${#stale[@]})); then
  log "missing or stale in $cache: ${stale[*]} (run scripts/setup.sh --test)"
  exit 1
fi
echo "$cache"
