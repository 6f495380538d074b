#!/usr/bin/env bash
# conformance.sh runs Kubernetes' "External Storage" end-to-end suites (e2e.test of the kubelet's
# version, hack/tools/e2e) against the bundled hostpath driver on the local node, offline:
#
#   1. builds (or finds cached) the control plane's and the node's tools, e2e.test, ginkgo and
#      agnhost (hack/build-tools.sh), this checkout's images for this machine (make images), and
#      the suite's pod images from Debian's packages, busybox-static and coreutils, downloaded
#      once with apt-get into the tool cache (go run ./hack/conformance);
#   2. starts the control plane and the node with every image imported (go run ./hack/cluster up
#      -node), helm installs the chart with this checkout's images, and applies
#      test/conformance/hostnetwork.yaml (the suite's pods in the node's network namespace);
#   3. runs ginkgo on the suites named in SUITES with test/conformance/testdriver.yaml, writing
#      the JUnit report, the log and summary.md (passed, failed, skipped per suite) into the
#      report folder it prints;
#   4. uninstalls the chart and stops everything, also when a step failed or it was interrupted,
#      and detaches loop devices left on the node's files.
#
# Root only (the node mounts, makes cgroups and loop devices). One node runs on a machine at a
# time: with NODE_LOCK set to a file, the node's part waits for and holds flock(1) on it.
#
# Environment: SUITES (space-separated suite names, default "snapshottable"), SKIP (ginkgo skip
# regexp), PROCS (parallel ginkgo processes, default 4), REPORT_DIR (default
# bin/conformance/<UTC time>), CONFORMANCE_DIR (the cluster's state folder), TIMEOUT (ginkgo's,
# default 2h).
#
# STACK=upstream runs the same suites against the reference stack instead of the chart, for the
# side-by-side table (by hand, outside CI): upstream's csi-driver-host-path and
# node-driver-registrar built from the checkouts HOSTPATH_SRC and REGISTRAR_SRC (neither is served
# by the Go module proxy), upstream's csi-snapshotter and snapshot-controller from
# hack/tools/snapshotter, with upstream's CRDs and roles, deployed by
# test/conformance/upstream/stack.yaml and described by test/conformance/upstream/testdriver.yaml.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ "$(id -u)" = 0 ] || { echo "conformance: needs root (the local node)" >&2; exit 2; }

cache="${SHUTTER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shutter}"
suites=${SUITES:-snapshottable}
# Skipped by default (docs/conformance.md): volumeMode's "should not mount / map unused volumes
# in a pod" looks for the pod's folders under /var/lib/kubelet, a path it does not take from
# -kubelet-root-dir, through nsenter into the host's PID 1, which this machine's sandbox refuses;
# provisioning's "any volume data source" runs a volume populator and its validator, whose images
# are not built here.
skip=${SKIP:-'\[Disruptive\]|\[Feature:Windows\]|volumeMode should not mount / map unused volumes|provision storage with any volume data source'}
procs=${PROCS:-4}
timeout=${TIMEOUT:-2h}
stack=${STACK:-shutter}
case "$stack" in
  shutter) testdriver="$root/test/conformance/testdriver.yaml" ;;
  upstream)
    testdriver="$root/test/conformance/upstream/testdriver.yaml"
    for src in HOSTPATH_SRC REGISTRAR_SRC; do
      [ -f "${!src:-}/go.mod" ] || { echo "conformance: STACK=upstream needs $src, a checkout (see docs/conformance.md)" >&2; exit 2; }
    done ;;
  *) echo "conformance: STACK is shutter or upstream, not $stack" >&2; exit 2 ;;
esac
report=${REPORT_DIR:-$root/bin/conformance/$(date -u +%Y%m%dT%H%M%SZ)}
dir=${CONFORMANCE_DIR:-$cache/conformance}
arch=$(go env GOARCH)
started=$SECONDS
mkdir -p "$report"
report=$(cd "$report" && pwd)

say() { echo "conformance: $*" >&2; }

# 1. Tools and images.
bin=$(hack/build-tools.sh etcd kube-apiserver kube-controller-manager kubectl helm node csi-provisioner conformance | tail -1)
export PATH="$bin:$PATH"

if [ "$stack" = shutter ]; then
  say "building this checkout's images for linux/$arch"
  make --no-print-directory images PLATFORMS="linux/$arch" >&2
  stack_images=$(ls "$root"/bin/images/*.tar | paste -sd, -)
else
  # Static binaries named like their images, then the images.
  upstream="$cache/upstream"
  mkdir -p "$upstream"
  say "building upstream's hostpathplugin and csi-node-driver-registrar from $HOSTPATH_SRC and $REGISTRAR_SRC"
  # The driver refuses to start without the version its Makefile stamps.
  (cd "$HOSTPATH_SRC" && CGO_ENABLED=0 GOWORK=off go build -mod=vendor -ldflags "-X main.version=v1.18.0" \
    -o "$upstream/hostpathplugin" ./cmd/hostpathplugin)
  (cd "$REGISTRAR_SRC" && CGO_ENABLED=0 GOWORK=off go build -mod=vendor -ldflags "-X main.version=v2.17.0" \
    -o "$upstream/csi-node-driver-registrar" ./cmd/csi-node-driver-registrar)
  hack/build-tools.sh upstream-snapshot-controller upstream-csi-snapshotter >/dev/null
  cp "$bin/upstream-snapshot-controller" "$upstream/snapshot-controller"
  cp "$bin/upstream-csi-snapshotter" "$upstream/csi-snapshotter"
  stack_images=$(go run ./hack/conformance upstream -debs "$cache/debs" -bin "$upstream" -out "$report/upstream-images" | tail -1)
fi
images="$report/images"
suite_images=$(go run ./hack/conformance -debs "$cache/debs" -agnhost "$bin/agnhost" -out "$images" | tail -1)

# 4. Teardown, whatever happens from here on.
kubeconfig="$dir/admin.kubeconfig"
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -f "$dir/kube-apiserver.pid" ]; then
    # The stack's components' logs (the driver's, the sidecars', the controller's).
    mkdir -p "$report/pod-logs"
    cp -rL "$dir"/node/pod-logs/shutter-system_* "$dir"/node/pod-logs/default_upstream-hostpath-* \
      "$dir"/node/pod-logs/kube-system_snapshot-controller-* "$report/pod-logs/" 2>/dev/null || true
    # What the suite's cleanup left behind (it should be nothing).
    # Kind by kind: the reference stack serves no group kinds.
    for kind in pv volumesnapshotcontents volumegroupsnapshotcontents; do
      kubectl --kubeconfig "$kubeconfig" get "$kind" -o name 2>/dev/null || true
    done >"$report/left-over.txt"
    if [ "$stack" = shutter ]; then
      say "uninstalling the chart"
      helm --kubeconfig "$kubeconfig" uninstall shutter -n shutter-system --wait --timeout 3m >&2 || true
    else
      say "deleting the reference stack"
      [ ! -f "$report/stack.yaml" ] || kubectl --kubeconfig "$kubeconfig" delete -f "$report/stack.yaml" --wait --timeout 3m >&2 || true
    fi
  fi
  say "stopping the control plane and the node"
  go run ./hack/cluster down -dir "$dir" >&2 || rc=1
  # Loop devices of the driver's files that nothing detached (a block volume still published
  # when the node stopped).
  losetup -l -n -O NAME,BACK-FILE 2>/dev/null | awk -v d="$dir/" 'index($2, d) == 1 {print $1}' |
    while read -r dev; do losetup -d "$dev" || rc=1; done
  say "report in $report ($((SECONDS - started)) s in all)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 2. Control plane, node, chart.
if [ -n "${NODE_LOCK:-}" ]; then
  exec 8>"$NODE_LOCK"
  say "waiting for $NODE_LOCK"
  flock 8
fi
say "starting the control plane and the node in $dir"
go run ./hack/cluster up -node -dir "$dir" -images "$stack_images,$suite_images" >"$report/cluster-env.sh"
export KUBECONFIG="$kubeconfig"
if [ "$stack" = shutter ]; then
  say "installing the chart"
  helm install shutter deploy/helm/shutter -n shutter-system --create-namespace \
    -f deploy/helm/shutter/ci/local-node-values.yaml -f "$dir/node-values.yaml" \
    -f test/conformance/values.yaml --wait --timeout 5m >&2
else
  say "installing the reference stack: upstream's CRDs and roles, then test/conformance/upstream/stack.yaml"
  modules=$(cd hack/tools/snapshotter && GOWORK=off go list -m -f '{{.Dir}}' github.com/kubernetes-csi/external-snapshotter/v8 \
    github.com/kubernetes-csi/external-snapshotter/client/v8)
  snapshotter_dir=$(echo "$modules" | sed -n 1p)
  client_dir=$(echo "$modules" | sed -n 2p)
  provisioner_dir=$(cd hack/tools/provisioner && GOWORK=off go list -m -f '{{.Dir}}' github.com/kubernetes-csi/external-provisioner/v6)
  kubectl apply -f "$client_dir/config/crd/snapshot.storage.k8s.io_volumesnapshotclasses.yaml" \
    -f "$client_dir/config/crd/snapshot.storage.k8s.io_volumesnapshotcontents.yaml" \
    -f "$client_dir/config/crd/snapshot.storage.k8s.io_volumesnapshots.yaml" >&2
  kubectl wait --for=condition=Established --timeout=1m crd --all >&2
  kubectl apply -f "$snapshotter_dir/deploy/kubernetes/csi-snapshotter/rbac-csi-snapshotter.yaml" \
    -f "$snapshotter_dir/deploy/kubernetes/snapshot-controller/rbac-snapshot-controller.yaml" \
    -f "$provisioner_dir/deploy/kubernetes/rbac.yaml" >&2
  port=$(sed -n 's/^ *kubernetesServicePort: *"*\([0-9]*\)"*$/\1/p' "$dir/node-values.yaml")
  kubelet_dir=$(sed -n 's/^ *kubeletDir: *//p' "$dir/node-values.yaml")
  sed -e "s|@KUBELET_DIR@|$kubelet_dir|g" -e "s|@DATA_DIR@|$dir/node/upstream-hostpath-data|g" -e "s|@API_PORT@|$port|g" \
    test/conformance/upstream/stack.yaml >"$report/stack.yaml"
  kubectl apply -f "$report/stack.yaml" >&2
  kubectl -n default rollout status statefulset/upstream-hostpath --timeout=5m >&2
  kubectl -n kube-system rollout status deployment/snapshot-controller --timeout=5m >&2
fi
kubectl apply -f test/conformance/hostnetwork.yaml >&2

# 3. The suites.
focus="External.Storage.*\] ($(echo "$suites" | tr ' ' '|'))(\[| )"
say "running ginkgo: focus '$focus', skip '$skip', $procs processes; log in $report/e2e.log"
suite_started=$SECONDS
set +e
KUBE_TEST_REPO_LIST="$images/repo-list.yaml" ginkgo --procs="$procs" --timeout="$timeout" \
  --focus="$focus" --skip="$skip" --no-color --junit-report=junit.xml --output-dir="$report" \
  "$bin/e2e.test" -- \
  -kubeconfig="$KUBECONFIG" -provider=local -kubectl-path="$bin/kubectl" -kubelet-root-dir="$dir/node/kubelet" \
  -storage.testdriver="$testdriver" -report-dir="$report" \
  >"$report/e2e.log" 2>&1
rc=$?
set -e
say "suites took $((SECONDS - suite_started)) s; ginkgo exited $rc"
grep -E '^(Ran [0-9]+ of|SUCCESS!|FAIL!)' "$report/e2e.log" >&2 || tail -20 "$report/e2e.log" >&2
if [ -f "$report/junit.xml" ]; then
  go run ./hack/conformance summary "$report/junit.xml" >"$report/summary.md"
  cat "$report/summary.md" >&2
fi
exit "$rc"
