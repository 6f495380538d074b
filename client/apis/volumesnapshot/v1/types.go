package v1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// VolumeSnapshot is a user's request either to take a point-in-time snapshot of a
// PersistentVolumeClaim or to use a snapshot that already exists on the storage system.
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes-csi/external-snapshotter/pull/955"
// +kubebuilder:resource:scope=Namespaced,shortName=vs
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="ReadyToUse",type=boolean,JSONPath=`.status.readyToUse`,description="Whether a volume can be restored from the snapshot."
// +kubebuilder:printcolumn:name="SourcePVC",type=string,JSONPath=`.spec.source.persistentVolumeClaimName`,description="The claim a dynamic snapshot is taken of."
// +kubebuilder:printcolumn:name="SourceSnapshotContent",type=string,JSONPath=`.spec.source.volumeSnapshotContentName`,description="The pre-provisioned VolumeSnapshotContent this snapshot uses."
// +kubebuilder:printcolumn:name="RestoreSize",type=string,JSONPath=`.status.restoreSize`,description="The smallest volume a restore from this snapshot needs."
// +kubebuilder:printcolumn:name="SnapshotClass",type=string,JSONPath=`.spec.volumeSnapshotClassName`,description="The VolumeSnapshotClass asked for."
// +kubebuilder:printcolumn:name="SnapshotContent",type=string,JSONPath=`.status.boundVolumeSnapshotContentName`,description="The VolumeSnapshotContent this snapshot is bound to; the binding holds only when the content points back at the snapshot."
// +kubebuilder:printcolumn:name="CreationTime",type=date,JSONPath=`.status.creationTime`,description="When the storage system took the snapshot."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VolumeSnapshot struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the user asks for: the source of the snapshot and its class.
	Spec VolumeSnapshotSpec `json:"spec"`

	// status is what the snapshot controller observed. Before using a snapshot, check that it and
	// its VolumeSnapshotContent point at each other.
	// +optional
	Status *VolumeSnapshotStatus `json:"status,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// VolumeSnapshotList is a list of VolumeSnapshots.
// +kubebuilder:object:root=true
type VolumeSnapshotList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// items are the VolumeSnapshots.
	Items []VolumeSnapshot `json:"items"`
}

// VolumeSnapshotSpec is the desired state of a VolumeSnapshot.
type VolumeSnapshotSpec struct {
	// source says what the snapshot is of: a claim to snapshot now, or an existing content.
	// It cannot change once set.
	Source VolumeSnapshotSource `json:"source"`

	// volumeSnapshotClassName names the VolumeSnapshotClass to use. When left out, the default
	// class of the source volume's CSI driver is used; with more than one default for that
	// driver, the snapshot fails with an error rather than guessing. It must not be empty.
	// +optional
	// +kubebuilder:validation:XValidation:rule="size(self) > 0",message="volumeSnapshotClassName must not be the empty string when set"
	VolumeSnapshotClassName *string `json:"volumeSnapshotClassName,omitempty"`
}

// VolumeSnapshotSource is where a snapshot comes from. Exactly one member is set, and members
// cannot change.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.persistentVolumeClaimName) || has(self.persistentVolumeClaimName)", message="persistentVolumeClaimName is required once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.volumeSnapshotContentName) || has(self.volumeSnapshotContentName)", message="volumeSnapshotContentName is required once set"
// +kubebuilder:validation:XValidation:rule="(has(self.volumeSnapshotContentName) && !has(self.persistentVolumeClaimName)) || (!has(self.volumeSnapshotContentName) && has(self.persistentVolumeClaimName))", message="exactly one of volumeSnapshotContentName and persistentVolumeClaimName must be set"
type VolumeSnapshotSource struct {
	// persistentVolumeClaimName names the claim, in the snapshot's namespace, to take a new
	// snapshot of.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="persistentVolumeClaimName is immutable"
	PersistentVolumeClaimName *string `json:"persistentVolumeClaimName,omitempty"`

	// volumeSnapshotContentName names a pre-provisioned VolumeSnapshotContent that represents a
	// snapshot already on the storage system.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="volumeSnapshotContentName is immutable"
	VolumeSnapshotContentName *string `json:"volumeSnapshotContentName,omitempty"`
}

// VolumeSnapshotStatus is the observed state of a VolumeSnapshot. Its time, size, readiness and
// error mirror the bound VolumeSnapshotContent's status, which users often cannot read.
type VolumeSnapshotStatus struct {
	// boundVolumeSnapshotContentName is the VolumeSnapshotContent this snapshot binds to. The
	// binding is valid only when that content's volumeSnapshotRef points back at this snapshot.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="boundVolumeSnapshotContentName is immutable once set"
	BoundVolumeSnapshotContentName *string `json:"boundVolumeSnapshotContentName,omitempty"`

	// creationTime is when the storage system took the snapshot; unknown when absent.
	// +optional
	CreationTime *metav1.Time `json:"creationTime,omitempty"`

	// readyToUse tells whether a volume can be restored from the snapshot; unknown when absent.
	// +optional
	ReadyToUse *bool `json:"readyToUse,omitempty"`

	// restoreSize is the smallest volume a restore from this snapshot needs; unknown when absent.
	// +optional
	RestoreSize *resource.Quantity `json:"restoreSize,omitempty"`

	// error is the last error met while creating the snapshot. It is cleared on success.
	// +optional
	Error *VolumeSnapshotError `json:"error,omitempty"`

	// volumeGroupSnapshotName names the VolumeGroupSnapshot this snapshot is a member of.
	// +optional
	VolumeGroupSnapshotName *string `json:"volumeGroupSnapshotName,omitempty"`
}

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// VolumeSnapshotClass holds the driver and parameters that snapshots of its class are taken with.
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes-csi/external-snapshotter/pull/955"
// +kubebuilder:resource:scope=Cluster,shortName=vsclass;vsclasses
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.driver`
// +kubebuilder:printcolumn:name="DeletionPolicy",type=string,JSONPath=`.deletionPolicy`,description="Whether contents made through this class are deleted with their VolumeSnapshot."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VolumeSnapshotClass struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// driver is the name of the CSI driver that takes snapshots of this class.
	Driver string `json:"driver"`

	// parameters are passed to the driver when a snapshot is taken. Keys starting with
	// csi.storage.k8s.io/ are read by the snapshotter sidecar and never reach the driver.
	// +optional
	Parameters map[string]string `json:"parameters,omitempty"`

	// deletionPolicy says what happens to a content made through this class, and to the snapshot
	// on the storage system, when its VolumeSnapshot is deleted: Delete removes both, Retain
	// keeps both.
	DeletionPolicy DeletionPolicy `json:"deletionPolicy"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// VolumeSnapshotClassList is a list of VolumeSnapshotClasses.
// +kubebuilder:object:root=true
type VolumeSnapshotClassList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// items are the VolumeSnapshotClasses.
	Items []VolumeSnapshotClass `json:"items"`
}

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// VolumeSnapshotContent represents one snapshot on the storage system.
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes-csi/external-snapshotter/pull/955"
// +kubebuilder:resource:scope=Cluster,shortName=vsc;vscs
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="ReadyToUse",type=boolean,JSONPath=`.status.readyToUse`,description="Whether a volume can be restored from the snapshot."
// +kubebuilder:printcolumn:name="RestoreSize",type=integer,JSONPath=`.status.restoreSize`,description="The size of the snapshot in bytes."
// +kubebuilder:printcolumn:name="DeletionPolicy",type=string,JSONPath=`.spec.deletionPolicy`,description="Whether this content and its snapshot on the storage system are deleted with the bound VolumeSnapshot."
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.spec.driver`,description="The CSI driver that owns the snapshot."
// +kubebuilder:printcolumn:name="VolumeSnapshotClass",type=string,JSONPath=`.spec.volumeSnapshotClassName`,description="The class the snapshot was taken with."
// +kubebuilder:printcolumn:name="VolumeSnapshot",type=string,JSONPath=`.spec.volumeSnapshotRef.name`,description="The VolumeSnapshot this content is bound to."
// +kubebuilder:printcolumn:name="VolumeSnapshotNamespace",type=string,JSONPath=`.spec.volumeSnapshotRef.namespace`,description="The namespace of the VolumeSnapshot this content is bound to."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VolumeSnapshotContent struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the snapshot and the VolumeSnapshot it belongs to.
	Spec VolumeSnapshotContentSpec `json:"spec"`

	// status is what the snapshotter sidecar observed on the storage system.
	// +optional
	Status *VolumeSnapshotContentStatus `json:"status,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// VolumeSnapshotContentList is a list of VolumeSnapshotContents.
// +kubebuilder:object:root=true
type VolumeSnapshotContentList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// items are the VolumeSnapshotContents.
	Items []VolumeSnapshotContent `json:"items"`
}

// VolumeSnapshotContentSpec is the desired state of a VolumeSnapshotContent.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.sourceVolumeMode) || has(self.sourceVolumeMode)", message="sourceVolumeMode is required once set"
type VolumeSnapshotContentSpec struct {
	// volumeSnapshotRef points at the VolumeSnapshot this content belongs to; that snapshot must
	// name this content for the binding to hold. A pre-provisioned content must give the
	// snapshot's name and namespace. Once its uid is set, the reference cannot change.
	// +kubebuilder:validation:XValidation:rule="has(self.name) && has(self.__namespace__)",message="both spec.volumeSnapshotRef.name and spec.volumeSnapshotRef.namespace must be set"
	// +kubebuilder:validation:XValidation:rule="!has(oldSelf.uid) || self == oldSelf",message="volumeSnapshotRef is immutable once bound"
	VolumeSnapshotRef corev1.ObjectReference `json:"volumeSnapshotRef"`

	// deletionPolicy says whether this content, and the snapshot on the storage system, are
	// deleted (Delete) or kept (Retain) when the bound VolumeSnapshot is deleted. Dynamic contents
	// take it from their class; a pre-provisioned content must state it.
	DeletionPolicy DeletionPolicy `json:"deletionPolicy"`

	// driver is the CSI driver that owns the snapshot, as its GetPluginInfo names itself.
	Driver string `json:"driver"`

	// volumeSnapshotClassName is the class the snapshot was taken with. The class may change or
	// go away later, so nothing reads it after the snapshot is made.
	// +optional
	VolumeSnapshotClassName *string `json:"volumeSnapshotClassName,omitempty"`

	// source is the volume to snapshot (dynamic) or the existing snapshot (pre-provisioned). It
	// cannot change once set.
	Source VolumeSnapshotContentSource `json:"source"`

	// sourceVolumeMode is the volume mode, Filesystem or Block, of the volume the snapshot was
	// taken of; unknown when absent. It cannot change once set.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="sourceVolumeMode is immutable"
	SourceVolumeMode *corev1.PersistentVolumeMode `json:"sourceVolumeMode,omitempty"`
}

// VolumeSnapshotContentSource is the CSI source of a snapshot. Exactly one member is set, and
// members cannot change.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.volumeHandle) || has(self.volumeHandle)", message="volumeHandle is required once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.snapshotHandle) || has(self.snapshotHandle)", message="snapshotHandle is required once set"
// +kubebuilder:validation:XValidation:rule="(has(self.volumeHandle) && !has(self.snapshotHandle)) || (!has(self.volumeHandle) && has(self.snapshotHandle))", message="exactly one of volumeHandle and snapshotHandle must be set"
type VolumeSnapshotContentSource struct {
	// volumeHandle is the CSI volume_id of the volume to take a snapshot of.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="volumeHandle is immutable"
	VolumeHandle *string `json:"volumeHandle,omitempty"`

	// snapshotHandle is the CSI snapshot_id of a snapshot that already exists.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="snapshotHandle is immutable"
	SnapshotHandle *string `json:"snapshotHandle,omitempty"`
}

// VolumeSnapshotContentStatus is the observed state of a VolumeSnapshotContent.
type VolumeSnapshotContentStatus struct {
	// snapshotHandle is the CSI snapshot_id on the storage system. Absent while a dynamic
	// snapshot is being taken or after it failed.
	// +optional
	SnapshotHandle *string `json:"snapshotHandle,omitempty"`

	// creationTime is when the storage system took the snapshot, in nanoseconds since the Unix
	// epoch (as `date +%s%N` prints it); unknown when absent.
	// +optional
	CreationTime *int64 `json:"creationTime,omitempty"`

	// restoreSize is the size of the snapshot in bytes; a volume restored from it must be at
	// least this large. Unknown when absent.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RestoreSize *int64 `json:"restoreSize,omitempty"`

	// readyToUse tells whether a volume can be restored from the snapshot; unknown when absent.
	// +optional
	ReadyToUse *bool `json:"readyToUse,omitempty"`

	// error is the last error met while creating the snapshot. It is cleared on success.
	// +optional
	Error *VolumeSnapshotError `json:"error,omitempty"`

	// volumeGroupSnapshotHandle is the CSI group_snapshot_id of the group snapshot this snapshot
	// was taken in, if any.
	// +optional
	VolumeGroupSnapshotHandle *string `json:"volumeGroupSnapshotHandle,omitempty"`
}

// DeletionPolicy says what becomes of a content and its backend snapshot when the snapshot object
// bound to it is deleted.
// +kubebuilder:validation:Enum=Delete;Retain
type DeletionPolicy string

const (
	// VolumeSnapshotContentDelete deletes the content and the snapshot on the storage system.
	VolumeSnapshotContentDelete DeletionPolicy = "Delete"

	// VolumeSnapshotContentRetain keeps the content and the snapshot on the storage system.
	VolumeSnapshotContentRetain DeletionPolicy = "Retain"
)

// VolumeSnapshotError is an error met while taking a snapshot.
type VolumeSnapshotError struct {
	// time is when the error was met.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`

	// message describes the error. It may be logged, so it never holds secrets.
	// +optional
	Message *string `json:"message,omitempty"`
}
