package sidecar

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/test/testenv"
)

// TestGroupContent: a dynamic group content of two volumes is created with one group
// snapshot and deleted with it, through the same transitions as single contents.
func TestGroupContent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 10*time.Second)
	vols := []string{h.createVolume(t, "vol-g1"), h.createVolume(t, "vol-g2")}
	uid := uuid.NewUUID()
	g := &groupv1.VolumeGroupSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: protocol.GroupContentName(uid), Finalizers: []string{protocol.GroupContentBoundFinalizer}},
		Spec: groupv1.VolumeGroupSnapshotContentSpec{
			VolumeGroupSnapshotRef: corev1.ObjectReference{Name: "group", Namespace: "default", UID: uid},
			DeletionPolicy:         snapshotv1.VolumeSnapshotContentDelete,
			Driver:                 h.driverName,
			Source:                 groupv1.VolumeGroupSnapshotContentSource{VolumeHandles: vols},
		},
	}
	contents := h.client.GroupsnapshotV1().VolumeGroupSnapshotContents()
	g, err := contents.Create(t.Context(), g, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = contents.Patch(context.Background(), g.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = contents.Delete(context.Background(), g.Name, metav1.DeleteOptions{})
	})
	poll := func(what string, cond func(*groupv1.VolumeGroupSnapshotContent) bool) {
		t.Helper()
		if got := testenv.WaitFor(t, "group content "+what, 30*time.Second, func(ctx context.Context) (*groupv1.VolumeGroupSnapshotContent, error) {
			return contents.Get(ctx, g.Name, metav1.GetOptions{})
		}, cond); got != nil {
			g = got
		}
	}
	poll("ready", func(g *groupv1.VolumeGroupSnapshotContent) bool {
		return g != nil && g.Status != nil && ptr.Deref(g.Status.ReadyToUse, false) && g.Annotations[protocol.AnnGroupBeingCreated] == ""
	})
	if len(g.Status.VolumeSnapshotInfoList) != 2 || g.Status.VolumeGroupSnapshotHandle == nil {
		t.Fatalf("status %+v", g.Status)
	}
	for _, v := range vols {
		if snaps := h.backendSnapshots(t, v); len(snaps) != 1 || snaps[0].GetGroupSnapshotId() != *g.Status.VolumeGroupSnapshotHandle {
			t.Errorf("backend snapshots of %s: %v", v, snaps)
		}
	}
	metav1.SetMetaDataAnnotation(&g.ObjectMeta, protocol.AnnGroupBeingDeleted, "yes")
	if _, err := contents.Update(t.Context(), g, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := contents.Delete(t.Context(), g.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("gone", func(g *groupv1.VolumeGroupSnapshotContent) bool { return g == nil })
	for _, v := range vols {
		if snaps := h.backendSnapshots(t, v); len(snaps) != 0 {
			t.Errorf("backend snapshots of %s left: %v", v, snaps)
		}
	}
}
