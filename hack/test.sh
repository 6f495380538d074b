#!/usr/bin/env bash
# test.sh is `make test`: verification, then every Go test of both modules against one local
# control plane that it starts (and always stops) itself. Test binaries share that control plane
# through SHUTTER_KUBECONFIG; each test works in namespaces and cluster-scoped names of its own.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

hack/verify.sh

echo "test: control-plane binaries (cached under ~/.cache/shutter after the first build)" >&2
hack/build-tools.sh etcd kube-apiserver kube-controller-manager kubectl >/dev/null
# The local node's test (test/node) runs as root only; so are its binaries built.
if [ "$(id -u)" = 0 ]; then
  echo "test: the local node's binaries (kubelet, containerd, runc, ...)" >&2
  hack/build-tools.sh node >/dev/null
fi

# The driver's image tests have e2fsck (Debian's e2fsprogs) check the filesystems it makes.
if [ "$(id -u)" = 0 ] && ! command -v e2fsck >/dev/null && command -v apt-get >/dev/null; then
  echo "test: installing e2fsprogs (e2fsck checks the driver's filesystem images)" >&2
  apt-get install -y --no-install-recommends e2fsprogs >&2 ||
    { apt-get update >&2 && apt-get install -y --no-install-recommends e2fsprogs >&2; }
fi

mkdir -p bin
go build -o bin/cluster ./hack/cluster
state=$(mktemp -d "${TMPDIR:-/tmp}/shutter-test.XXXXXX")
trap 'bin/cluster down -dir "$state/cluster" || true; rm -rf "$state"' EXIT
bin/cluster up -dir "$state/cluster" >/dev/null
export SHUTTER_KUBECONFIG="$state/cluster/admin.kubeconfig"

go test -count=1 -timeout "${TEST_TIMEOUT:-40m}" ${TEST_FLAGS:-} ./... ./client/...

# The record-log fuzz tests: `go test` above ran their seeds only.
# Three nodes in network namespaces of their own with the chart's distributed mode, after the
# packages above so that no other node runs beside them (root only; about 2 minutes).
if [ "$(id -u)" = 0 ]; then
  SHUTTER_TEST_NODES=1 go test -count=1 -timeout 20m ${TEST_FLAGS:-} ./test/nodes/
  # Kubernetes' own snapshottable suite against the chart on the local node (docs/conformance.md;
  # `make conformance` runs the wider set).
  # A failed run prints what failed and the controller's log: its report goes with $state.
  if ! SUITES=snapshottable PROCS=2 REPORT_DIR="$state/conformance" hack/conformance.sh; then
    grep -E -A12 '^\s*\[(FAILED|PANICKED|TIMEDOUT)\]' "$state/conformance/e2e.log" | tail -200 >&2 || true
    tail -n 200 "$state"/conformance/pod-logs/shutter-system_shutter-snapshot-controller-*/*/*.log >&2 || true
    exit 1
  fi
fi

hack/fuzz.sh "${FUZZTIME:-20s}"
# The chart's alerts and dashboard, checked with Prometheus' parser and engine: a module of its own
# (outside go.work) so that Prometheus' dependencies never raise those of Shutter's modules.
(cd test/monitoring && GOWORK=off go test -count=1 ${TEST_FLAGS:-} ./...)
