package snapshot

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
)

// TestBindingAfterDeletionRequeuesContent: the sync of a pre-provisioned snapshot binds its
// content after the snapshot was deleted (the lister still showed it). The content's own sync for
// the deletion ran before and saw the content unbound; the binding write is the controller's own
// and raises no event. The content must be queued again by the binding, and its next sync hands
// it to the sidecar; otherwise it outlives its snapshot (found by the chaos suite). The
// integration test TestPreProvisionedDeletedWhileBinding plays the same order on a real API
// server, where it fails without the fix only when the write's answer beats its watch event.
func TestBindingAfterDeletionRequeuesContent(t *testing.T) {
	vs := newSnapshot(preProvisioned)
	content := newContent("imported", func(c *snapshotv1.VolumeSnapshotContent) {
		c.Finalizers = nil
		c.Spec.VolumeSnapshotRef = corev1.ObjectReference{Namespace: "ns", Name: "snap"}
		c.Spec.Source = snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: ptr.To("s-1")}
	})
	c, _, snap, _, informers := testControllerInformers(t, vs, content)
	ctx := context.Background()
	// The user deleted the snapshot (it had no finalizer yet); the lister does not know.
	gvr := schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	if err := snap.Tracker().Delete(gvr, "ns", "snap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.singles.syncSnapshot(ctx, vs); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("sync: %v, want the snapshot's finalizer patch to find it gone", err)
	}
	bound, err := snap.SnapshotV1().VolumeSnapshotContents().Get(ctx, "imported", metav1.GetOptions{})
	if err != nil || bound.Spec.VolumeSnapshotRef.UID != vs.UID {
		t.Fatalf("content not bound: %v %+v", err, bound)
	}
	// The informer stores the binding, then hands it to the handler, which drops it as our own.
	if err := informers.Snapshot().V1().VolumeSnapshotContents().Informer().GetStore().Update(bound); err != nil {
		t.Fatal(err)
	}
	if caused := c.singles.contents.Cache().Observe(bound); !caused {
		t.Fatal("the binding's watch event is not recognised as the controller's own write")
	}
	if got := c.singles.contentQueue.Len(); got != 1 {
		t.Fatalf("content queue holds %d keys after the binding, want the content's", got)
	}
	// The next sync of the content finds its snapshot gone and hands it to the sidecar.
	if err := c.single.snapshotIndexer.Delete(vs); err != nil {
		t.Fatal(err)
	}
	snap.ClearActions()
	if err := c.singles.syncContentKey(ctx, controller.Key{Name: "imported"}); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(writes(snap.Actions()), ","), "patch volumesnapshotcontents,delete volumesnapshotcontents"; got != want {
		t.Errorf("writes %q, want %q", got, want)
	}
}
