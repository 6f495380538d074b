package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shutter-csi/shutter/test/cluster"
	"github.com/shutter-csi/shutter/test/testenv"
)

// TestChartOnNode installs the chart with images built from this checkout on the node and runs
// the demo's flow with real pods: `helm test` passes, a workload pod writes to a provisioned
// claim, `helm upgrade` changes a value, the leading one of the two controller replicas is
// killed (the other takes the Lease over and a snapshot becomes ready), `helm test` passes
// again, the driver pod is killed without grace right after a batch of eleven
// VolumeSnapshots is created (its StatefulSet starts it again; every snapshot becomes ready),
// a claim restored from one of them is read
// back by a second pod with equal checksums, a raw block claim is written by one pod and read back
// by another (blockRoundTrip), and after deleting everything and `helm uninstall`
// no PV, content, snapshot or claim is left (no stuck finalizer) and the backend is empty.
func TestChartOnNode(t *testing.T) {
	// Building the images takes most of it: 15 minutes were seen with the machine's 2 cores
	// shared by a load average of 35.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	bin := nodeTools(t, "kubectl", "helm", "csi-provisioner")
	dir := t.TempDir()
	start := time.Now()
	images := buildChartImages(t, ctx, bin, dir)
	t.Logf("images built in %s", time.Since(start).Round(100*time.Millisecond))
	n := startNodeWith(t, ctx, bin, dir, cluster.NodeOptions{Images: images})
	k := kube{t: t, ctx: ctx, bin: bin, kubeconfig: n.c.Kubeconfig}
	port := strings.TrimPrefix(n.c.URL, "https://127.0.0.1:")
	dataDir := filepath.Join(n.dir, "node", "hostpath-data")
	k.run("", "helm", "install", "shutter", filepath.Join(testenv.RepoRoot(), "deploy", "helm", "shutter"),
		"-n", "shutter-system", "--create-namespace", "--wait", "--timeout", "5m",
		"-f", filepath.Join(testenv.RepoRoot(), "deploy", "helm", "shutter", "ci", "local-node-values.yaml"),
		"--set", "global.kubernetesServicePort="+port, "--set", "global.imageRegistry="+cluster.ChartImageRegistry,
		"--set", "global.imageTag=e2e", "--set", "hostpath.kubeletDir="+n.c.KubeletDir,
		"--set", "hostpath.dataDir="+dataDir)
	helmTest(t, k)

	k.run(claimYAML("data", "")+"---\n"+workloadPod("writer", "data", "write", "/data/set", "8", "32768"), "kubectl", "apply", "-f", "-")
	k.run("", "kubectl", "wait", "pod/writer", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=3m")
	written := lastLine(k.run("", "kubectl", "logs", "writer"))

	k.run("", "helm", "upgrade", "shutter", filepath.Join(testenv.RepoRoot(), "deploy", "helm", "shutter"),
		"-n", "shutter-system", "--reuse-values", "--set", "snapshotController.logLevel=4", "--wait", "--timeout", "5m")
	k.run("", "kubectl", "-n", "shutter-system", "rollout", "status", "deployment/shutter-snapshot-controller", "--timeout=3m")
	if args := k.run("", "kubectl", "-n", "shutter-system", "get", "deployment/shutter-snapshot-controller",
		"-o", "jsonpath={.spec.template.spec.containers[0].args}"); !strings.Contains(args, "4") {
		t.Errorf("after helm upgrade the controller's args are %s, want logLevel 4 in them", args)
	}
	killLeader(t, k, n)
	helmTest(t, k)

	// A batch of snapshots, and the driver pod killed (no grace) while they are being cut.
	batch := snapshotYAML("data-snapshot")
	for i := range 10 {
		batch += "---\n" + snapshotYAML(fmt.Sprintf("batch-%d", i))
	}
	k.run(batch, "kubectl", "apply", "-f", "-")
	k.run("", "kubectl", "-n", "shutter-system", "delete", "pod", "shutter-hostpath-0", "--grace-period=0", "--force", "--wait=false")
	k.run("", "kubectl", "wait", "volumesnapshot", "--all", "--for=jsonpath={.status.readyToUse}=true", "--timeout=5m")
	k.run("", "kubectl", "-n", "shutter-system", "rollout", "status", "statefulset/shutter-hostpath", "--timeout=3m")

	k.run(claimYAML("restored", "data-snapshot")+"---\n"+workloadPod("reader", "restored", "read", "/data/set"), "kubectl", "apply", "-f", "-")
	k.run("", "kubectl", "wait", "pod/reader", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=3m")
	if read := lastLine(k.run("", "kubectl", "logs", "reader")); read != written || !strings.HasPrefix(read, "total ") {
		t.Errorf("reader printed %q, writer %q", read, written)
	}

	blockRoundTrip(t, k)
	checkChangedBlocks(t, k, port, "data-snapshot", 8*32768)

	k.run("", "kubectl", "delete", "pod", "writer", "reader", "--wait")
	k.run("", "kubectl", "delete", "pvc", "restored", "data", "--wait")
	k.run("", "kubectl", "delete", "volumesnapshot", "--all", "--wait", "--timeout=3m")
	k.run("", "kubectl", "wait", "--for=delete", "pv", "--all", "--timeout=3m")
	k.run("", "kubectl", "wait", "--for=delete", "volumesnapshotcontent", "--all", "--timeout=3m")
	k.run("", "helm", "uninstall", "shutter", "-n", "shutter-system", "--wait", "--timeout", "5m")
	if left := k.run("", "kubectl", "get", "pv,pvc,volumesnapshot,volumesnapshotcontent", "-A", "-o", "name"); strings.TrimSpace(left) != "" {
		t.Errorf("left after uninstall: %s", left)
	}
	for _, sub := range []string{"volumes", "snapshots", "images"} {
		entries, _ := os.ReadDir(filepath.Join(dataDir, sub))
		if len(entries) != 0 {
			t.Errorf("backend %s not empty: %d entries", sub, len(entries))
		}
	}
	if err := n.c.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	n.assertClean(t)
}

// blockRoundTrip has a pod write a raw block claim (the volume's device node in the container) and
// a second pod read it back, and deletes both pods (which hung when the driver published the
// volume's file instead of a device) and the claim.
func blockRoundTrip(t *testing.T, k kube) {
	t.Helper()
	k.run(manifest("block-claim.yaml", map[string]string{"NAME": "block"})+"---\n"+blockPod("blockwriter", "writedev"), "kubectl", "apply", "-f", "-")
	k.run("", "kubectl", "wait", "pod/blockwriter", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=3m")
	written := lastLine(k.run("", "kubectl", "logs", "blockwriter"))
	k.run("", "kubectl", "delete", "pod", "blockwriter", "--wait", "--timeout=2m")
	k.run(blockPod("blockreader", "readdev"), "kubectl", "apply", "-f", "-")
	k.run("", "kubectl", "wait", "pod/blockreader", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=3m")
	if read := lastLine(k.run("", "kubectl", "logs", "blockreader")); read != written || !strings.HasPrefix(read, "total ") {
		t.Errorf("block reader printed %q, writer %q", read, written)
	}
	k.run("", "kubectl", "delete", "pod", "blockreader", "--wait", "--timeout=2m")
	k.run("", "kubectl", "delete", "pvc", "block", "--wait", "--timeout=2m")
}

func blockPod(name, command string) string {
	return manifest("block-pod.yaml", map[string]string{
		"NAME": name, "IMAGE": cluster.WorkloadImage, "CLAIM": "block", "ARGS": `"` + command + `", "/dev/xvda"`,
	})
}

// buildChartImages builds the chart's node images for this machine's platform (tagged
// localhost/shutter-e2e/<component>:e2e), the workload image and the external-provisioner image.
func buildChartImages(t *testing.T, ctx context.Context, bin, dir string) []string {
	t.Helper()
	out := filepath.Join(dir, "images")
	images, err := cluster.BuildChartImages(ctx, bin, out, "snapshot-controller", "csi-snapshotter", "hostpath-driver", "csi-snapshot-metadata")
	if err != nil {
		t.Fatal(err)
	}
	cli := filepath.Join(out, "kubectl-shutter.tar")
	if err := cluster.BuildGoImage(ctx, filepath.Join(testenv.RepoRoot(), "cmd", "kubectl-shutter"), cliImage, "65532:65532", cli); err != nil {
		t.Fatal(err)
	}
	return append(images, cli)
}

// helmTest runs the chart's `helm test` (the Lease check on this node) and checks that it passed.
func helmTest(t *testing.T, k kube) {
	t.Helper()
	out := k.run("", "helm", "test", "shutter", "-n", chartNamespace, "--timeout", "3m")
	if !strings.Contains(out, "shutter-test-leases") || strings.Contains(out, "Failed") {
		t.Errorf("helm test did not run the Lease test to success:\n%s", out)
	}
}

// kube runs kubectl and helm against the node's control plane.
type kube struct {
	t               *testing.T
	ctx             context.Context
	bin, kubeconfig string
}

func (k kube) run(stdin, name string, args ...string) string {
	k.t.Helper()
	cmd := exec.CommandContext(k.ctx, filepath.Join(k.bin, name), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig)
	cmd.Stdin = strings.NewReader(stdin)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	k.t.Logf("%s %s (%s)", name, strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond))
	if err != nil {
		k.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// claimYAML and workloadPod fill in the manifests that hack/demo-node.sh uses too.
func claimYAML(name, snapshot string) string {
	s := manifest("claim.yaml", map[string]string{"NAME": name})
	if snapshot != "" {
		s += "  dataSource: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: " + snapshot + "}\n"
	}
	return s
}

func workloadPod(name, claim string, args ...string) string {
	return manifest("pod.yaml", map[string]string{
		"NAME": name, "IMAGE": cluster.WorkloadImage, "CLAIM": claim, "ARGS": `"` + strings.Join(args, `", "`) + `"`,
	})
}

// manifest reads testdata/<file> and fills in its ${VAR}s; a variable it is not given panics.
func manifest(file string, vars map[string]string) string {
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		panic(err)
	}
	return os.Expand(string(b), func(k string) string {
		v, ok := vars[k]
		if !ok {
			panic(fmt.Sprintf("%s: no value for ${%s}", file, k))
		}
		return v
	})
}

func snapshotYAML(name string) string { return snapshotOf(name, "data") }

// snapshotOf is a VolumeSnapshot name of the claim.
func snapshotOf(name, claim string) string {
	return fmt.Sprintf(`apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: %s, namespace: default}
spec:
  volumeSnapshotClassName: shutter-hostpath
  source: {persistentVolumeClaimName: %s}
`, name, claim)
}
