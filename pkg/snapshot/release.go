package snapshot

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// A content, single or group, is handed to the sidecar the same way; these are the pieces that
// differ between the two kinds.
type releaser[T metav1.Object] struct {
	beingCreated, beingDeleted string
	// finalizer is the kind's bound-protection finalizer: the sidecar deletes the backend
	// snapshot only of a content that carries it along with being-deleted.
	finalizer string
	patch     patchFunc[T]
	writes    *controller.Writes[T]
	delete    func(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// release marks a content whose snapshot is gone or going as being-deleted and, for a Delete
// policy, deletes it. It never does so while the sidecar may still be creating it, and never
// deletes a content without its bound-protection finalizer: a DELETE would remove it at once and
// the sidecar would never delete its backend snapshot. A content that lacks the finalizer (an
// imported or re-applied one, or one whose policy was changed to Delete) gets it in the same
// write as the annotation.
func (r releaser[T]) release(ctx context.Context, content T, deletePolicy bool) error {
	annotations := content.GetAnnotations()
	if _, creating := annotations[r.beingCreated]; creating {
		return controller.RequeueAfter(beingCreatedWait, "content is still being created")
	}
	deleting := content.GetDeletionTimestamp() != nil
	protect := deletePolicy && !deleting && !kube.HasFinalizer(content, r.finalizer)
	if _, marked := annotations[r.beingDeleted]; !marked || protect {
		updated, err := r.mark(ctx, content, protect)
		if apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		content = updated
	}
	if deletePolicy && deleting && !kube.HasFinalizer(content, r.finalizer) {
		// Deleted by someone else before it was protected; nobody can delete its backend snapshot.
		klog.FromContext(ctx).Info("Content deleted without its finalizer: its backend snapshot is not deleted",
			"content", content.GetName())
	}
	if deleting || !deletePolicy {
		return nil
	}
	klog.FromContext(ctx).V(2).Info("Deleting content", "content", content.GetName())
	uid := content.GetUID()
	err := r.delete(ctx, content.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete content %s: %w", content.GetName(), err)
	}
	return nil
}

// mark writes the being-deleted annotation and, with protect, the bound-protection finalizer.
func (r releaser[T]) mark(ctx context.Context, content T, protect bool) (T, error) {
	meta := map[string]any{
		"resourceVersion": content.GetResourceVersion(),
		"annotations":     map[string]string{r.beingDeleted: protocol.AnnValueYes},
	}
	if protect {
		meta["finalizers"], _ = kube.WithFinalizers(content.GetFinalizers(), []string{r.finalizer}, nil)
		klog.FromContext(ctx).V(2).Info("Protecting content before deleting it", "content", content.GetName())
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		var zero T
		return zero, err
	}
	updated, err := r.patch(ctx, content.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		var zero T
		return zero, fmt.Errorf("mark %s being deleted: %w", content.GetName(), err)
	}
	r.writes.Record(updated)
	return updated, nil
}

// refGone tells whether the object a content is bound to (uid) no longer exists. A lister miss is
// confirmed with the API server, so a slow informer never costs a backend snapshot.
func refGone(ctx context.Context, uid types.UID, listed func() (metav1.Object, error),
	live func(context.Context) (metav1.Object, error)) (bool, error) {
	obj, err := listed()
	if apierrors.IsNotFound(err) {
		obj, err = live(ctx)
	}
	if apierrors.IsNotFound(err) {
		return true, nil
	} else if err != nil {
		return false, err
	}
	return obj.GetUID() != uid, nil
}
