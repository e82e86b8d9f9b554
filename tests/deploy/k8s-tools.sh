#!/usr/bin/env bash
# Builds a real (small) Kubernetes control plane for the e2e tests
# (tests/e2e/test_k8s.py via tests/deploy/k8s_cluster.py), idempotently, into a
# cache outside the repository (default /var/cache/slowpath-tools/k8s, override
# with SLOWPATH_TOOLS_CACHE), and prints the directory holding the binaries on
# stdout (progress and timings go to stderr):
#
#   bin/kube-apiserver            k8s.io/kubernetes/cmd/kube-apiserver
#   bin/kube-controller-manager   creates the DaemonSet's pods, ServiceAccount tokens, ...
#   bin/kube-scheduler            binds the DaemonSet's pods: since ScheduleDaemonSetPods
#                                 (GA in 1.17) the DaemonSet controller does NOT set
#                                 spec.nodeName, it pins each pod to its node with a
#                                 node affinity on metadata.name and the scheduler binds it
#   bin/kubectl                   same version as the server (the image's kubectl is a
#                                 google-cloud-sdk dispatcher, 1.27-1.33 only)
#   bin/etcd                      go.etcd.io/etcd/server/v3/etcdmain
#   bin/kwok                      sigs.k8s.io/kwok/cmd/kwok: fakes kubelets (node
#                                 heartbeats, pod status) for fake Node objects
#   share/kwok-stages.yaml        the Stage objects kwok needs (kwokctl's defaults)
#
# and a real node's (tests/deploy/k8s_node.py, tests/e2e/test_real_node.py):
#
#   bin/kubelet, bin/kube-proxy   k8s.io/kubernetes/cmd/{kubelet,kube-proxy}, the
#                                 control plane's version, from the same wrapper
#   bin/containerd, bin/ctr,      github.com/containerd/containerd/v2 (2.x); runc
#   bin/containerd-shim-runc-v2   is Debian's (scripts/setup.sh --test)
#   share/containerd.service      containerd's upstream unit, whose limits the
#                                 test gives its containerd
#   cni/bridge, cni/host-local,   github.com/containernetworking/plugins
#   cni/loopback, cni/portmap
#
# No release tarball can be fetched here (only package registries are
# reachable), so everything is built from the Go module proxy. The wrapper
# modules (go.mod, main.go) are generated below, inside the cache.
#
# Cold about 15-20 minutes on 2 cores for the control plane (downloads +
# compiling kubernetes; 19 min measured with other builds competing for the
# CPUs); the node's binaries add about 5 (kubelet and kube-proxy 66 s once the
# control plane is in the build cache, containerd 235 s, the CNI plugins 23 s,
# also measured under competition). Warm well under a second. Safe to run
# concurrently: one builder at a time (flock).
#
#   k8s-tools.sh --check   builds nothing: exits 1 naming every component that
#                          is missing or stale (a test's way to find out)
set -euo pipefail
check=0
[[ ${1:-} == --check ]] && check=1

# Pinned versions: bump deliberately.
KUBERNETES_VERSION=v1.36.4   # staging modules k8s.io/* at v0.36.4
ETCD_VERSION=v3.6.8          # what kubernetes 1.36 builds and tests with (build/dependencies.yaml)
KWOK_VERSION=v0.8.0          # built against k8s.io/* v0.36
CONTAINERD_VERSION=v2.4.2    # github.com/containerd/containerd/v2
CNI_PLUGINS_VERSION=v1.10.0  # github.com/containernetworking/plugins

# Bump when the build recipe below changes in a way that needs a rebuild.
RECIPE=1

cache=${SLOWPATH_TOOLS_CACHE:-/var/cache/slowpath-tools/k8s}
t_start=$SECONDS
log() { echo "k8s-tools.sh: [$((SECONDS - t_start))s] $*" >&2; }

# --check reads the stamps only: no lock (a build under way holds it for
# minutes), nothing created.
stale=()
if ((check)); then
  [[ -d $cache ]] || { log "no cache $cache: run scripts/setup.sh --test"; exit 1; }
  cache=$(cd "$cache" && pwd)
else
  mkdir -p "$cache/bin"
  cache=$(cd "$cache" && pwd)
  exec 9>"$cache/.lock"
  flock 9
fi

have() { # stamp-name value binaries...
  local name=$1 value=$2
  shift 2
  [[ "$(cat "$cache/.stamp-$name" 2>/dev/null)" == "$value" ]] || return 1
  local b
  for b in "$@"; do [[ -x "$cache/bin/$b" ]] || return 1; done
}
stamp() { echo "$2" >"$cache/.stamp-$1"; }
# `if ! have ... && build NAME`: true when NAME is to be built now; with
# --check it only records NAME as missing.
build() { ((check)) && { stale+=("$1"); return 1; }; return 0; }

# Go state stays inside the cache (module and build caches); GOTOOLCHAIN=local:
# never download another Go toolchain, fail instead. Static binaries.
export GOPATH="$cache/go" GOMODCACHE="$cache/go/pkg/mod" GOCACHE="$cache/go/build-cache"
export GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -modcacherw" CGO_ENABLED=0
export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}
command -v go >/dev/null || [[ ! -x /usr/local/go/bin/go ]] || PATH="/usr/local/go/bin:$PATH"
((check)) || command -v go >/dev/null || { log "go is not installed"; exit 1; }

# go build -o DIR of several main packages, then move the results into bin/
# (a reader never sees a half-written binary).
build_into_bin() { # module-dir ldflags packages...
  local dir=$1 ldflags=$2
  shift 2
  local out="$cache/bin/.tmp.$$"
  rm -rf "$out"
  mkdir -p "$out"
  (cd "$dir" && go build -mod=mod -trimpath -ldflags "-s -w $ldflags" -o "$out/" "$@")
  local f
  for f in "$out"/*; do mv -f "$f" "$cache/bin/"; done
  rmdir "$out"
}

# --- the kubernetes wrapper module ---------------------------------------------
# k8s.io/kubernetes replaces its staging modules with ./staging/src/k8s.io/X;
# replace directives of a dependency are ignored, so the wrapper must pin each
# of them to its published release v0.<minor>.<patch>. The list is read from
# kubernetes' own go.mod so that a version bump picks up new staging modules.
# Sets k8s_src (the module's directory) and k8s_ldflags.
kubernetes_wrapper() {
  k8s_src="$cache/src/kubernetes"
  local src=$k8s_src
  if [[ "$(cat "$src/.version" 2>/dev/null)" != "$KUBERNETES_VERSION" ]]; then
    rm -rf "$src"
    mkdir -p "$src"
    local dl k8s_mod staging_version staging go_line m
    dl=$(cd "$src" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION") || {
      log "cannot download k8s.io/kubernetes@$KUBERNETES_VERSION:"; echo "$dl" >&2; exit 1; }
    k8s_mod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' <<<"$dl")
    [[ -f "$k8s_mod" ]] || { log "no go.mod for k8s.io/kubernetes@$KUBERNETES_VERSION:"; echo "$dl" >&2; exit 1; }
    staging_version="v0.${KUBERNETES_VERSION#v1.}"
    staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/.*#\1#p' "$k8s_mod")
    [[ -n "$staging" ]] || { log "no staging replaces found in $k8s_mod"; exit 1; }
    go_line=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$k8s_mod")
    {
      echo "module slowpath.local/k8s-tools"
      echo
      echo "go $go_line"
      echo
      echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
      echo
      echo "replace ("
      for m in $staging; do echo "	$m => $m $staging_version"; done
      echo ")"
    } >"$src/go.mod"
    echo "$KUBERNETES_VERSION" >"$src/.version"
    log "wrapper go.mod: $(wc -w <<<"$staging") staging modules pinned to $staging_version"
  fi
  # Version stamps as kubernetes' own build sets them (hack/lib/version.sh);
  # without them the binaries report v0.0.0-master and kubectl warns of skew.
  local minor=${KUBERNETES_VERSION#v1.} pkg
  minor=${minor%%.*}
  k8s_ldflags=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
}

# --- kube-apiserver, kube-controller-manager, kube-scheduler, kubectl ---------
k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
if ! have kubernetes "$KUBERNETES_VERSION/$RECIPE" "${k8s_bins[@]}" && build kubernetes; then
  t0=$SECONDS
  log "building kubernetes $KUBERNETES_VERSION: ${k8s_bins[*]} (about 15 min cold)"
  kubernetes_wrapper
  build_into_bin "$k8s_src" "$k8s_ldflags" $(printf 'k8s.io/kubernetes/cmd/%s ' "${k8s_bins[@]}")
  stamp kubernetes "$KUBERNETES_VERSION/$RECIPE"
  log "kubernetes built in $((SECONDS - t0))s"
fi

# --- kubelet, kube-proxy: a real node -----------------------------------------
# Same wrapper and flags; mostly the control plane's packages, so a few
# minutes more once those are in the build cache. This host is cgroup v1
# (hybrid): kubelet 1.35+ runs there only with failCgroupV1: false in its
# configuration (tests/deploy/k8s_node.py sets it).
node_bins=(kubelet kube-proxy)
if ! have kubernetes-node "$KUBERNETES_VERSION/$RECIPE" "${node_bins[@]}" && build kubernetes-node; then
  t0=$SECONDS
  log "building kubernetes $KUBERNETES_VERSION: ${node_bins[*]}"
  kubernetes_wrapper
  build_into_bin "$k8s_src" "$k8s_ldflags" $(printf 'k8s.io/kubernetes/cmd/%s ' "${node_bins[@]}")
  stamp kubernetes-node "$KUBERNETES_VERSION/$RECIPE"
  log "kubelet, kube-proxy built in $((SECONDS - t0))s"
fi

# --- containerd 2.x -----------------------------------------------------------
# Its module has no replace directives: go install builds it. Static (no cgo):
# the btrfs snapshotter, which needs cgo, is left out (overlayfs is the one
# used). Version stamped as containerd's Makefile does. Its upstream unit file
# (the limits containerd's containers inherit) is kept beside the binaries.
containerd_bins=(containerd ctr containerd-shim-runc-v2)
if { ! have containerd "$CONTAINERD_VERSION/$RECIPE" "${containerd_bins[@]}" ||
     [[ ! -s "$cache/share/containerd.service" ]]; } && build containerd; then
  t0=$SECONDS
  log "building containerd $CONTAINERD_VERSION"
  mod=github.com/containerd/containerd/v2
  GOBIN="$cache/bin" go install -trimpath -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags="-s -w -X $mod/version.Version=$CONTAINERD_VERSION -X $mod/version.Revision=module" \
    $(printf "$mod/cmd/%s@$CONTAINERD_VERSION " "${containerd_bins[@]}")
  dir=$(cd "$cache" && go mod download -json "$mod@$CONTAINERD_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  mkdir -p "$cache/share"
  cp "$dir/containerd.service" "$cache/share/containerd.service"
  stamp containerd "$CONTAINERD_VERSION/$RECIPE"
  log "containerd built in $((SECONDS - t0))s"
fi

# --- CNI plugins ----------------------------------------------------------------
cni_plugins=(main/bridge ipam/host-local main/loopback meta/portmap)
if ! have cni "$CNI_PLUGINS_VERSION/$RECIPE" ../cni/bridge ../cni/host-local ../cni/loopback ../cni/portmap && build cni; then
  t0=$SECONDS
  log "building CNI plugins $CNI_PLUGINS_VERSION"
  mkdir -p "$cache/cni"
  GOBIN="$cache/cni" go install -trimpath -ldflags="-s -w" \
    $(printf "github.com/containernetworking/plugins/plugins/%s@$CNI_PLUGINS_VERSION " "${cni_plugins[@]}")
  stamp cni "$CNI_PLUGINS_VERSION/$RECIPE"
  log "CNI plugins built in $((SECONDS - t0))s"
fi

# --- etcd ---------------------------------------------------------------------
if ! have etcd "$ETCD_VERSION/$RECIPE" etcd && build etcd; then
  t0=$SECONDS
  log "building etcd $ETCD_VERSION"
  # go.etcd.io/etcd/server/v3's go.mod replaces its sibling modules with
  # relative paths, so `go install ...@version` refuses it: a wrapper main.
  src="$cache/src/etcd"
  rm -rf "$src"
  mkdir -p "$src"
  cat >"$src/go.mod" <<EOF
module slowpath.local/etcd

go 1.26.0

require (
	go.etcd.io/etcd/api/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/v3 $ETCD_VERSION
	go.etcd.io/etcd/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/server/v3 $ETCD_VERSION
)
EOF
  cat >"$src/main.go" <<'EOF'
// etcd, as go.etcd.io/etcd/server/v3's own main.go.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
EOF
  (cd "$src" && go mod tidy)
  build_into_bin "$src" "" .   # named after the module's last element: etcd
  stamp etcd "$ETCD_VERSION/$RECIPE"
  log "etcd built in $((SECONDS - t0))s"
fi

# --- kwok ---------------------------------------------------------------------
if ! have kwok "$KWOK_VERSION/$RECIPE" kwok && build kwok; then
  t0=$SECONDS
  log "building kwok $KWOK_VERSION"
  GOBIN="$cache/bin" go install -trimpath -ldflags="-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  stamp kwok "$KWOK_VERSION/$RECIPE"
  log "kwok built in $((SECONDS - t0))s"
fi

# --- kwok stages ------------------------------------------------------------------
# The kwok binary simulates nothing without Stage objects (kwokctl normally
# writes them). share/kwok-stages.yaml holds kwokctl's defaults for its binary
# runtime, copied from the module's kustomize/stage: node-initialize (status,
# Ready condition), node-heartbeat-with-lease (with --node-lease-duration-seconds),
# pod-ready (a scheduled pod becomes Running/Ready), pod-complete, pod-delete.
if [[ "$(cat "$cache/.stamp-kwok-stages" 2>/dev/null)" != "$KWOK_VERSION/$RECIPE" ||
      ! -s "$cache/share/kwok-stages.yaml" ]] && build kwok-stages; then
  log "writing share/kwok-stages.yaml from kwok $KWOK_VERSION"
  dl=$(cd "$cache" && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION") || {
    log "cannot download sigs.k8s.io/kwok@$KWOK_VERSION:"; echo "$dl" >&2; exit 1; }
  dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$dl")
  mkdir -p "$cache/share"
  {
    echo "# kwok $KWOK_VERSION default stages (generated by tests/deploy/k8s-tools.sh)"
    for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
             pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
      echo "---"
      cat "$dir/kustomize/stage/$f"
    done
  } >"$cache/share/kwok-stages.yaml.tmp"
  mv -f "$cache/share/kwok-stages.yaml.tmp" "$cache/share/kwok-stages.yaml"
  stamp kwok-stages "$KWOK_VERSION/$RECIPE"
fi

if ((${#stale[@]})); then
  log "missing or stale in $cache: ${stale[*]} (run scripts/setup.sh --test)"
  exit 1
fi
((check)) || log "done in $((SECONDS - t_start))s"
echo "$cache/bin"
