#!/usr/bin/env bash
# build-tools.sh builds the binaries Shutter's tests and demo run beside it (etcd, kube-apiserver,
# kube-controller-manager, kubectl, helm; for the local node kube-scheduler, kubelet, containerd,
# ctr, containerd-shim-runc-v2, runc, the CNI loopback plugin and csi-provisioner; for
# `make bench-scale` upstream-snapshot-controller and upstream-csi-snapshotter, upstream's
# external-snapshotter; for `make conformance` e2e.test, Kubernetes' end-to-end suite, ginkgo and agnhost, the suite's
# test server) from the pinned modules under hack/tools, into a per-user cache folder
# keyed by the pinned versions. It rebuilds
# only what is missing and prints the folder that holds the binaries as its last line.
#
# Usage: hack/build-tools.sh [--check] [binary|node...]   (default: the control plane, kubectl and
#        helm; "node" stands for every binary of the local node, "conformance" for e2e.test, ginkgo and agnhost). With --check it builds nothing
#        and exits 3 when one of the binaries is not built.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools"
cache="${SHUTTER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shutter}"

# Each binary is stored under a key made of its pinned module and the Go toolchain, so a version
# bump rebuilds only what it touches. The folder handed back holds links to all of them.
bin="$cache/bin"
mkdir -p "$bin"

# module and main package of every binary
declare -A module=(
  [etcd]=etcd [kube-apiserver]=kube [kube-controller-manager]=kube [kubectl]=kube [helm]=helm
  [controller-gen]=codegen
  [kube-scheduler]=kubenode [kubelet]=kubenode
  [containerd]=containerd [ctr]=containerd [containerd-shim-runc-v2]=containerd
  [runc]=runc [loopback]=cni [csi-provisioner]=provisioner
  [upstream-snapshot-controller]=snapshotter [upstream-csi-snapshotter]=snapshotter
  [e2e.test]=e2e [ginkgo]=e2e [agnhost]=e2e
)
declare -A main=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [helm]=helm.sh/helm/v3/cmd/helm
  [controller-gen]=sigs.k8s.io/controller-tools/cmd/controller-gen
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
  [containerd]=github.com/containerd/containerd/v2/cmd/containerd
  [ctr]=github.com/containerd/containerd/v2/cmd/ctr
  [containerd-shim-runc-v2]=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
  [runc]=github.com/opencontainers/runc
  [loopback]=github.com/containernetworking/plugins/plugins/main/loopback
  [csi-provisioner]=github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner
  [upstream-snapshot-controller]=github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller
  [upstream-csi-snapshotter]=github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter
  [e2e.test]=k8s.io/kubernetes/test/e2e
  [ginkgo]=github.com/onsi/ginkgo/v2/ginkgo
  [agnhost]=k8s.io/kubernetes/test/images/agnhost
)
# e2e.test is the test binary of its package (its main is a TestMain), built with `go test -c`.
declare -A testbinary=([e2e.test]=1)
# Rough cold build times on an idle 2-core machine, for the progress message. kubelet and
# kube-scheduler reuse most of what kube-apiserver compiled (make test builds that first).
declare -A minutes=([etcd]=2 [kube-apiserver]=10 [kube-controller-manager]=3 [kubectl]=1 [helm]=2
  [controller-gen]=1
  [kube-scheduler]=10 [kubelet]=2 [containerd]=2 [ctr]=1 [containerd-shim-runc-v2]=1 [runc]=1
  [loopback]=1 [csi-provisioner]=5 [upstream-snapshot-controller]=4 [upstream-csi-snapshotter]=2
  [e2e.test]=25 [ginkgo]=1 [agnhost]=3)
# runc needs cgo (its nsenter part is C) and libseccomp's headers for seccomp, which pods'
# RuntimeDefault profile needs (installed with apt when missing); it is built without libpathrs.
# Everything else is static.
declare -A cgo=([runc]=1)
declare -A tags=([runc]="seccomp urfave_cli_no_docs")
declare -A ldflags=(
  [containerd]="-X github.com/containerd/containerd/v2/version.Version=v2.4.2"
  [ctr]="-X github.com/containerd/containerd/v2/version.Version=v2.4.2"
  [containerd-shim-runc-v2]="-X github.com/containerd/containerd/v2/version.Version=v2.4.2"
  [runc]="-X main.version=1.5.3"
)
node=(kube-scheduler kubelet containerd ctr containerd-shim-runc-v2 runc loopback csi-provisioner)

check=false
wanted=()
for arg in "$@"; do
  case "$arg" in
  --check) check=true ;;
  node) wanted+=("${node[@]}") ;;
  conformance) wanted+=(ginkgo agnhost e2e.test) ;;
  *) wanted+=("$arg") ;;
  esac
done
[ ${#wanted[@]} -gt 0 ] || wanted=(etcd kube-apiserver kube-controller-manager kubectl helm)

# kubelet and kube-scheduler must be of the control plane's version.
kube_version() { sed -n 's#^require k8s.io/kubernetes \(v[^ ]*\).*#\1#p' "$tools/$1/go.mod"; }
for dir in kubenode e2e; do
  if [ "$(kube_version kube)" != "$(kube_version $dir)" ]; then
    echo "build-tools: hack/tools/kube and hack/tools/$dir pin different k8s.io/kubernetes" >&2
    exit 2
  fi
done

# needs_seccomp makes sure libseccomp's development files are there for runc's cgo build.
needs_seccomp() {
  pkg-config --exists libseccomp 2>/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "build-tools: installing libseccomp-dev (runc's seccomp support)" >&2
    apt-get install -y --no-install-recommends libseccomp-dev >&2 ||
      { apt-get update >&2 && apt-get install -y --no-install-recommends libseccomp-dev >&2; }
  fi
  pkg-config --exists libseccomp 2>/dev/null ||
    { echo "build-tools: runc needs libseccomp's development files (Debian: apt-get install libseccomp-dev)" >&2; exit 2; }
}

build() {
  local name=$1 out=$2 start=$SECONDS pid next=30
  [ "$name" != runc ] || needs_seccomp
  echo "build-tools: building $name into $bin (cold: about ${minutes[$name]} min; cached afterwards)" >&2
  local cmd=(build)
  [ -z "${testbinary[$name]:-}" ] || cmd=(test -c)
  (cd "$tools/${module[$name]}" &&
    GOWORK=off CGO_ENABLED=${cgo[$name]:-0} GOFLAGS=-mod=mod go "${cmd[@]}" -trimpath -tags "${tags[$name]:-}" \
      -ldflags "-s -w ${ldflags[$name]:-}" -o "$out.tmp" "${main[$name]}") &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    if kill -0 "$pid" 2>/dev/null && ((SECONDS - start >= next)); then
      echo "build-tools: still building $name ($((SECONDS - start))s)" >&2
      next=$((SECONDS - start + 30))
    fi
  done
  wait "$pid"
  mv "$out.tmp" "$out"
  echo "build-tools: built $name in $((SECONDS - start))s" >&2
}

for name in "${wanted[@]}"; do
  [ -n "${main[$name]:-}" ] || { echo "build-tools: unknown binary $name" >&2; exit 2; }
  dir=${module[$name]}
  flags="${cgo[$name]:-}${tags[$name]:-}${ldflags[$name]:-}"
  key=$( (go env GOVERSION; [ -z "$flags" ] || echo "$flags"; cat "$tools/$dir/go.mod" "$tools/$dir/go.sum") |
    sha256sum | cut -c1-12)
  out="$cache/build/$dir-$key/$name"
  if $check; then
    [ -x "$out" ] || exit 3
    ln -sfn "$out" "$bin/$name"
    continue
  fi
  mkdir -p "$(dirname "$out")"
  if [ ! -x "$out" ]; then
    # One build of a binary at a time: parallel test binaries and make targets share the result.
    exec 9>"$out.lock"
    flock 9
    [ -x "$out" ] || build "$name" "$out"
    exec 9>&-
  fi
  ln -sfn "$out" "$bin/$name"
done
echo "$bin"
