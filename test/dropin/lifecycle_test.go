package dropin

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/test/stack"
	"github.com/shutter-csi/shutter/test/testenv"
)

// waitServing waits until p answers 200 on url.
func waitServing(t *testing.T, p *stack.Process, url string) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := p.Exited(); err != nil {
			t.Fatal(err)
		}
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not serve %s:\n%s", p.Name, url, p.Tail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// newClaim creates a volume with data through the driver and a claim bound to it.
func newClaim(t *testing.T, ns, name string, labels map[string]string) (stack.Claim, string) {
	t.Helper()
	ctx := context.Background()
	id, err := suite.csi.CreateVolume(ctx, ns+"-"+name, volumeSize, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stack.WriteData(suite.csi.VolumePath(id), uint64(len(name))); err != nil {
		t.Fatal(err)
	}
	c := stack.Claim{Namespace: ns, Name: name, Driver: driver, VolumeHandle: id, Size: volumeSize}
	if err := stack.CreateClaim(ctx, suite.kube, c, true); err != nil {
		t.Fatal(err)
	}
	if len(labels) > 0 {
		pvc, err := suite.kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pvc.Labels = labels
		if _, err := suite.kube.CoreV1().PersistentVolumeClaims(ns).Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return c, id
}

// snapshotLifecycle takes a snapshot of a new claim in ns through the running components,
// restores it into a new volume and compares the data, then deletes the snapshot and waits until
// the snapshot, its content and the backend snapshot are gone.
func snapshotLifecycle(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	name := "data-" + rand.String(4)
	_, id := newClaim(t, ns, name, nil)
	snaps := suite.snap.SnapshotV1().VolumeSnapshots(ns)
	if _, err := snaps.Create(ctx, stack.NewSnapshot(ns, name, name, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vs, err := stack.WaitSnapshot(ctx, suite.snap, ns, name, readyTimeout, stack.Ready)
	if err != nil {
		t.Fatal(err)
	}
	contentName := ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, "")
	content, err := suite.snap.SnapshotV1().VolumeSnapshotContents().Get(ctx, contentName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	handle := ptr.Deref(content.Status.SnapshotHandle, "")
	restored, err := suite.csi.CreateVolume(ctx, ns+"-"+name+"-restored", volumeSize, handle)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if _, _, err := stack.CompareTrees(suite.csi.VolumePath(id), suite.csi.VolumePath(restored)); err != nil {
		t.Fatalf("restored data: %v", err)
	}
	if err := snaps.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "snapshot "+name, func(ctx context.Context) error { _, err := snaps.Get(ctx, name, metav1.GetOptions{}); return err })
	waitGone(t, "content "+contentName, func(ctx context.Context) error {
		_, err := suite.snap.SnapshotV1().VolumeSnapshotContents().Get(ctx, contentName, metav1.GetOptions{})
		return err
	})
	if backendHas(t, handle) {
		t.Errorf("backend snapshot %s outlived its deleted content", handle)
	}
}

// groupLifecycle takes a group snapshot of two new claims, waits until it and its members are
// ready, deletes it and waits until the group, its content and the members are gone.
func groupLifecycle(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"group": rand.String(6)}
	for _, n := range []string{"a", "b"} {
		newClaim(t, ns, "g"+n+"-"+labels["group"], labels)
	}
	name := "group-" + labels["group"]
	testenv.CreateGroupSnapshot(t, suite.snap, ns, name, labels)
	groups := suite.snap.GroupsnapshotV1().VolumeGroupSnapshots(ns)
	vgs := testenv.WaitFor(t, "group "+name+" ready", readyTimeout, func(ctx context.Context) (*groupv1.VolumeGroupSnapshot, error) {
		return groups.Get(ctx, name, metav1.GetOptions{})
	}, func(g *groupv1.VolumeGroupSnapshot) bool {
		return g.Status != nil && ptr.Deref(g.Status.ReadyToUse, false)
	})
	contentName := ptr.Deref(vgs.Status.BoundVolumeGroupSnapshotContentName, "")
	if err := groups.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "group "+name, func(ctx context.Context) error { _, err := groups.Get(ctx, name, metav1.GetOptions{}); return err })
	waitGone(t, "group content "+contentName, func(ctx context.Context) error {
		_, err := suite.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(ctx, contentName, metav1.GetOptions{})
		return err
	})
	testenv.WaitFor(t, "group members gone", readyTimeout, func(ctx context.Context) (*snapshotv1.VolumeSnapshotList, error) {
		return suite.snap.SnapshotV1().VolumeSnapshots(ns).List(ctx, metav1.ListOptions{})
	}, func(l *snapshotv1.VolumeSnapshotList) bool {
		for _, vs := range l.Items {
			if ptr.Deref(vs.Status, snapshotv1.VolumeSnapshotStatus{}).VolumeGroupSnapshotName != nil {
				return false
			}
		}
		return true
	})
}

func waitGone(t *testing.T, what string, get func(ctx context.Context) error) {
	t.Helper()
	if err := stack.WaitGone(context.Background(), readyTimeout, what, get); err != nil {
		t.Fatal(err)
	}
}

func backendHas(t *testing.T, handle string) bool {
	t.Helper()
	has, err := suite.csi.HasSnapshot(context.Background(), handle)
	if err != nil {
		t.Fatal(err)
	}
	return has
}

// controllerArgs and sidecarArgs run a component as upstream's ServiceAccount, electing a leader
// in the ServiceAccount's namespace, serving HTTP at addr.
func controllerArgs(addr string, extra ...string) []string {
	return append([]string{"--kubeconfig=" + suite.controllerKC, "--leader-election", "--leader-election-namespace=" + controllerNS,
		"--http-endpoint=" + addr, "--retry-interval-start=200ms", "--retry-interval-max=5s", "--v=2"}, extra...)
}

func sidecarArgs(addr string, extra ...string) []string {
	return append([]string{"--kubeconfig=" + suite.sidecarKC, "--csi-address=" + suite.socket, "--leader-election",
		"--leader-election-namespace=" + sidecarNS, "--http-endpoint=" + addr, "--retry-interval-start=200ms",
		"--retry-interval-max=5s", "--v=2"}, extra...)
}

// forbidden returns p's log lines that report an RBAC denial.
func forbidden(t *testing.T, p *stack.Process) []string {
	t.Helper()
	var out []string
	for _, l := range logLines(t, p) {
		if strings.Contains(l, "forbidden") {
			out = append(out, l)
		}
	}
	return out
}

// count is the number of p's log lines that contain s.
func count(t *testing.T, p *stack.Process, s string) int {
	t.Helper()
	n := 0
	for _, l := range logLines(t, p) {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}
