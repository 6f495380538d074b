package snapshot

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// Index names. Every lookup a sync makes goes through the lister or one of these, never a walk
// over a whole list.
const (
	// bySourcePVC indexes the VolumeSnapshots that still depend on their source claim (see
	// snapshotsBySourcePVC) by the claim's "namespace/name".
	bySourcePVC = "sourcePVC"
	// byRestoreSource indexes claims by the "namespace/name" of the VolumeSnapshot they are
	// restored from.
	byRestoreSource = "restoreSource"
	// byDriver indexes VolumeSnapshotClasses by driver.
	byDriver = "driver"
	// byGroup indexes VolumeSnapshots by the uid of the VolumeGroupSnapshot that owns them.
	byGroup = "group"
	// byVolumeHandle indexes CSI PersistentVolumes by "driver/volume handle".
	byVolumeHandle = "volumeHandle"
)

func nsName(namespace, name string) string { return namespace + "/" + name }

// snapshotsBySourcePVC indexes a snapshot under its source claim while the snapshot still
// depends on it: until it is ready (it waits for the claim, holds its finalizer, or failed on
// it), and while it is being deleted. A ready snapshot needs nothing more of its claim, and is
// left out: a backup product keeps a hundred snapshots of each claim, and every write to the
// claim (its finalizer goes on and off for each new snapshot) would otherwise wake all of them,
// and releasing the claim would look at all of them, a cost per snapshot that grows with their
// number.
func snapshotsBySourcePVC(obj any) ([]string, error) {
	vs, ok := obj.(*snapshotv1.VolumeSnapshot)
	if !ok || !claimDependent(vs) || protocol.Ready(vs) && vs.DeletionTimestamp == nil {
		return nil, nil
	}
	return []string{nsName(vs.Namespace, *vs.Spec.Source.PersistentVolumeClaimName)}, nil
}

func claimsByRestoreSource(obj any) ([]string, error) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return nil, nil
	}
	if name := restoreSource(pvc); name != "" {
		return []string{nsName(pvc.Namespace, name)}, nil
	}
	return nil, nil
}

// restoreSource is the name of the VolumeSnapshot a claim is restored from, or "".
func restoreSource(pvc *corev1.PersistentVolumeClaim) string {
	if ref := pvc.Spec.DataSourceRef; ref != nil && isSnapshotKind(ref.APIGroup, ref.Kind) &&
		(ref.Namespace == nil || *ref.Namespace == pvc.Namespace) {
		return ref.Name
	}
	if ref := pvc.Spec.DataSource; ref != nil && isSnapshotKind(ref.APIGroup, ref.Kind) {
		return ref.Name
	}
	return ""
}

func isSnapshotKind(group *string, kind string) bool {
	return group != nil && *group == snapshotv1.GroupName && kind == "VolumeSnapshot"
}

func classesByDriver(obj any) ([]string, error) {
	if class, ok := obj.(*snapshotv1.VolumeSnapshotClass); ok {
		return []string{class.Driver}, nil
	}
	return nil, nil
}

// indexed returns the objects of type T under key in index.
func indexed[T any](indexer cache.Indexer, index, key string) []T {
	objs, err := indexer.ByIndex(index, key)
	if err != nil {
		return nil
	}
	out := make([]T, 0, len(objs))
	for _, obj := range objs {
		if t, ok := obj.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

func snapshotsByGroup(obj any) ([]string, error) {
	vs, ok := obj.(*snapshotv1.VolumeSnapshot)
	if !ok {
		return nil, nil
	}
	for _, ref := range vs.OwnerReferences {
		if ref.Kind == "VolumeGroupSnapshot" {
			return []string{string(ref.UID)}, nil
		}
	}
	return nil, nil
}

// claimDependent tells whether vs depends on its source claim: it names one and is not a group's
// member (a member's claim was snapshotted with its group, and never gets the snapshot's
// finalizer).
func claimDependent(vs *snapshotv1.VolumeSnapshot) bool {
	return vs.Spec.Source.PersistentVolumeClaimName != nil && groupOwner(vs) == nil
}

func volumesByHandle(obj any) ([]string, error) {
	if pv, ok := obj.(*corev1.PersistentVolume); ok && pv.Spec.CSI != nil {
		return []string{pv.Spec.CSI.Driver + "/" + pv.Spec.CSI.VolumeHandle}, nil
	}
	return nil, nil
}
