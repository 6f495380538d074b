package controller

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

func (f *fixture) deleteSnapshot(t *testing.T, name string) {
	t.Helper()
	if err := f.client.SnapshotV1().VolumeSnapshots(f.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) waitClaimGone(t *testing.T, name string) {
	t.Helper()
	waitGone(t, "claim "+name, func(ctx context.Context) error {
		_, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Get(ctx, name, metav1.GetOptions{})
		return err
	})
}

// TestClaimDeletedWhileSnapshotIsTaken deletes the source claim while the backend is still
// cutting the snapshot: the claim waits for the snapshot, then goes.
func TestClaimDeletedWhileSnapshotIsTaken(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a, vs := f.heldSnapshotOfData(t, "claimfirst")
	f.waitClaim(t, "data", func(pvc *corev1.PersistentVolumeClaim) bool {
		return slices.Contains(pvc.Finalizers, protocol.PVCAsSourceFinalizer)
	})
	looked := processed.After(t, snapshotQueue, f.key(vs.Name))
	if err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Delete(context.Background(), "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	looked.Until(t, "it saw the claim being deleted", func(controller.Result) bool {
		pvc, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Get(context.Background(), "data", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("claim went while its snapshot is being taken: %v", err)
		}
		return pvc.DeletionTimestamp != nil
	})
	f.waitClaim(t, "data", func(pvc *corev1.PersistentVolumeClaim) bool {
		return pvc.DeletionTimestamp != nil && slices.Contains(pvc.Finalizers, protocol.PVCAsSourceFinalizer)
	})
	a.setHold(false)
	f.waitSnapshot(t, vs.Name, ready)
	f.waitClaimGone(t, "data")
}

// TestContentDeletedFirst deletes the content of a ready snapshot: the content waits for its
// snapshot (the backend snapshot is kept), and both go once the snapshot is deleted.
func TestContentDeletedFirst(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a := f.driverWithClaim(t, "contentfirst", snapshotv1.VolumeSnapshotContentDelete)
	vs := f.readySnapshotOfData(t)
	content := *vs.Status.BoundVolumeSnapshotContentName
	looked := processed.After(t, contentQueue, clusterKey(content))
	if err := f.client.SnapshotV1().VolumeSnapshotContents().Delete(context.Background(), content, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var c *snapshotv1.VolumeSnapshotContent
	looked.Until(t, "it saw the content being deleted", func(controller.Result) bool {
		var err error
		if c, err = f.client.SnapshotV1().VolumeSnapshotContents().Get(context.Background(), content, metav1.GetOptions{}); err != nil {
			t.Fatalf("content of a live snapshot went away: %v", err)
		}
		return c.DeletionTimestamp != nil
	})
	if c.Annotations[protocol.AnnBeingDeleted] != "" || len(a.deletedHandles()) != 0 {
		t.Fatalf("content of a live snapshot handed to the sidecar (annotations %v, backend deletions %v)", c.Annotations, a.deletedHandles())
	}
	f.deleteSnapshot(t, vs.Name)
	f.waitSnapshot(t, vs.Name, absent)
	f.waitBackendDeleted(t, a, content)
}

// TestClassDeletedFirst deletes the class of a ready snapshot; deleting the snapshot still
// cleans up everything, since nothing reads the class after the content exists.
func TestClassDeletedFirst(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.driverWithClaim(t, "classfirst", snapshotv1.VolumeSnapshotContentDelete)
	vs := f.readySnapshotOfData(t)
	if err := f.client.SnapshotV1().VolumeSnapshotClasses().Delete(context.Background(), "classfirst", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.deleteSnapshot(t, vs.Name)
	f.waitSnapshot(t, vs.Name, absent)
	f.waitContentGone(t, *vs.Status.BoundVolumeSnapshotContentName)
}

// TestNamespaceDeletion deletes a namespace holding claims and snapshots: the namespace goes,
// and with it every content of a Delete policy and its backend snapshot.
func TestNamespaceDeletion(t *testing.T) {
	t.Parallel()
	f := setup(t)
	driver := "namespace.csi.test"
	f.class(t, "namespace", driver, snapshotv1.VolumeSnapshotContentDelete, true, nil)
	a := startActor(t, f.client, driver)
	var contents []string
	for _, name := range []string{"a", "b"} {
		f.volume(t, name, driver)
		vs := f.waitSnapshot(t, f.snapshot(t, "snap-"+name, snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: &name}, "").Name, ready)
		contents = append(contents, *vs.Status.BoundVolumeSnapshotContentName)
	}
	if err := f.kube.CoreV1().Namespaces().Delete(context.Background(), f.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "namespace "+f.ns, func(ctx context.Context) error {
		_, err := f.kube.CoreV1().Namespaces().Get(ctx, f.ns, metav1.GetOptions{})
		return err
	})
	f.waitBackendDeleted(t, a, contents...)
}

// TestRestoreKeepsSnapshot deletes a snapshot while a claim is being restored from it: the
// snapshot stays until the claim is no longer pending.
func TestRestoreKeepsSnapshot(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.driverWithClaim(t, "restore", snapshotv1.VolumeSnapshotContentDelete)
	vs := f.readySnapshotOfData(t)
	group := snapshotv1.GroupName
	_, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Create(context.Background(), &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "restored"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To("no-provisioner-here"),
			DataSource:       &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: vs.Name},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	looked := processed.After(t, snapshotQueue, f.key(vs.Name))
	f.deleteSnapshot(t, vs.Name)
	var held *snapshotv1.VolumeSnapshot
	looked.Until(t, "it saw the snapshot being deleted", func(controller.Result) bool {
		held = f.waitSnapshot(t, vs.Name, func(vs *snapshotv1.VolumeSnapshot) bool { return vs != nil })
		return held.DeletionTimestamp != nil
	})
	if !slices.Contains(held.Finalizers, protocol.SnapshotAsSourceFinalizer) {
		t.Fatalf("snapshot lost its as-source finalizer while a claim restores from it: %v", held.Finalizers)
	}
	if err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Delete(context.Background(), "restored", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitSnapshot(t, vs.Name, absent)
}
