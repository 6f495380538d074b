package controller

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// claimProtected tells whether the claim still carries the pvc-as-source finalizer.
func (f *fixture) claimProtected(t *testing.T, name string) bool {
	pvc, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	} else if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(pvc.Finalizers, protocol.PVCAsSourceFinalizer)
}

// TestSnapshotDeletedBeforeItsFinalizers: a new snapshot is deleted while the controller's write
// of its finalizers is under way, so the snapshot goes at once. Its claim must not keep the
// pvc-as-source finalizer: nothing would ever take it off (found by the chaos suite, where the
// snapshot's finalizer patch was refused to a fenced leader and failed with injected 500s while
// the claim's had passed).
func TestSnapshotDeletedBeforeItsFinalizers(t *testing.T) {
	f := setup(t)
	driver := "early-delete.csi.test"
	f.class(t, "early-delete", driver, snapshotv1.VolumeSnapshotContentDelete, true, nil)
	f.volume(t, "src", driver)
	name := "early"
	patch := holdRequest(t, func(req *http.Request) bool {
		return req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/volumesnapshots/"+name)
	})
	vs := f.snapshot(t, name, snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("src")}, "")
	select {
	case <-patch.reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the controller never wrote the snapshot's finalizers")
	}
	synced := processed.After(t, "volumesnapshot", controller.Key{Namespace: f.ns, Name: name})
	if err := f.client.SnapshotV1().VolumeSnapshots(f.ns).Delete(context.Background(), vs.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	patch.release()
	synced.Until(t, "the snapshot is gone and its claim free", func(controller.Result) bool {
		_, err := f.client.SnapshotV1().VolumeSnapshots(f.ns).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && !f.claimProtected(t, "src")
	})
}

// TestClaimReleaseFailsOnce: a snapshot still being taken is deleted, and the write that releases
// its claim fails once. The snapshot must keep its finalizers until the claim is released: once
// they are off it is gone, and no later sync would release the claim.
func TestClaimReleaseFailsOnce(t *testing.T) {
	f := setup(t)
	driver := "claim-release.csi.test"
	f.class(t, "claim-release", driver, snapshotv1.VolumeSnapshotContentRetain, true, nil)
	a := startActor(t, f.client, driver)
	a.setHold(true) // the backend keeps cutting: the snapshot is not ready, the claim protected
	f.volume(t, "src", driver)
	vs := f.snapshot(t, "taking", snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("src")}, "")
	content := protocol.ContentName(vs.UID)
	t.Cleanup(func() { releaseContent(f.client, content) })
	f.waitClaim(t, "src", func(pvc *corev1.PersistentVolumeClaim) bool {
		return slices.Contains(pvc.Finalizers, protocol.PVCAsSourceFinalizer)
	})
	failing.arm(func(req *http.Request) bool {
		return req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/persistentvolumeclaims/src")
	})
	defer failing.arm(nil)
	if err := f.client.SnapshotV1().VolumeSnapshots(f.ns).Delete(context.Background(), vs.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "snapshot "+vs.Name, func(ctx context.Context) error {
		_, err := f.client.SnapshotV1().VolumeSnapshots(f.ns).Get(ctx, vs.Name, metav1.GetOptions{})
		return err
	})
	f.waitClaim(t, "src", func(pvc *corev1.PersistentVolumeClaim) bool {
		return !slices.Contains(pvc.Finalizers, protocol.PVCAsSourceFinalizer)
	})
	if !failing.fired() {
		t.Error("the claim's release never failed: the test tested nothing")
	}
}
