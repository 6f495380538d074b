package snapshot

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// A content, single or group, is handed to the sidecar the same way; these are the pieces that
// differ between the two kinds.
type releaser[T metav1.Object] struct {
	beingCreated, beingDeleted string
	patch                      patchFunc[T]
	writes                     *controller.Writes[T]
	delete                     func(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// release marks a content whose snapshot is gone or going as being-deleted and, for a Delete
// policy, deletes it. It never does so while the sidecar may still be creating it.
func (r releaser[T]) release(ctx context.Context, content T, deletePolicy bool) error {
	annotations := content.GetAnnotations()
	if _, creating := annotations[r.beingCreated]; creating {
		return controller.RequeueAfter(beingCreatedWait, "content is still being created")
	}
	if _, ok := annotations[r.beingDeleted]; !ok {
		patch := []byte(fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:%q}}}`,
			content.GetResourceVersion(), r.beingDeleted, protocol.AnnValueYes))
		updated, err := r.patch(ctx, content.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return fmt.Errorf("mark %s being deleted: %w", content.GetName(), ignoreNotFound(err))
		}
		r.writes.Record(updated)
		content = updated
	}
	if content.GetDeletionTimestamp() != nil || !deletePolicy {
		return nil
	}
	klog.FromContext(ctx).V(2).Info("Deleting content", "content", content.GetName())
	uid := content.GetUID()
	err := r.delete(ctx, content.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil {
		return fmt.Errorf("delete content %s: %w", content.GetName(), ignoreNotFound(err))
	}
	return nil
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
