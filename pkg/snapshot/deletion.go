package snapshot

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/metrics"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// beingCreatedWait is how often a deletion looks again at a content the sidecar is still creating.
const beingCreatedWait = 5 * time.Second

// finalizeSnapshot runs when a VolumeSnapshot is being deleted. Unless a claim is still being
// restored from it or its group still holds it, a Delete-policy content is handed to the sidecar
// (annotated being-deleted, then deleted), and the snapshot's finalizers are dropped.
func (c *Controller) finalizeSnapshot(ctx context.Context, vs *snapshotv1.VolumeSnapshot) error {
	ours := []string{protocol.SnapshotAsSourceFinalizer, protocol.SnapshotBoundFinalizer}
	if hasFinalizer(vs, protocol.SnapshotInGroupFinalizer) {
		held, err := c.heldByGroup(ctx, vs)
		if err != nil {
			return err
		}
		if held {
			klog.FromContext(ctx).V(4).Info("Keeping snapshot: its group holds it")
			return nil // the group lets it go when the group itself is deleted
		}
		klog.FromContext(ctx).V(2).Info("Releasing a member whose group is gone")
		ours = append(ours, protocol.SnapshotInGroupFinalizer)
	}
	if !slices.ContainsFunc(ours, func(f string) bool { return hasFinalizer(vs, f) }) {
		return c.releaseClaim(ctx, vs)
	}
	if c.restoring(vs) {
		klog.FromContext(ctx).V(4).Info("Keeping snapshot: a claim is being restored from it")
		return nil // the claim's changes bring the snapshot back
	}
	content, err := c.contentOf(vs)
	if err != nil {
		return err
	}
	if content != nil && refersTo(content, vs) && content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentDelete {
		if err := c.releaseContent(ctx, content); err != nil {
			return err
		}
	}
	// The claim goes first: once the snapshot's last finalizer is off, the snapshot is gone and
	// no later sync would release the claim if this write failed.
	if err := c.releaseClaim(ctx, vs); err != nil {
		return err
	}
	updated := vs.DeepCopy()
	updated.Finalizers, _ = withFinalizers(vs.Finalizers, nil, ours)
	if _, err := c.patchSnapshot(ctx, vs, updated); err != nil {
		return ignoreNotFound(err)
	}
	metrics.Operations.WithLabelValues(metrics.OperationDelete, metrics.StatusSuccess).
		Observe(c.clock.Since(vs.DeletionTimestamp.Time).Seconds())
	return nil
}

// contentReleaser hands single contents to the sidecar.
func (c *Controller) contentReleaser() releaser[*snapshotv1.VolumeSnapshotContent] {
	contents := c.contentClient.SnapshotV1().VolumeSnapshotContents()
	return releaser[*snapshotv1.VolumeSnapshotContent]{
		beingCreated: protocol.AnnBeingCreated, beingDeleted: protocol.AnnBeingDeleted, finalizer: protocol.ContentBoundFinalizer,
		patch: contents.Patch, writes: c.contentWrites, delete: contents.Delete,
	}
}

// releaseContent hands a content whose snapshot is gone or going to the sidecar.
func (c *Controller) releaseContent(ctx context.Context, content *snapshotv1.VolumeSnapshotContent) error {
	return c.contentReleaser().release(ctx, content, content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentDelete)
}

// restoring tells whether a claim is still being provisioned from vs.
func (c *Controller) restoring(vs *snapshotv1.VolumeSnapshot) bool {
	for _, pvc := range indexed[*corev1.PersistentVolumeClaim](c.claimIndexer, byRestoreSource, nsName(vs.Namespace, vs.Name)) {
		if pvc.Status.Phase == corev1.ClaimPending && pvc.DeletionTimestamp == nil {
			return true
		}
	}
	return false
}

func refersTo(content *snapshotv1.VolumeSnapshotContent, vs *snapshotv1.VolumeSnapshot) bool {
	ref := content.Spec.VolumeSnapshotRef
	return ref.Namespace == vs.Namespace && ref.Name == vs.Name && (ref.UID == "" || ref.UID == vs.UID)
}

// syncContent looks after a content whose snapshot is gone: with a Delete policy, or when the
// content itself is being deleted, it goes to the sidecar. Contents whose snapshot exists are
// handled by that snapshot's sync; unbound pre-provisioned ones wait for a snapshot to name them;
// group members are their group's business.
func (c *Controller) syncContent(ctx context.Context, content *snapshotv1.VolumeSnapshotContent) error {
	ref := content.Spec.VolumeSnapshotRef
	if ref.UID == "" || content.Annotations[protocol.AnnGroupSnapshotHandle] != "" || handedOver(content) {
		return nil
	}
	gone, err := c.snapshotGone(ctx, content)
	if err != nil || !gone {
		return err
	}
	if content.DeletionTimestamp == nil && content.Spec.DeletionPolicy != snapshotv1.VolumeSnapshotContentDelete {
		return nil // Retain: the content outlives its snapshot
	}
	return c.releaseContent(ctx, content)
}

// handedOver tells whether a content is already the sidecar's: marked being-deleted and, with a
// Delete policy, deleted. Releasing it again would write nothing, so its snapshot is not looked up
// (a lister miss would cost a live GET for every later change the sidecar makes to it).
func handedOver(content *snapshotv1.VolumeSnapshotContent) bool {
	_, marked := content.Annotations[protocol.AnnBeingDeleted]
	return marked && (content.DeletionTimestamp != nil || content.Spec.DeletionPolicy != snapshotv1.VolumeSnapshotContentDelete)
}

// snapshotGone tells whether the snapshot a content is bound to no longer exists.
func (c *Controller) snapshotGone(ctx context.Context, content *snapshotv1.VolumeSnapshotContent) (bool, error) {
	ref := content.Spec.VolumeSnapshotRef
	return refGone(ctx, ref.UID, func() (metav1.Object, error) {
		return c.snapshots.VolumeSnapshots(ref.Namespace).Get(ref.Name)
	}, func(ctx context.Context) (metav1.Object, error) {
		return c.client.SnapshotV1().VolumeSnapshots(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	})
}
