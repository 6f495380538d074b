package controller

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// heldRequest holds the first request that pick selects until release is called; the package's
// one-shot hook runs it (and never fails it).
type heldRequest struct {
	reached  chan struct{}
	released chan struct{}
	once     sync.Once
}

func holdRequest(t *testing.T, pick func(*http.Request) bool) *heldRequest {
	h := &heldRequest{reached: make(chan struct{}), released: make(chan struct{})}
	failing.arm(func(req *http.Request) bool {
		if pick(req) {
			h.once.Do(func() {
				close(h.reached)
				<-h.released
			})
		}
		return false
	})
	t.Cleanup(func() {
		h.release()
		failing.arm(nil)
	})
	return h
}

func (h *heldRequest) release() {
	select {
	case <-h.released:
	default:
		close(h.released)
	}
}

// TestPreProvisionedDeletedWhileBinding: a VolumeSnapshot naming a pre-provisioned Delete-policy
// content is deleted while the controller's write binding the content to it is under way. The
// deletion reaches the content's sync before the binding does (which then sees an unbound content
// and leaves it), and the binding write, being the controller's own, raises no event. The content
// must still be handed to the sidecar and deleted. (Found by the chaos suite: such a content
// outlived its snapshot for good.)
func TestPreProvisionedDeletedWhileBinding(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	name := "bind-race-" + f.ns
	contentKey := controller.Key{Name: name}
	seen := processed.After(t, "volumesnapshotcontent", contentKey)
	_, err := f.client.SnapshotV1().VolumeSnapshotContents().Create(ctx, &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{Namespace: f.ns, Name: "racer"},
			DeletionPolicy:    snapshotv1.VolumeSnapshotContentDelete, Driver: "bind-race.csi.test",
			Source: snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: ptr.To("race-handle")},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseContent(f.client, name) })
	// Nobody else writes the content: once the controller looked at it, its cache is current
	// and the binding write will pass its precondition.
	seen.Until(t, "the content is in the cache", func(controller.Result) bool { return true })
	bind := holdRequest(t, func(req *http.Request) bool {
		return req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/volumesnapshotcontents/"+name)
	})
	before := writes.mark()
	named := processed.After(t, "volumesnapshotcontent", contentKey)
	vs := f.snapshot(t, "racer", snapshotv1.VolumeSnapshotSource{VolumeSnapshotContentName: &name}, "")
	select {
	case <-bind.reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the controller never tried to bind the content")
	}
	// The new snapshot queued its content too; that sync must be over before the deletion's.
	named.Until(t, "the content was looked at after the snapshot was created", func(controller.Result) bool { return true })
	synced := processed.After(t, "volumesnapshotcontent", contentKey)
	if err := f.client.SnapshotV1().VolumeSnapshots(f.ns).Delete(ctx, vs.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The deletion queues the content; its sync sees it unbound (and makes no request), then the
	// binding goes through.
	synced.Until(t, "the content was looked at after the deletion", func(controller.Result) bool { return true })
	bind.release()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := f.client.SnapshotV1().VolumeSnapshotContents().Get(ctx, name, metav1.GetOptions{})
		return err == nil && c.DeletionTimestamp != nil && c.Annotations[protocol.AnnBeingDeleted] != "", nil
	})
	diff, _ := writes.since(before, func(_, n string) bool { return n == name })
	if diff["PATCH volumesnapshotcontents"] == 0 || diff["PATCH volumesnapshotcontents (failed 409)"] > 0 {
		t.Fatalf("the content was not bound (writes %s): the test tested nothing", format(diff))
	}
	if err != nil {
		t.Fatalf("the content bound to the deleted snapshot was not handed to the sidecar: %v (writes %s)", err, format(diff))
	}
}

// releaseContent removes a test content's finalizers, as its sidecar would, so that it goes.
func releaseContent(client clientset.Interface, name string) {
	data := []byte(`{"metadata":{"finalizers":null}}`)
	_, _ = client.SnapshotV1().VolumeSnapshotContents().Patch(context.Background(), name, types.MergePatchType, data, metav1.PatchOptions{})
	_ = client.SnapshotV1().VolumeSnapshotContents().Delete(context.Background(), name, metav1.DeleteOptions{})
}
