// Package e2e proves the whole stack: the real snapshot-controller, csi-snapshotter and hostpath
// driver binaries run as processes against a dedicated local control plane, each authenticated
// as the ServiceAccount the Helm chart created, so every test also checks the chart's RBAC. The
// tests stand in for the external-provisioner: they create volumes over the driver's socket and
// bind PersistentVolumes and claims to them.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/test/stack"
	"github.com/shutter-csi/shutter/test/testenv"
)

const (
	// defaultClass is the chart's default VolumeSnapshotClass and StorageClass.
	defaultClass = "shutter-hostpath"
	volumeSize   = 16 << 20
	readyTimeout = 90 * time.Second
)

var suite struct {
	once  sync.Once
	err   error
	dir   string
	stack *stack.Stack
}

func TestMain(m *testing.M) {
	code := m.Run()
	if suite.stack != nil {
		suite.stack.Stop()
		if forbidden := forbiddenLines(suite.stack); len(forbidden) > 0 {
			fmt.Fprintf(os.Stderr, "e2e: the chart's RBAC denied requests:\n%s\n", strings.Join(forbidden, "\n"))
			code = 1
		}
	}
	if suite.dir != "" && code == 0 {
		_ = os.RemoveAll(suite.dir)
	} else if suite.dir != "" {
		fmt.Fprintf(os.Stderr, "e2e: component logs kept in %s\n", suite.dir)
	}
	testenv.Stop()
	os.Exit(code)
}

// start returns the running stack, starting the control plane, the chart and the components on
// first use: two snapshot-controllers (leader election), one sidecar, one driver.
func start(t *testing.T) *stack.Stack {
	t.Helper()
	env := testenv.StartDedicated(t)
	suite.once.Do(func() { suite.err = setUp(env) })
	if suite.err != nil {
		t.Fatalf("e2e stack: %v", suite.err)
	}
	if err := suite.stack.Check(); err != nil {
		t.Fatalf("a component died: %v", err)
	}
	return suite.stack
}

func setUp(env *testenv.Env) error {
	ctx := context.Background()
	tools, err := testenv.Tools("helm")
	if err != nil {
		return err
	}
	if suite.dir, err = os.MkdirTemp("", "shutter-e2e-"); err != nil {
		return err
	}
	bin := filepath.Join(suite.dir, "bin")
	if err := stack.Build(ctx, testenv.RepoRoot(), bin); err != nil {
		return err
	}
	chart := stack.Chart{Helm: filepath.Join(tools, "helm"), Dir: filepath.Join(testenv.RepoRoot(), "deploy", "helm", "shutter"),
		Release: "shutter", Namespace: "shutter-system",
		// The test control plane forbids privileged pods; nothing here mounts volumes.
		Set: []string{"hostpath.driver.privileged=false"}}
	if err := chart.Install(ctx, env.Kubeconfig); err != nil {
		return err
	}
	suite.stack, err = stack.Start(ctx, stack.Options{Dir: filepath.Join(suite.dir, "stack"), BinDir: bin,
		Admin: env.Config, Chart: chart, Controllers: 2})
	return err
}

// forbiddenLines are log lines of the components that report an RBAC denial.
func forbiddenLines(s *stack.Stack) []string {
	var out []string
	for _, p := range s.Processes() {
		f, err := os.Open(p.LogPath())
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "forbidden") {
				out = append(out, p.Name+": "+sc.Text())
			}
		}
		f.Close()
	}
	return out
}

// volume is a CSI volume with data in it and a claim bound to it.
type volume struct {
	claim stack.Claim
	id    string
}

// newVolume creates a volume through the driver, writes data into it and binds a claim to it.
func newVolume(t *testing.T, s *stack.Stack, namespace, name string) volume {
	t.Helper()
	ctx := context.Background()
	id, err := s.CSI.CreateVolume(ctx, namespace+"-"+name, volumeSize, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stack.WriteData(s.CSI.VolumePath(id), uint64(len(name))); err != nil {
		t.Fatal(err)
	}
	v := volume{id: id, claim: stack.Claim{Namespace: namespace, Name: name, Driver: stack.DefaultDriverName,
		VolumeHandle: id, Size: volumeSize, StorageClass: defaultClass}}
	if err := stack.CreateClaim(ctx, s.Kube, v.claim, true); err != nil {
		t.Fatal(err)
	}
	return v
}

// restoreAndCompare restores handle into a new volume and claim and checks the data against v.
func restoreAndCompare(t *testing.T, s *stack.Stack, v volume, snapshot, handle string) volume {
	t.Helper()
	ctx := context.Background()
	name := v.claim.Name + "-restored-" + rand.String(4)
	id, err := s.CSI.CreateVolume(ctx, v.claim.Namespace+"-"+name, volumeSize, handle)
	if err != nil {
		t.Fatal(err)
	}
	r := volume{id: id, claim: v.claim}
	r.claim.Name, r.claim.VolumeHandle, r.claim.FromSnapshot = name, id, snapshot
	if err := stack.CreateClaim(ctx, s.Kube, r.claim, true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stack.CompareTrees(s.CSI.VolumePath(v.id), s.CSI.VolumePath(id)); err != nil {
		t.Fatalf("restored data: %v", err)
	}
	return r
}

// createSnapshot creates a dynamic snapshot of claim with class (empty: the default).
func createSnapshot(t *testing.T, s *stack.Stack, namespace, name, claim, class string) {
	t.Helper()
	vs := stack.NewSnapshot(namespace, name, claim, class)
	if _, err := s.Snapshots.SnapshotV1().VolumeSnapshots(namespace).Create(context.Background(), vs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitReady(t *testing.T, s *stack.Stack, namespace, name string) *snapshotv1.VolumeSnapshot {
	t.Helper()
	vs, err := stack.WaitSnapshot(context.Background(), s.Snapshots, namespace, name, readyTimeout, stack.Ready)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func contentOf(t *testing.T, s *stack.Stack, vs *snapshotv1.VolumeSnapshot) *snapshotv1.VolumeSnapshotContent {
	t.Helper()
	name := ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, "")
	content, err := s.Snapshots.SnapshotV1().VolumeSnapshotContents().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("content of %s: %v", vs.Name, err)
	}
	return content
}

// backendHas tells whether the driver lists the snapshot with this ID.
func backendHas(t *testing.T, s *stack.Stack, handle string) bool {
	t.Helper()
	has, err := s.CSI.HasSnapshot(context.Background(), handle)
	if err != nil {
		t.Fatal(err)
	}
	return has
}

// createClass creates a VolumeSnapshotClass of the hostpath driver, deleted when the test ends.
func createClass(t *testing.T, s *stack.Stack, name string, policy snapshotv1.DeletionPolicy, params map[string]string) {
	t.Helper()
	classes := s.Snapshots.SnapshotV1().VolumeSnapshotClasses()
	class := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Driver: stack.DefaultDriverName, DeletionPolicy: policy, Parameters: params}
	if _, err := classes.Create(context.Background(), class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = classes.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// warningEvent waits for a Warning event about the named object and returns its message.
func warningEvent(t *testing.T, s *stack.Stack, namespace, name string) string {
	t.Helper()
	var msg string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		events, err := s.Kube.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + name + ",type=" + corev1.EventTypeWarning})
		if err != nil {
			t.Fatal(err)
		}
		if len(events.Items) > 0 {
			msg = events.Items[len(events.Items)-1].Reason + ": " + events.Items[len(events.Items)-1].Message
			return msg
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no Warning event for %s/%s", namespace, name)
	return ""
}

func newQuantity(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.BinarySI) }
