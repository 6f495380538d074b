package nodes

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/shutter-csi/shutter/test/cluster"
	"github.com/shutter-csi/shutter/test/testenv"
)

// capacity is each node's driver capacity in the test: a claim of twice that fits nowhere.
const capacity = 1 << 30

// kube runs kubectl and helm against the cluster.
type kube struct {
	t               *testing.T
	ctx             context.Context
	bin, kubeconfig string
}

func (k kube) run(stdin, name string, args ...string) string {
	k.t.Helper()
	out, err := k.try(stdin, name, args...)
	if err != nil {
		k.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// poll runs read every two seconds (each read runs kubectl) until it reports done, and returns
// what it read last. The test fails with that when read is not done within timeout.
func (k kube) poll(what string, timeout time.Duration, read func() (string, bool)) string {
	k.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(k.ctx, 2*time.Second, timeout, true, func(context.Context) (bool, error) {
		out, done := read()
		last = out
		return done, nil
	})
	if err != nil {
		k.t.Fatalf("%s: %v; last read:\n%s", what, err, last)
	}
	return last
}

func (k kube) try(stdin, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(k.ctx, filepath.Join(k.bin, name), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig)
	cmd.Stdin = strings.NewReader(stdin)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	k.t.Logf("%s %s (%s)", name, strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond))
	return string(out), err
}

// buildImages builds Shutter's images of this checkout that the distributed chart runs, the
// workload image and the external-provisioner image, as OCI tars in dir.
func buildImages(t *testing.T, ctx context.Context, bin, dir string) []string {
	t.Helper()
	images, err := cluster.BuildChartImages(ctx, bin, dir, "snapshot-controller", "csi-snapshotter", "hostpath-driver")
	if err != nil {
		t.Fatal(err)
	}
	return images
}

func claimYAML(name, size, snapshot string) string {
	s := fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %s, namespace: default}
spec:
  storageClassName: shutter-hostpath
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: %s}}
`, name, size)
	if snapshot != "" {
		s += "  dataSource: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: " + snapshot + "}\n"
	}
	return s
}

// podYAML is a workload pod on claim; node "" lets the scheduler choose.
func podYAML(name, claim, node string, args ...string) string {
	selector := ""
	if node != "" {
		selector = "  nodeSelector: {kubernetes.io/hostname: \"" + node + "\"}\n"
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  hostNetwork: true
  restartPolicy: Never
  securityContext: {fsGroup: 65532}
%s  containers:
  - name: workload
    image: %s
    imagePullPolicy: Never
    args: ["%s"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: %s}
`, name, selector, cluster.WorkloadImage, strings.Join(args, `", "`), claim)
}

func snapshotYAML(name, claim string) string {
	return fmt.Sprintf(`apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: %s, namespace: default}
spec:
  volumeSnapshotClassName: shutter-hostpath
  source: {persistentVolumeClaimName: %s}
`, name, claim)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// csiCalls sums the csi-snapshotter's CSI calls on node n, from its /metrics on the pod's IP
// (the node's address) in the node's namespace (csi-lib-utils' csi_sidecar_operations_seconds
// histogram, whose count is one per call), in all and of method.
func csiCalls(t *testing.T, ctx context.Context, n cluster.Node, method string) (all, ofMethod int) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return cluster.DialIn(ctx, n.Netns, addr) },
	}}
	defer client.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.Name+":8081/metrics", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("metrics of node %s's csi-snapshotter: %v", n.Name, err)
	}
	defer resp.Body.Close()
	scanner := bufio.NewScanner(resp.Body)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, "csi_sidecar_operations_seconds_count{") {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		all += int(v)
		if strings.Contains(line, method) {
			ofMethod += int(v)
		}
	}
	return all, ofMethod
}

// TestDistributedChart installs the chart in distributed mode on three nodes: a claim is
// provisioned on each node and written by a pod there; a snapshot of node 2's claim is taken by
// node 2's csi-snapshotter alone (the other two make no CSI call), restored by a claim whose pod
// the scheduler places (it lands on node 2) and read back equal; a group snapshot of claims on
// two nodes fails with an error naming them, one of one node's claim is ready; each node publishes its
// CSIStorageCapacity, and a claim larger than every node stays Pending without a volume; node
// 3's kubelet and driver killed, a snapshot on node 1 still becomes ready, and node 3's pending
// one once node 3 is back. The memory each node costs is logged; after Stop no namespace or
// mount is left.
func TestDistributedChart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	bin := tools(t, "kubectl", "helm", "csi-provisioner")
	dir := t.TempDir()
	images := buildImages(t, ctx, bin, filepath.Join(dir, "images"))
	c, _ := startNodes(t, ctx, bin, filepath.Join(dir, "c"), 3, images)
	k := kube{t: t, ctx: ctx, bin: bin, kubeconfig: c.Kubeconfig}
	// On failure, what the components said (before the cluster stops; ctx is over by then).
	t.Cleanup(func() {
		if t.Failed() {
			dump := kube{t: t, ctx: context.Background(), bin: bin, kubeconfig: c.Kubeconfig}
			for _, args := range [][]string{
				{"get", "volumesnapshot,volumesnapshotcontent", "-A", "-o", "yaml"},
				{"get", "events", "-A", "--sort-by=.lastTimestamp"},
				{"-n", "shutter-system", "logs", "-l", "app.kubernetes.io/instance=shutter", "--all-containers", "--prefix", "--tail=150", "--max-log-requests=20"},
			} {
				out, _ := dump.try("", "kubectl", args...)
				t.Log(out)
			}
		}
	})
	chart := filepath.Join(testenv.RepoRoot(), "deploy", "helm", "shutter")
	k.run("", "helm", "install", "shutter", chart, "-n", "shutter-system", "--create-namespace", "--wait", "--timeout", "8m",
		"-f", filepath.Join(chart, "ci", "local-node-values.yaml"), "--set", "hostpath.mode=distributed",
		// Servers listen on the pod's IP, the node's own address, where kubelet probes them.
		"--set", "global.listenAddress=",
		"--set", "global.kubernetesServicePort="+strings.TrimPrefix(c.URL, "https://127.0.0.1:"),
		"--set", "global.imageRegistry="+cluster.ChartImageRegistry, "--set", "global.imageTag=e2e",
		"--set", "hostpath.kubeletDir="+c.KubeletDir, "--set", "hostpath.dataDir="+c.DataDir,
		"--set", "hostpath.driver.capacity="+strconv.Itoa(capacity))
	k.run("", "kubectl", "-n", "shutter-system", "rollout", "status", "daemonset/shutter-hostpath", "--timeout=5m")

	checkCapacities(t, k, c)
	written := map[string]string{}
	var apply string
	for i, n := range c.Nodes {
		apply += claimYAML(fmt.Sprintf("data-%d", i+1), "10Mi", "") + "---\n" +
			podYAML(fmt.Sprintf("writer-%d", i+1), fmt.Sprintf("data-%d", i+1), n.Name, "write", "/data/set", "8", "32768") + "---\n"
	}
	k.run(apply, "kubectl", "apply", "-f", "-")
	for i, n := range c.Nodes {
		pod := fmt.Sprintf("writer-%d", i+1)
		k.run("", "kubectl", "wait", "pod/"+pod, "--for=jsonpath={.status.phase}=Succeeded", "--timeout=5m")
		written[n.Name] = lastLine(k.run("", "kubectl", "logs", pod))
		pv := k.run("", "kubectl", "get", "pvc", fmt.Sprintf("data-%d", i+1), "-o", "jsonpath={.spec.volumeName}")
		if got := k.run("", "kubectl", "get", "pv", pv, "-o",
			"jsonpath={.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]}"); got != n.Name {
			t.Errorf("claim data-%d's volume is on %q, want %s", i+1, got, n.Name)
		}
	}

	snapshotOnOneNode(t, ctx, k, c, written)
	groupsAndNodes(t, k, c)
	claimTooLarge(t, k)
	nodeDown(t, ctx, k, c, bin)
	for _, n := range c.Nodes {
		mem, err := c.NodeMemory(n)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("node %s: %d MiB resident (containerd, kubelet, shims, the driver's pod, workload pods done)", n.Name, mem>>20)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if left := leftovers(t, filepath.Join(dir, "c")); len(left) > 0 {
		t.Errorf("left after Stop: %v", left)
	}
}

// checkCapacities waits until every node's csi-provisioner has published a CSIStorageCapacity
// for the class and its node's topology segment, of the driver's capacity.
func checkCapacities(t *testing.T, k kube, c *cluster.Cluster) {
	t.Helper()
	found := 0
	out := k.poll("every node's CSIStorageCapacity", 3*time.Minute, func() (string, bool) {
		out := k.run("", "kubectl", "-n", "shutter-system", "get", "csistoragecapacities", "-o",
			`jsonpath={range .items[*]}{.storageClassName} {.nodeTopology.matchLabels.topology\.hostpath\.csi\.shutter\.dev/node} {.capacity}{"\n"}{end}`)
		found = 0
		for _, n := range c.Nodes {
			for _, line := range strings.Split(out, "\n") {
				if f := strings.Fields(line); len(f) == 3 && f[0] == "shutter-hostpath" && f[1] == n.Name && f[2] != "0" {
					found++
					break
				}
			}
		}
		return out, found == len(c.Nodes)
	})
	t.Logf("capacities of %d nodes:\n%s", found, out)
}

// snapshotOnOneNode snapshots node 2's claim, checks that only node 2's sidecar called the CSI
// driver and that the content is labelled with node 2, and restores it with a pod on node 2,
// which reads back what the writer wrote.
func snapshotOnOneNode(t *testing.T, ctx context.Context, k kube, c *cluster.Cluster, written map[string]string) {
	t.Helper()
	var before [3][2]int
	for i, n := range c.Nodes {
		before[i][0], before[i][1] = csiCalls(t, ctx, n, "CreateSnapshot")
	}
	k.run(snapshotYAML("snap-2", "data-2"), "kubectl", "apply", "-f", "-")
	k.run("", "kubectl", "wait", "volumesnapshot/snap-2", "--for=jsonpath={.status.readyToUse}=true", "--timeout=3m")
	content := k.run("", "kubectl", "get", "volumesnapshot", "snap-2", "-o", "jsonpath={.status.boundVolumeSnapshotContentName}")
	if node := k.run("", "kubectl", "get", "volumesnapshotcontent", content, "-o",
		`jsonpath={.metadata.labels.snapshot\.storage\.kubernetes\.io/managed-by}`); node != c.Nodes[1].Name {
		t.Errorf("content %s managed-by %q, want %s", content, node, c.Nodes[1].Name)
	}
	for i, n := range c.Nodes {
		all, creates := csiCalls(t, ctx, n, "CreateSnapshot")
		t.Logf("node %s csi-snapshotter: %d CSI calls (%d CreateSnapshot) before, %d (%d) after", n.Name, before[i][0], before[i][1], all, creates)
		if i == 1 && creates <= before[i][1] {
			t.Errorf("node 2's sidecar made no CreateSnapshot call")
		}
		if i != 1 && all != before[i][0] {
			t.Errorf("node %s's sidecar made %d CSI calls for node 2's snapshot", n.Name, all-before[i][0])
		}
	}

	// The restore's pod names no node: the controller gives the claim the snapshot's node as its
	// selected node, and the scheduler places the pod there. Before it did, the scheduler sent it
	// to nodes 1 and 3 again and again (the driver answers ResourceExhausted "snapshot ... is not
	// on node", 24 times in 5 minutes on one node).
	k.run(claimYAML("restored-2", "10Mi", "snap-2")+"---\n"+podYAML("reader-2", "restored-2", "", "read", "/data/set"), "kubectl", "apply", "-f", "-")
	k.run("", "kubectl", "wait", "pod/reader-2", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=3m")
	if node := k.run("", "kubectl", "get", "pod", "reader-2", "-o", "jsonpath={.spec.nodeName}"); node != c.Nodes[1].Name {
		t.Errorf("the restore's pod ran on %s, want %s (the snapshot's node)", node, c.Nodes[1].Name)
	}
	if read := lastLine(k.run("", "kubectl", "logs", "reader-2")); read != written[c.Nodes[1].Name] || !strings.HasPrefix(read, "total ") {
		t.Errorf("reader printed %q, writer %q", read, written[c.Nodes[1].Name])
	}
	// Steered, the claim is provisioned on the first try; left to chance it could land on node 2
	// after failures, within the wait.
	events := k.run("", "kubectl", "get", "events", "--field-selector", "involvedObject.name=restored-2")
	t.Logf("restore events:\n%s", events)
	if strings.Contains(events, "ProvisioningFailed") {
		t.Errorf("the restore failed on another node before it landed on %s", c.Nodes[1].Name)
	}
}

// groupsAndNodes: a group snapshot of claims on nodes 1 and 2 fails with an error naming both
// nodes; one of node 3's claim is taken by node 3 (its content is labelled so) and becomes ready.
func groupsAndNodes(t *testing.T, k kube, c *cluster.Cluster) {
	t.Helper()
	k.run("", "kubectl", "label", "pvc", "data-1", "data-2", "group=cross")
	k.run("", "kubectl", "label", "pvc", "data-3", "group=one")
	group := func(name, selector string) string {
		return fmt.Sprintf(`apiVersion: groupsnapshot.storage.k8s.io/v1
kind: VolumeGroupSnapshot
metadata: {name: %s, namespace: default}
spec:
  source: {selector: {matchLabels: {group: %s}}}
`, name, selector)
	}
	k.run(group("cross", "cross")+"---\n"+group("one", "one"), "kubectl", "apply", "-f", "-")
	k.run("", "kubectl", "wait", "volumegroupsnapshot/one", "--for=jsonpath={.status.readyToUse}=true", "--timeout=3m")
	content := k.run("", "kubectl", "get", "volumegroupsnapshot", "one", "-o", "jsonpath={.status.boundVolumeGroupSnapshotContentName}")
	if node := k.run("", "kubectl", "get", "volumegroupsnapshotcontent", content, "-o",
		`jsonpath={.metadata.labels.snapshot\.storage\.kubernetes\.io/managed-by}`); node != c.Nodes[2].Name {
		t.Errorf("group content %s managed-by %q, want %s", content, node, c.Nodes[2].Name)
	}
	k.run("", "kubectl", "wait", "volumegroupsnapshot/cross", "--for=jsonpath={.status.error.message}", "--timeout=2m")
	msg := k.run("", "kubectl", "get", "volumegroupsnapshot", "cross", "-o", "jsonpath={.status.error.message}")
	if !strings.Contains(msg, c.Nodes[0].Name) || !strings.Contains(msg, c.Nodes[1].Name) || !strings.Contains(msg, "more than one node") {
		t.Errorf("group across nodes: error %q", msg)
	}
	k.run("", "kubectl", "delete", "volumegroupsnapshot", "cross", "one", "--wait", "--timeout=3m")
}

// claimTooLarge: a claim of twice any node's capacity, with a pod, stays Pending: the scheduler
// finds no node with the storage (from the CSIStorageCapacities) and says so, and no volume is
// made.
func claimTooLarge(t *testing.T, k kube) {
	t.Helper()
	k.run(claimYAML("huge", strconv.Itoa(2*capacity), "")+"---\n"+podYAML("huge", "huge", "", "read", "/data/none"), "kubectl", "apply", "-f", "-")
	events := k.poll("an event about storage for huge", 2*time.Minute, func() (string, bool) {
		events := k.run("", "kubectl", "get", "events", "--field-selector", "involvedObject.name=huge", "-o",
			`jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}`)
		return events, strings.Contains(events, "storage")
	})
	t.Logf("events of the claim and pod huge:\n%s", events)
	if phase := k.run("", "kubectl", "get", "pvc", "huge", "-o", "jsonpath={.status.phase}"); phase != "Pending" {
		t.Errorf("claim huge is %s, want Pending", phase)
	}
	if pv := k.run("", "kubectl", "get", "pvc", "huge", "-o", "jsonpath={.spec.volumeName}"); pv != "" {
		t.Errorf("claim huge got volume %s", pv)
	}
	k.run("", "kubectl", "delete", "pod,pvc", "huge", "--wait=false")
}

// nodeDown kills node 3's kubelet and its driver container: a snapshot on node 1 still becomes
// ready; one on node 3 waits, and becomes ready once node 3's kubelet is back (it restarts the
// driver).
func nodeDown(t *testing.T, ctx context.Context, k kube, c *cluster.Cluster, bin string) {
	t.Helper()
	n3 := c.Nodes[2]
	pod := k.run("", "kubectl", "-n", "shutter-system", "get", "pod", "--field-selector", "spec.nodeName="+n3.Name,
		"-l", "app.kubernetes.io/component=hostpath", "-o", "jsonpath={.items[0].metadata.name}")
	id := k.run("", "kubectl", "-n", "shutter-system", "get", "pod", pod, "-o",
		`jsonpath={.status.containerStatuses[?(@.name=="hostpath-driver")].containerID}`)
	if err := c.KillKubelet(n3); err != nil {
		t.Fatal(err)
	}
	if err := c.KillNodeContainer(ctx, bin, n3, strings.TrimPrefix(id, "containerd://")); err != nil {
		t.Fatal(err)
	}
	k.run(snapshotYAML("snap-3-down", "data-3")+"---\n"+snapshotYAML("snap-1-while-3-down", "data-1"), "kubectl", "apply", "-f", "-")
	k.run("", "kubectl", "wait", "volumesnapshot/snap-1-while-3-down", "--for=jsonpath={.status.readyToUse}=true", "--timeout=3m")
	if ready := k.run("", "kubectl", "get", "volumesnapshot", "snap-3-down", "-o", "jsonpath={.status.readyToUse}"); ready == "true" {
		t.Error("node 3's snapshot is ready while its driver is down")
	}
	if err := c.StartKubelet(ctx, n3); err != nil {
		t.Fatal(err)
	}
	k.run("", "kubectl", "wait", "volumesnapshot/snap-3-down", "--for=jsonpath={.status.readyToUse}=true", "--timeout=5m")
}
