#!/usr/bin/env bash
# demo.sh is `make demo`: it builds (or finds cached) the control-plane binaries and helm, then
# runs hack/demo, which starts a local control plane in a temporary folder, installs the Helm
# chart, runs Shutter's components with the chart's ServiceAccount tokens, snapshots a volume,
# restores it, verifies the data, deletes everything and prints a report. Set DEMO_FLAGS=-keep
# to keep the logs and kubeconfigs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
echo "demo: control-plane binaries and helm (cached under ~/.cache/shutter after the first build)" >&2
tools=$(hack/build-tools.sh etcd kube-apiserver kube-controller-manager helm | tail -1)
exec go run ./hack/demo -tools "$tools" ${DEMO_FLAGS:-}
