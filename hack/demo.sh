#!/usr/bin/env bash
# demo.sh is `make demo`: it builds (or finds cached) the control-plane binaries and helm, then
# runs hack/demo, which starts a local control plane in a temporary folder, installs the Helm
# chart, runs Shutter's components with the chart's ServiceAccount tokens, snapshots a volume,
# restores it, verifies the data, deletes everything and prints a report. Set DEMO_FLAGS=-keep
# to keep the logs and kubeconfigs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# As root with the node's binaries built (make tools-node), the demo runs the chart's real pods on
# the local node; otherwise the chart's components run as host processes.
node_tools="kubelet kube-scheduler containerd ctr containerd-shim-runc-v2 runc loopback csi-provisioner"
if [[ $(id -u) -eq 0 && ${DEMO_NODE:-1} == 1 ]]; then
	if hack/build-tools.sh --check etcd kube-apiserver kube-controller-manager kubectl helm $node_tools >/dev/null; then
		exec hack/demo-node.sh
	fi
	echo "demo: the local node's binaries are not built (make tools-node, about an hour cold): running the process-based demo instead" >&2
else
	echo "demo: not root (or DEMO_NODE=0): no local node, running the chart's components as host processes" >&2
fi
echo "demo: control-plane binaries and helm (cached under ~/.cache/shutter after the first build)" >&2
tools=$(hack/build-tools.sh etcd kube-apiserver kube-controller-manager helm | tail -1)
exec go run ./hack/demo -tools "$tools" ${DEMO_FLAGS:-}
