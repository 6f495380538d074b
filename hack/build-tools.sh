#!/usr/bin/env bash
# build-tools.sh builds the binaries Shutter's tests and demo run beside it (etcd, kube-apiserver,
# kube-controller-manager, kubectl, helm) from the pinned modules under hack/tools, into a per-user
# cache folder keyed by the pinned versions. It rebuilds only what is missing and prints the folder
# that holds the binaries as its last line.
#
# Usage: hack/build-tools.sh [binary...]   (default: the control plane, kubectl and helm)
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
  [controller-gen]=codegen [client-gen]=codegen [deepcopy-gen]=codegen [informer-gen]=codegen
  [lister-gen]=codegen
)
declare -A main=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [helm]=helm.sh/helm/v3/cmd/helm
  [controller-gen]=sigs.k8s.io/controller-tools/cmd/controller-gen
  [client-gen]=k8s.io/code-generator/cmd/client-gen
  [deepcopy-gen]=k8s.io/code-generator/cmd/deepcopy-gen
  [informer-gen]=k8s.io/code-generator/cmd/informer-gen
  [lister-gen]=k8s.io/code-generator/cmd/lister-gen
)
declare -A minutes=([etcd]=3 [kube-apiserver]=8 [kube-controller-manager]=3 [kubectl]=2 [helm]=3
  [controller-gen]=1 [client-gen]=1 [deepcopy-gen]=1 [informer-gen]=1 [lister-gen]=1)

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(etcd kube-apiserver kube-controller-manager kubectl helm)

build() {
  local name=$1 out=$2 start=$SECONDS pid
  echo "build-tools: building $name into $bin (cold: about ${minutes[$name]} min; cached afterwards)" >&2
  (cd "$tools/${module[$name]}" &&
    GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$out.tmp" "${main[$name]}") &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    if kill -0 "$pid" 2>/dev/null && (((SECONDS - start) % 30 < 5)); then
      echo "build-tools: still building $name ($((SECONDS - start))s)" >&2
    fi
  done
  wait "$pid"
  mv "$out.tmp" "$out"
  echo "build-tools: built $name in $((SECONDS - start))s" >&2
}

for name in "${wanted[@]}"; do
  [ -n "${main[$name]:-}" ] || { echo "build-tools: unknown binary $name" >&2; exit 2; }
  dir=${module[$name]}
  key=$( (go env GOVERSION; cat "$tools/$dir/go.mod" "$tools/$dir/go.sum") | sha256sum | cut -c1-12)
  out="$cache/build/$dir-$key/$name"
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
