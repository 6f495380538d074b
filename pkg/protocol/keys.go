// Package protocol holds the public contract between a snapshot controller and a CSI snapshotter
// sidecar: finalizer, annotation and label keys, class parameter keys, the deterministic names of
// created objects and backend snapshots, and the secret templates of classes. Both of Shutter's
// components, and every other implementation they meet in a cluster, agree on these exactly.
package protocol

// Finalizers.
const (
	// ContentBoundFinalizer keeps a bound VolumeSnapshotContent until its backend snapshot is
	// handled.
	ContentBoundFinalizer = "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"
	// SnapshotBoundFinalizer keeps a VolumeSnapshot bound to a Delete-policy content until the
	// content is handled.
	SnapshotBoundFinalizer = "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"
	// SnapshotAsSourceFinalizer keeps a VolumeSnapshot while a claim is being restored from it.
	SnapshotAsSourceFinalizer = "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection"
	// SnapshotInGroupFinalizer keeps a member VolumeSnapshot while its group holds it.
	SnapshotInGroupFinalizer = "snapshot.storage.kubernetes.io/volumesnapshot-in-group-protection"
	// PVCAsSourceFinalizer keeps a claim while a snapshot of it is being taken.
	PVCAsSourceFinalizer = "snapshot.storage.kubernetes.io/pvc-as-source-protection"
	// GroupContentBoundFinalizer is ContentBoundFinalizer for group contents.
	GroupContentBoundFinalizer = "groupsnapshot.storage.kubernetes.io/volumegroupsnapshotcontent-bound-protection"
	// GroupSnapshotBoundFinalizer is SnapshotBoundFinalizer for group snapshots.
	GroupSnapshotBoundFinalizer = "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-bound-protection"
)

// Annotations and labels.
const (
	// AnnBeingCreated is set by the sidecar on a content before CreateSnapshot is sent and removed
	// after success or a final error. While it is set the backend may still be making a snapshot.
	AnnBeingCreated = "snapshot.storage.kubernetes.io/volumesnapshot-being-created"
	// AnnBeingDeleted is set by the controller when the bound snapshot is being deleted: the
	// sidecar may then delete the backend snapshot per the deletion policy.
	AnnBeingDeleted = "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted"
	// AnnDeletionSecretName and AnnDeletionSecretNamespace name the secret for DeleteSnapshot.
	AnnDeletionSecretName      = "snapshot.storage.kubernetes.io/deletion-secret-name"
	AnnDeletionSecretNamespace = "snapshot.storage.kubernetes.io/deletion-secret-namespace"
	// AnnDefaultClass marks the default VolumeSnapshotClass of its driver when "true".
	AnnDefaultClass = "snapshot.storage.kubernetes.io/is-default-class"

	// AnnGroupBeingCreated and AnnGroupBeingDeleted are the group content equivalents.
	AnnGroupBeingCreated = "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-created"
	AnnGroupBeingDeleted = "groupsnapshot.storage.kubernetes.io/volumegroupsnapshot-being-deleted"
	// AnnGroupDeletionSecretName and AnnGroupDeletionSecretNamespace name the secret for
	// DeleteVolumeGroupSnapshot.
	AnnGroupDeletionSecretName      = "groupsnapshot.storage.kubernetes.io/deletion-secret-name"
	AnnGroupDeletionSecretNamespace = "groupsnapshot.storage.kubernetes.io/deletion-secret-namespace"
	// AnnGroupDefaultClass marks the default VolumeGroupSnapshotClass of its driver when "true".
	AnnGroupDefaultClass = "groupsnapshot.storage.kubernetes.io/is-default-class"
	// AnnGroupSnapshotHandle marks a member content of a group snapshot: the sidecar never calls
	// CreateSnapshot or DeleteSnapshot for it.
	AnnGroupSnapshotHandle = "groupsnapshot.storage.k8s.io/volumeGroupSnapshotHandle"

	// AnnAllowVolumeModeChange on a content permits restoring it with another volume mode.
	AnnAllowVolumeModeChange = "snapshot.storage.kubernetes.io/allow-volume-mode-change"
	// LabelManagedBy names the node whose sidecar owns a content (distributed snapshotting).
	LabelManagedBy = "snapshot.storage.kubernetes.io/managed-by"

	// AnnValueYes is the value written for the being-created and being-deleted annotations.
	AnnValueYes = "yes"
)

// Class parameter keys. Every key with ReservedPrefix is read by the sidecar and never reaches
// the driver.
const (
	ReservedPrefix = "csi.storage.k8s.io/"

	ParamSnapshotterSecretName          = ReservedPrefix + "snapshotter-secret-name"
	ParamSnapshotterSecretNamespace     = ReservedPrefix + "snapshotter-secret-namespace"
	ParamSnapshotterListSecretName      = ReservedPrefix + "snapshotter-list-secret-name"
	ParamSnapshotterListSecretNamespace = ReservedPrefix + "snapshotter-list-secret-namespace"
	ParamGroupSecretName                = ReservedPrefix + "group-snapshotter-secret-name"
	ParamGroupSecretNamespace           = ReservedPrefix + "group-snapshotter-secret-namespace"
	ParamGroupGetSecretName             = ReservedPrefix + "group-snapshotter-get-secret-name"
	ParamGroupGetSecretNamespace        = ReservedPrefix + "group-snapshotter-get-secret-namespace"

	// Keys the sidecar adds to CreateSnapshot parameters with --extra-create-metadata.
	ParamSnapshotName             = ReservedPrefix + "volumesnapshot/name"
	ParamSnapshotNamespace        = ReservedPrefix + "volumesnapshot/namespace"
	ParamSnapshotContentName      = ReservedPrefix + "volumesnapshotcontent/name"
	ParamGroupSnapshotName        = ReservedPrefix + "volumegroupsnapshot/name"
	ParamGroupSnapshotNamespace   = ReservedPrefix + "volumegroupsnapshot/namespace"
	ParamGroupSnapshotContentName = ReservedPrefix + "volumegroupsnapshotcontent/name"
)

// DriverParameters returns params without the reserved keys: what is passed to the CSI driver.
func DriverParameters(params map[string]string) map[string]string {
	out := make(map[string]string, len(params))
	for k, v := range params {
		if len(k) < len(ReservedPrefix) || k[:len(ReservedPrefix)] != ReservedPrefix {
			out[k] = v
		}
	}
	return out
}
