package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/test/stack"
	"github.com/shutter-csi/shutter/test/testenv"
)

// TestDeletionOrders deletes the source claim, the snapshot, a claim being restored from it and
// the whole namespace in different orders: every finalizer is released and nothing is left.
func TestDeletionOrders(t *testing.T) {
	s := start(t)
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, f *fixture)
	}{
		{"claim then snapshot", func(t *testing.T, f *fixture) {
			f.deleteClaim(t, f.source.claim)
			f.deleteSnapshot(t)
		}},
		{"snapshot then claim", func(t *testing.T, f *fixture) {
			f.deleteSnapshot(t)
			f.deleteClaim(t, f.source.claim)
		}},
		{"snapshot while a claim is restored from it", func(t *testing.T, f *fixture) {
			pending := stack.Claim{Namespace: f.ns, Name: "restoring", Size: volumeSize,
				StorageClass: "e2e-nobody-provisions", FromSnapshot: "snap"}
			f.pendingClaim(t, pending)
			snaps := f.s.Snapshots.SnapshotV1().VolumeSnapshots(f.ns)
			snapshot := watchHistory(t, snaps.Watch, "snap")
			claim := watchHistory(t, f.s.Kube.CoreV1().PersistentVolumeClaims(f.ns).Watch, pending.Name)
			if err := snaps.Delete(context.Background(), "snap", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			f.deleteClaim(t, pending)
			f.waitSnapshotGone(t)
			// The snapshot was kept while the claim was restored from it: it let go of its
			// as-source finalizer only after the claim's deletion began.
			checkAfter(t, "the snapshot's release", snapshot.first(t, "the snapshot is released", released(protocol.SnapshotAsSourceFinalizer)),
				"the deletion of the claim restored from it", claim.first(t, "the claim is being deleted", deleting))
			f.deleteClaim(t, f.source.claim)
		}},
		{"namespace", func(t *testing.T, f *fixture) {
			restoreAndCompare(t, f.s, f.source, "snap", f.handle)
			f.deleteNamespace(t)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, s)
			tc.run(t, f)
			f.checkBackendGone(t)
		})
	}
}

// fixture is a namespace with a claim and a ready Delete-policy snapshot "snap" of it.
type fixture struct {
	s       *stack.Stack
	ns      string
	source  volume
	content string
	handle  string
}

func newFixture(t *testing.T, s *stack.Stack) *fixture {
	f := &fixture{s: s, ns: testenv.Namespace(t, s.Kube)}
	f.source = newVolume(t, s, f.ns, "source")
	createSnapshot(t, s, f.ns, "snap", "source", "")
	content := contentOf(t, s, waitReady(t, s, f.ns, "snap"))
	f.content, f.handle = content.Name, ptr.Deref(content.Status.SnapshotHandle, "")
	return f
}

func (f *fixture) deleteClaim(t *testing.T, c stack.Claim) {
	t.Helper()
	if err := stack.DeleteClaim(context.Background(), f.s.Kube, c); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) deleteSnapshot(t *testing.T) {
	t.Helper()
	if err := f.s.Snapshots.SnapshotV1().VolumeSnapshots(f.ns).Delete(context.Background(), "snap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitSnapshotGone(t)
}

func (f *fixture) waitSnapshotGone(t *testing.T) {
	t.Helper()
	err := stack.WaitGone(context.Background(), readyTimeout, "snapshot", func(ctx context.Context) error {
		_, err := f.s.Snapshots.SnapshotV1().VolumeSnapshots(f.ns).Get(ctx, "snap", metav1.GetOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// pendingClaim creates a claim nobody will bind.
func (f *fixture) pendingClaim(t *testing.T, c stack.Claim) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(c.StorageClass),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *newQuantity(c.Size)}},
			DataSource: &corev1.TypedLocalObjectReference{APIGroup: ptr.To(snapshotv1.GroupName),
				Kind: "VolumeSnapshot", Name: c.FromSnapshot},
		},
	}
	if _, err := f.s.Kube.CoreV1().PersistentVolumeClaims(c.Namespace).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) deleteNamespace(t *testing.T) {
	t.Helper()
	namespaces := f.s.Kube.CoreV1().Namespaces()
	if err := namespaces.Delete(context.Background(), f.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := stack.WaitGone(context.Background(), 2*readyTimeout, "namespace "+f.ns, func(ctx context.Context) error {
		_, err := namespaces.Get(ctx, f.ns, metav1.GetOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkBackendGone waits until the content is gone and checks the driver no longer lists its
// snapshot.
func (f *fixture) checkBackendGone(t *testing.T) {
	t.Helper()
	err := stack.WaitGone(context.Background(), readyTimeout, "content "+f.content, func(ctx context.Context) error {
		_, err := f.s.Snapshots.SnapshotV1().VolumeSnapshotContents().Get(ctx, f.content, metav1.GetOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if backendHas(t, f.s, f.handle) {
		t.Errorf("backend snapshot %s left behind", f.handle)
	}
}
