package node

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	cbtv1beta1 "github.com/shutter-csi/shutter/client/apis/snapshotmetadataservice/v1beta1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/changedblocks"
	"github.com/shutter-csi/shutter/test/cluster"
	"github.com/shutter-csi/shutter/test/testenv"
)

// The ranges the node test's block volume gets: written before snapshot A, then changed
// before snapshot B (scattered over its 8 MiB, in 4 KiB blocks).
var (
	cbtWritten = [][2]int64{{0, 8192}, {3 << 20, 4096}, {(5 << 20) + 4096, 12288}}
	cbtChanged = [][2]int64{{4096, 4096}, {(2 << 20) + 8192, 65536}, {(7 << 20) + 8192, 4096}}
)

// cliImage is the image of kubectl-shutter that the node test's backup client pod runs.
const cliImage = "localhost/shutter/kubectl-shutter:e2e"

// checkChangedBlocks is changed block tracking as a backup application sees it on the node, with
// the chart's snapshot-metadata sidecar: a pod writes a raw block claim, snapshot A, a second pod
// changes three scattered ranges, snapshot B. A client pod whose ServiceAccount is bound to the
// chart's client ClusterRole runs kubectl-shutter: it gets exactly the written ranges as A's
// allocated ones and exactly the changed ranges as the delta, and applying the delta, read from
// a restore of B, onto a restore of A makes it equal to B (sha256, also of what the second pod
// wrote). Through the SnapshotMetadataService the chart wrote (address, generated CA, audience),
// a ServiceAccount without the binding gets PermissionDenied, a token for another audience
// Unauthenticated, and a delta of snapshots of two volumes InvalidArgument. fsSnapshot is a
// snapshot of a filesystem claim that holds fsWritten bytes of files (see checkFromNode).
func checkChangedBlocks(t *testing.T, k kube, port, fsSnapshot string, fsWritten int64) {
	t.Helper()
	k.run(`apiVersion: v1
kind: ServiceAccount
metadata: {name: backup, namespace: default}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: nobody, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: backup}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: shutter-snapshot-metadata-client}
subjects: [{kind: ServiceAccount, name: backup, namespace: default}]
`, "kubectl", "apply", "-f", "-")
	k.run(manifest("block-claim.yaml", map[string]string{"NAME": "cbt"}), "kubectl", "apply", "-f", "-")
	wroteA := writeBlocks(t, k, "cbt-write-a", "a", cbtWritten)
	k.run(snapshotOf("cbt-a", "cbt"), "kubectl", "apply", "-f", "-")
	k.run("", "kubectl", "wait", "volumesnapshot/cbt-a", "--for=jsonpath={.status.readyToUse}=true", "--timeout=3m")
	wroteB := writeBlocks(t, k, "cbt-write-b", "b", cbtChanged)
	if wroteA == wroteB {
		t.Fatalf("the second writer left the device as it was: %s", wroteB)
	}
	k.run(snapshotOf("cbt-b", "cbt"), "kubectl", "apply", "-f", "-")
	k.run("", "kubectl", "wait", "volumesnapshot/cbt-b", "--for=jsonpath={.status.readyToUse}=true", "--timeout=3m")

	k.run(blockClaimFrom("cbt-restore-a", "cbt-a")+"---\n"+blockClaimFrom("cbt-restore-b", "cbt-b")+"---\n"+
		manifest("cbt-client-pod.yaml", map[string]string{"NAME": "cbt-client", "IMAGE": cliImage, "SA": "backup", "PORT": port,
			"BASE": "cbt-a", "TARGET": "cbt-b", "BASE_CLAIM": "cbt-restore-a", "TARGET_CLAIM": "cbt-restore-b"}),
		"kubectl", "apply", "-f", "-")
	waitSucceeded(t, k, "cbt-client", "allocated", "delta", "verify")
	if got := jsonRanges(t, k.run("", "kubectl", "logs", "cbt-client", "-c", "allocated")); !reflect.DeepEqual(got, cbtWritten) {
		t.Errorf("the client pod got %v as the allocated ranges of A, want %v", got, cbtWritten)
	}
	if got := jsonRanges(t, k.run("", "kubectl", "logs", "cbt-client", "-c", "delta")); !reflect.DeepEqual(got, cbtChanged) {
		t.Errorf("the client pod got %v as the delta from A to B, want %v", got, cbtChanged)
	}
	verified := k.run("", "kubectl", "logs", "cbt-client", "-c", "verify")
	t.Logf("the client pod's --verify:\n%s", verified)
	sumB := strings.TrimPrefix(wroteB, "total ")
	if !strings.Contains(verified, "verified: equal") || !strings.Contains(verified, "source sha256 "+sumB) || !strings.Contains(verified, "target sha256 "+sumB) {
		t.Errorf("the client pod's --verify printed\n%s\nwant both sha256 %s (what the second writer left)", verified, sumB)
	}
	checkFromNode(t, k, fsSnapshot, fsWritten)
	k.run("", "kubectl", "delete", "pod", "cbt-client", "--wait", "--timeout=2m")
	k.run("", "kubectl", "delete", "pvc", "cbt", "cbt-restore-a", "cbt-restore-b", "--wait", "--timeout=2m")
}

// checkFromNode calls the sidecar from the node, through the SnapshotMetadataService the chart
// wrote, with tokens of ServiceAccounts with and without the chart's client ClusterRole: the
// sidecar refuses a caller without it, a token for another audience and a delta of snapshots of
// two volumes (B and fsSnapshot). fsSnapshot, a snapshot of a filesystem claim (an image volume
// on the node), has allocated ranges: those of the copy of its image (at least the files written
// to it, inside the 16 MiB image of a 10 MiB claim).
func checkFromNode(t *testing.T, k kube, fsSnapshot string, fsWritten int64) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", k.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kube, snapshots := kubernetes.NewForConfigOrDie(cfg), clientset.NewForConfigOrDie(cfg)
	svc, err := changedblocks.Dial(k.ctx, snapshots, "hostpath.csi.shutter.dev")
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	other, err := changedblocks.Resolve(k.ctx, snapshots, "default", fsSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	token := func(sa, audience string) string {
		tok, err := changedblocks.Token(k.ctx, kube, "default", sa, audience)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	for _, tt := range []struct {
		name string
		req  changedblocks.Request
		code codes.Code
	}{
		{"no RBAC", changedblocks.Request{Token: token("nobody", svc.Audience), Snapshot: "cbt-a"}, codes.PermissionDenied},
		{"wrong audience", changedblocks.Request{Token: token("backup", "another-audience"), Snapshot: "cbt-a"}, codes.Unauthenticated},
		{"different volumes", changedblocks.Request{Token: token("backup", svc.Audience), Snapshot: "cbt-b", BaseID: other.Handle}, codes.InvalidArgument},
	} {
		tt.req.Namespace = "default"
		if err := svc.List(k.ctx, tt.req, func(changedblocks.Batch) error { return nil }); status.Code(err) != tt.code {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.code)
		}
	}
	var covered, capacity int64
	err = svc.List(k.ctx, changedblocks.Request{Token: token("backup", svc.Audience), Namespace: "default", Snapshot: fsSnapshot},
		func(b changedblocks.Batch) error {
			capacity = b.Capacity
			for _, r := range b.Ranges {
				covered += r.Size
			}
			return nil
		})
	if err != nil || capacity != 16<<20 || covered < fsWritten || covered > capacity {
		t.Errorf("allocated ranges of the filesystem snapshot %s: %d bytes of %d, %v; want at least the %d bytes written, of 16 MiB",
			fsSnapshot, covered, capacity, err, fsWritten)
	}
}

// writeBlocks runs a pod that writes ranges of the claim cbt (pseudo-random bytes of seed) and
// returns the "total <sha256>" of the whole device it printed; the pod is deleted, so that the
// volume is unpublished before it is snapshotted.
func writeBlocks(t *testing.T, k kube, pod, seed string, ranges [][2]int64) string {
	t.Helper()
	args := `"writeat", "/dev/xvda", "` + seed + `"`
	for _, r := range ranges {
		args += fmt.Sprintf(`, "%d:%d"`, r[0], r[1])
	}
	k.run(manifest("block-pod.yaml", map[string]string{"NAME": pod, "IMAGE": cluster.WorkloadImage, "CLAIM": "cbt", "ARGS": args}), "kubectl", "apply", "-f", "-")
	waitSucceeded(t, k, pod, "workload")
	out := lastLine(k.run("", "kubectl", "logs", pod))
	k.run("", "kubectl", "delete", "pod", pod, "--wait", "--timeout=2m")
	if !strings.HasPrefix(out, "total ") {
		t.Fatalf("pod %s printed %q, want total <sha256>", pod, out)
	}
	return out
}

// waitSucceeded waits until pod has succeeded; when it fails or times out, the test fails with
// the logs of its containers.
func waitSucceeded(t *testing.T, k kube, pod string, containers ...string) {
	t.Helper()
	cmd := exec.CommandContext(k.ctx, filepath.Join(k.bin, "kubectl"), "wait", "pod/"+pod,
		"--for=jsonpath={.status.phase}=Succeeded", "--timeout=3m")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	logs := k.run("", "kubectl", "get", "pod", pod, "-o", "yaml")
	for _, c := range containers {
		cmd := exec.CommandContext(k.ctx, filepath.Join(k.bin, "kubectl"), "logs", pod, "-c", c)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig)
		b, _ := cmd.CombinedOutput()
		logs += "\n--- " + c + ":\n" + string(b)
	}
	t.Fatalf("pod %s did not succeed: %v\n%s\n%s", pod, err, out, logs)
}

// jsonRanges reads the ranges of `changed-blocks -o json` (one JSON message a line; the log may
// hold other lines, of stderr), merging those that touch: a driver may split a range over
// messages.
func jsonRanges(t *testing.T, out string) [][2]int64 {
	t.Helper()
	var got [][2]int64
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var b changedblocks.Batch
		if err := json.Unmarshal([]byte(line), &b); err != nil {
			t.Fatalf("changed-blocks printed %q: %v", line, err)
		}
		for _, r := range b.Ranges {
			if n := len(got); n > 0 && got[n-1][0]+got[n-1][1] == r.Offset {
				got[n-1][1] += r.Size
				continue
			}
			got = append(got, [2]int64{r.Offset, r.Size})
		}
	}
	return got
}

// blockClaimFrom is a raw block claim restored from the VolumeSnapshot snapshot.
func blockClaimFrom(name, snapshot string) string {
	return manifest("block-claim.yaml", map[string]string{"NAME": name}) +
		"  dataSource: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: " + snapshot + "}\n"
}

// TestSnapshotMetadataValues renders the chart's snapshot-metadata parts: by default a generated
// Secret whose CA the SnapshotMetadataService carries, with the Service's address and the
// driver's audience, and the sidecar mounting that Secret; on the local node the sidecar listens
// on loopback and is announced on localhost.
func TestSnapshotMetadataValues(t *testing.T) {
	defaults := renderChart(t)
	var secret corev1.Secret
	if !defaults.Decode(t, "Secret/shutter-snapshot-metadata-tls", &secret) {
		t.Fatal("no generated TLS Secret")
	}
	var sms cbtv1beta1.SnapshotMetadataService
	if !defaults.Decode(t, "SnapshotMetadataService/hostpath.csi.shutter.dev", &sms) {
		t.Fatal("no SnapshotMetadataService")
	}
	block, _ := pem.Decode(sms.Spec.CACert)
	if block == nil || string(sms.Spec.CACert) != string(secret.Data["ca.crt"]) || len(secret.Data["tls.key"]) == 0 {
		t.Errorf("SnapshotMetadataService caCert %q, Secret ca.crt %q", sms.Spec.CACert, secret.Data["ca.crt"])
	}
	if sms.Spec.Address != "shutter-snapshot-metadata."+chartNamespace+".svc:50051" || sms.Spec.Audience != "hostpath.csi.shutter.dev-snapshot-metadata" {
		t.Errorf("address %q audience %q", sms.Spec.Address, sms.Spec.Audience)
	}
	sidecarArgs := func(r rendered) []string {
		var s appsv1.StatefulSet
		if !r.Decode(t, "StatefulSet/shutter-hostpath", &s) {
			t.Fatal("no hostpath StatefulSet")
		}
		for _, c := range s.Spec.Template.Spec.Containers {
			if c.Name == "csi-snapshot-metadata" {
				return c.Args
			}
		}
		t.Fatal("no csi-snapshot-metadata container")
		return nil
	}
	if args := strings.Join(sidecarArgs(defaults), " "); !strings.Contains(args, "--tls-cert=/tls/tls.crt") ||
		!strings.Contains(args, "--listen-address=$(POD_IP)") || !strings.Contains(args, "--http-endpoint=[$(POD_IP)]:8082") {
		t.Errorf("sidecar args %s", args)
	}
	local := renderChart(t, "-f", filepath.Join(testenv.RepoRoot(), "deploy", "helm", "shutter", "ci", "local-node-values.yaml"),
		"--set", "global.kubernetesServicePort=6443")
	if args := strings.Join(sidecarArgs(local), " "); !strings.Contains(args, "--listen-address=127.0.0.1") || !strings.Contains(args, "--http-endpoint=127.0.0.1:8082") {
		t.Errorf("local node sidecar args %s", args)
	}
	if !local.Decode(t, "SnapshotMetadataService/hostpath.csi.shutter.dev", &sms) || sms.Spec.Address != "localhost:50051" {
		t.Errorf("local node address %q", sms.Spec.Address)
	}
}
