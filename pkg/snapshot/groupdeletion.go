package snapshot

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/metrics"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// finalizeGroup runs when a VolumeGroupSnapshot is being deleted: its members go first (each per
// its content's policy), then the group content is handed to the sidecar, which deletes the
// backend group snapshot once, and the group's finalizer is dropped.
func (g *groups) finalizeGroup(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot) error {
	if !kube.HasFinalizer(vgs, protocol.GroupSnapshotBoundFinalizer) {
		return nil
	}
	content, err := g.contentOf(vgs)
	if err != nil {
		return err
	}
	left, err := g.releaseMembers(ctx, vgs, content)
	if err != nil || left {
		// Member deletions wake the group again through onMember.
		return err
	}
	if content != nil && g.refersTo(content, vgs) && content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentDelete {
		if err := g.groupReleaser().release(ctx, content, true); err != nil {
			return err
		}
	}
	updated := vgs.DeepCopy()
	updated.Finalizers, _ = kube.WithFinalizers(vgs.Finalizers, nil, []string{protocol.GroupSnapshotBoundFinalizer})
	if _, err = patchObject(ctx, g.client.GroupsnapshotV1().VolumeGroupSnapshots(vgs.Namespace).Patch, g.snapshotWrites, vgs, updated); err != nil {
		return ignoreNotFound(err)
	}
	klog.FromContext(ctx).V(2).Info("Group snapshot released")
	metrics.Operations.WithLabelValues(metrics.OperationDeleteGroup, metrics.StatusSuccess).
		Observe(g.clock.Since(vgs.DeletionTimestamp.Time).Seconds())
	return nil
}

func (g *groups) refersTo(content *groupv1.VolumeGroupSnapshotContent, vgs *groupv1.VolumeGroupSnapshot) bool {
	ref := content.Spec.VolumeGroupSnapshotRef
	return ref.Namespace == vgs.Namespace && ref.Name == vgs.Name && (ref.UID == "" || ref.UID == vgs.UID)
}

// groupReleaser hands group contents to the sidecar.
func (g *groups) groupReleaser() releaser[*groupv1.VolumeGroupSnapshotContent] {
	contents := g.contentClient.GroupsnapshotV1().VolumeGroupSnapshotContents()
	return releaser[*groupv1.VolumeGroupSnapshotContent]{
		beingCreated: protocol.AnnGroupBeingCreated, beingDeleted: protocol.AnnGroupBeingDeleted, finalizer: protocol.GroupContentBoundFinalizer,
		patch: contents.Patch, writes: g.contentWrites, delete: contents.Delete,
	}
}

// syncGroupContent looks after a group content whose group snapshot is gone, like syncContent.
func (g *groups) syncGroupContent(ctx context.Context, content *groupv1.VolumeGroupSnapshotContent) error {
	ref := content.Spec.VolumeGroupSnapshotRef
	if ref.UID == "" {
		return nil
	}
	gone, err := refGone(ctx, ref.UID, func() (metav1.Object, error) {
		return g.snapshots.VolumeGroupSnapshots(ref.Namespace).Get(ref.Name)
	}, func(ctx context.Context) (metav1.Object, error) {
		return g.client.GroupsnapshotV1().VolumeGroupSnapshots(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	})
	if err != nil || !gone {
		return err
	}
	deletePolicy := content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentDelete
	if content.DeletionTimestamp == nil && !deletePolicy {
		return nil
	}
	return g.groupReleaser().release(ctx, content, deletePolicy)
}
