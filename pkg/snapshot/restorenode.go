package snapshot

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// annSelectedNode is the claim annotation that names the node a claim's volume is provisioned
// on. The scheduler sets it when it places the first pod of a WaitForFirstConsumer claim, keeps
// every later pod of an unbound claim that has it on that node, and a provisioner started with
// --node-deployment acts only on claims that name its own node.
const annSelectedNode = "volume.kubernetes.io/selected-node"

// steerRestores sends the claims being restored from vs to the node that holds its snapshot,
// with distributed snapshotting: a node-local snapshot can be restored only by the driver of its
// own node. Left to the scheduler, such a claim goes to any node, whose driver answers
// ResourceExhausted; its provisioner then clears the node for the scheduler to try another, until
// chance picks the right one. So a pending claim of vs that names no node yet gets the node of
// vs's content (its managed-by label) as its selected node, and the scheduler places its pods
// there. A claim that names a node already is left alone: if that node cannot restore it, its
// provisioner clears the annotation, the claim's change wakes vs (onClaim), and this runs again.
func (k *snapshotKind) steerRestores(ctx context.Context, vs *snapshotv1.VolumeSnapshot) error {
	if !k.distributedSnapshotting || vs.Status == nil {
		return nil
	}
	claims := indexed[*corev1.PersistentVolumeClaim](k.claimIndexer, byRestoreSource, nsName(vs.Namespace, vs.Name))
	if len(claims) == 0 {
		return nil
	}
	content, err := k.contents.Get(ptr.Deref(vs.Status.BoundVolumeSnapshotContentName, ""))
	if err != nil {
		return ignoreNotFound(err)
	}
	node := content.Labels[protocol.LabelManagedBy]
	if node == "" {
		return nil
	}
	for _, pvc := range claims {
		pvc = k.claimWriter.Cache().Latest(pvc)
		if !unplaced(pvc) {
			continue
		}
		updated := pvc.DeepCopy()
		if updated.Annotations == nil {
			updated.Annotations = map[string]string{}
		}
		updated.Annotations[annSelectedNode] = node
		if _, err := k.claimWriter.Patch(ctx, pvc, updated); err != nil {
			return err
		}
		klog.FromContext(ctx).V(2).Info("Sent a restore to the snapshot's node", "claim", klog.KObj(pvc), "node", node)
	}
	return nil
}

// unplaced tells whether pvc waits for a volume and no node has been chosen for it.
func unplaced(pvc *corev1.PersistentVolumeClaim) bool {
	_, chosen := pvc.Annotations[annSelectedNode]
	return !chosen && pvc.Spec.VolumeName == "" && pvc.DeletionTimestamp == nil && pvc.Status.Phase == corev1.ClaimPending
}
