#!/usr/bin/env bash
# demo-node.sh is `make demo` as root with the local node's binaries built: it builds this
# checkout's images for the machine's platform, starts a control plane with a node in a temporary
# folder (hack/cluster up -node), `helm install`s the chart with those images, then a workload pod
# writes files to a dynamically provisioned claim, a VolumeSnapshot is taken, a claim is restored
# from it, a second pod reads the files back and the checksums are compared; everything is
# deleted, the driver's backend must be empty, and the node is stopped. DEMO_KEEP=1 keeps the
# state folder (logs) after the node is stopped. The last line is the verdict, `result: PASS` or
# `result: FAIL (<step>)`, and the exit status is non-zero on failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dir=$(mktemp -d /tmp/shutter-demo-node.XXXXXX)
ns=shutter-system
report=()
step_start=0
current="start"
t0=$(date +%s.%N)

step() { step_start=$(date +%s.%N); current="$*"; echo "demo: $*" >&2; }
done_step() {
	local took
	took=$(awk -v a="$step_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	report+=("$(printf '%-58s %6ss' "$1" "$took")")
}
cleanup() {
	local rc=$?
	if [[ $rc -ne 0 && -n ${KUBECONFIG:-} ]]; then
		echo "demo: FAILED; pods and warnings:" >&2
		kubectl get pods -A -o wide >&2 || true
		kubectl get events -A --field-selector type=Warning >&2 || true
	fi
	if ! go run ./hack/cluster down -dir "$dir" >&2; then
		echo "demo: stopping the node failed; run: go run ./hack/cluster down -dir $dir" >&2
		[[ $rc -ne 0 ]] || { rc=1; current="stop the node"; }
	fi
	[[ ${DEMO_KEEP:-} == 1 ]] || rm -rf "$dir"
	if [[ $rc -eq 0 ]]; then
		echo "result: PASS"
	else
		echo "result: FAIL ($current)"
	fi
	exit $rc
}
trap cleanup EXIT

step "images of this checkout for linux/$(go env GOARCH)"
make --no-print-directory images PLATFORMS="linux/$(go env GOARCH)" >&2
done_step "make images (one platform)"

step "control plane and node in $dir"
images=bin/images/snapshot-controller.tar,bin/images/csi-snapshotter.tar,bin/images/hostpath-driver.tar,bin/images/snapshot-conversion-webhook.tar,bin/images/csi-snapshot-metadata.tar
# In two steps: eval "$(cmd)" would ignore cmd failing.
env=$(go run ./hack/cluster up -dir "$dir" -node -images "$images")
eval "$env"
done_step "cluster up with node, images imported"

step "helm install"
helm install shutter deploy/helm/shutter -n "$ns" --create-namespace --wait --timeout 5m \
	-f deploy/helm/shutter/ci/local-node-values.yaml -f "$dir/node-values.yaml" >/dev/null
kubectl -n "$ns" rollout status statefulset/shutter-hostpath --timeout=5m >&2
done_step "helm install, pods Ready"

workload=localhost/shutter/workload:1.0
# manifest FILE VAR=VALUE...: test/node/testdata/FILE (the node test's manifests) with its ${VAR}s
# filled in, comment lines dropped.
manifest() {
	local text kv
	text=$(grep -v '^#' "test/node/testdata/$1")
	shift
	for kv in "$@"; do
		text=${text//"\${${kv%%=*}}"/${kv#*=}}
	done
	printf '%s\n' "$text"
}
pod() { # name claim args...
	local name=$1 claim=$2 args
	shift 2
	args=$(printf '"%s", ' "$@")
	manifest pod.yaml NAME="$name" IMAGE="$workload" CLAIM="$claim" ARGS="${args%, }"
}
claim() { # name [snapshot]
	manifest claim.yaml NAME="$1"
	[[ -z ${2:-} ]] || echo "  dataSource: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: $2}"
}
succeeded() { kubectl wait "pod/$1" --for=jsonpath='{.status.phase}'=Succeeded --timeout=3m >/dev/null; }

step "writer pod on a new claim"
{ claim data; echo ---; pod writer data write /data/set 16 65536; } | kubectl apply -f - >/dev/null
succeeded writer
written=$(kubectl logs writer | tail -1)
done_step "claim provisioned, writer wrote 16 x 64 KiB"

step "VolumeSnapshot"
kubectl apply -f - >/dev/null <<YAML
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: data-snapshot}
spec:
  volumeSnapshotClassName: shutter-hostpath
  source: {persistentVolumeClaimName: data}
YAML
kubectl wait volumesnapshot/data-snapshot --for=jsonpath='{.status.readyToUse}'=true --timeout=3m >/dev/null
done_step "snapshot readyToUse"

step "restored claim and reader pod"
{ claim restored data-snapshot; echo ---; pod reader restored read /data/set; } | kubectl apply -f - >/dev/null
succeeded reader
read=$(kubectl logs reader | tail -1)
done_step "claim restored, reader read it back"
current="compare the checksums"
if [[ $written != "$read" ]]; then
	echo "demo: checksums differ: writer '$written', reader '$read'" >&2
	exit 1
fi

pods=$(kubectl get pods -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name} {.status.phase}{"\n"}{range .status.containerStatuses[*]}    {.name} {.image} {.imageID}{"\n"}{end}{end}')

step "delete pods, claims, snapshot; helm uninstall"
kubectl delete pod writer reader --wait >/dev/null
kubectl delete pvc restored data --wait >/dev/null
kubectl delete volumesnapshot data-snapshot --wait >/dev/null
kubectl wait --for=delete pv --all --timeout=2m >/dev/null 2>&1 || true
kubectl wait --for=delete volumesnapshotcontent --all --timeout=2m >/dev/null 2>&1 || true
left=$(kubectl get pv,volumesnapshotcontent -o name)
backend=$(find "$dir/node/hostpath-data/volumes" "$dir/node/hostpath-data/snapshots" -mindepth 1 | head)
helm uninstall shutter -n "$ns" --wait >/dev/null
done_step "everything deleted"
current="nothing left behind"
if [[ -n $left || -n $backend ]]; then
	echo "demo: left behind: ${left} ${backend}" >&2
	exit 1
fi

total=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
cat <<REPORT

=== Shutter demo on the local node ===
Pods (namespace/name phase; containers: name image imageID):
$pods
Data: writer $written
      reader $read  (equal)
Backend after deletion: no volumes, no snapshots; no PV or VolumeSnapshotContent left.
Steps:
$(printf '  %s\n' "${report[@]}")
  total                                                      ${total}s
REPORT
current="stop the node"
