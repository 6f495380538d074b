package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// VolumeGroupSnapshot is a user's request either to take one crash-consistent snapshot of several
// PersistentVolumeClaims or to use such a group snapshot that already exists.
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes-csi/external-snapshotter/pull/1068"
// +kubebuilder:resource:scope=Namespaced,shortName=vgs
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="ReadyToUse",type=boolean,JSONPath=`.status.readyToUse`,description="Whether every member snapshot can be restored from."
// +kubebuilder:printcolumn:name="VolumeGroupSnapshotClass",type=string,JSONPath=`.spec.volumeGroupSnapshotClassName`,description="The VolumeGroupSnapshotClass asked for."
// +kubebuilder:printcolumn:name="VolumeGroupSnapshotContent",type=string,JSONPath=`.status.boundVolumeGroupSnapshotContentName`,description="The VolumeGroupSnapshotContent this group snapshot is bound to; the binding holds only when the content points back."
// +kubebuilder:printcolumn:name="CreationTime",type=date,JSONPath=`.status.creationTime`,description="When the storage system took the group snapshot."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VolumeGroupSnapshot struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the user asks for: the claims to snapshot, or an existing group content.
	Spec VolumeGroupSnapshotSpec `json:"spec"`

	// status is what the snapshot controller observed. Before using a group snapshot, check that
	// it and its VolumeGroupSnapshotContent point at each other.
	// +optional
	Status *VolumeGroupSnapshotStatus `json:"status,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// VolumeGroupSnapshotList is a list of VolumeGroupSnapshots.
// +kubebuilder:object:root=true
type VolumeGroupSnapshotList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// items are the VolumeGroupSnapshots.
	Items []VolumeGroupSnapshot `json:"items"`
}

// VolumeGroupSnapshotSpec is the desired state of a VolumeGroupSnapshot.
type VolumeGroupSnapshotSpec struct {
	// source says what the group snapshot is of. It cannot change once set.
	Source VolumeGroupSnapshotSource `json:"source"`

	// volumeGroupSnapshotClassName names the VolumeGroupSnapshotClass to use; when left out, the
	// default class of the members' driver is used. It must not be empty.
	// +optional
	// +kubebuilder:validation:XValidation:rule="size(self) > 0",message="volumeGroupSnapshotClassName must not be the empty string when set"
	VolumeGroupSnapshotClassName *string `json:"volumeGroupSnapshotClassName,omitempty"`
}

// VolumeGroupSnapshotSource is where a group snapshot comes from. Exactly one member is set, and
// members cannot change.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.selector) || has(self.selector)", message="selector is required once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.volumeGroupSnapshotContentName) || has(self.volumeGroupSnapshotContentName)", message="volumeGroupSnapshotContentName is required once set"
// +kubebuilder:validation:XValidation:rule="(has(self.selector) && !has(self.volumeGroupSnapshotContentName)) || (!has(self.selector) && has(self.volumeGroupSnapshotContentName))", message="exactly one of selector and volumeGroupSnapshotContentName must be set"
type VolumeGroupSnapshotSource struct {
	// selector picks, by label, the claims in the group snapshot's namespace to snapshot
	// together. Labels changed after the group content exists do not change its members.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="selector is immutable"
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// volumeGroupSnapshotContentName names a pre-provisioned VolumeGroupSnapshotContent that
	// represents a group snapshot already on the storage system.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="volumeGroupSnapshotContentName is immutable"
	VolumeGroupSnapshotContentName *string `json:"volumeGroupSnapshotContentName,omitempty"`
}

// VolumeGroupSnapshotStatus is the observed state of a VolumeGroupSnapshot.
type VolumeGroupSnapshotStatus struct {
	// boundVolumeGroupSnapshotContentName is the VolumeGroupSnapshotContent this group snapshot
	// binds to. The binding is valid only when that content points back at this group snapshot.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="boundVolumeGroupSnapshotContentName is immutable once set"
	BoundVolumeGroupSnapshotContentName *string `json:"boundVolumeGroupSnapshotContentName,omitempty"`

	// creationTime is when the storage system took the group snapshot; unknown when absent.
	// +optional
	CreationTime *metav1.Time `json:"creationTime,omitempty"`

	// readyToUse becomes true once every member snapshot is ready; unknown when absent.
	// +optional
	ReadyToUse *bool `json:"readyToUse,omitempty"`

	// error is the last error met while creating the group snapshot. It is cleared on success.
	// +optional
	Error *snapshotv1.VolumeSnapshotError `json:"error,omitempty"`
}

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// VolumeGroupSnapshotClass holds the driver and parameters that group snapshots of its class are
// taken with.
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes-csi/external-snapshotter/pull/1068"
// +kubebuilder:resource:scope=Cluster,shortName=vgsclass;vgsclasses
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.driver`
// +kubebuilder:printcolumn:name="DeletionPolicy",type=string,JSONPath=`.deletionPolicy`,description="Whether group contents made through this class are deleted with their VolumeGroupSnapshot."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VolumeGroupSnapshotClass struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// driver is the name of the CSI driver that takes group snapshots of this class.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="driver is immutable once set"
	Driver string `json:"driver"`

	// parameters are passed to the driver when a group snapshot is taken. Keys starting with
	// csi.storage.k8s.io/ are read by the snapshotter sidecar and never reach the driver.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="parameters are immutable once set"
	Parameters map[string]string `json:"parameters,omitempty"`

	// deletionPolicy says whether a group content made through this class, and the group
	// snapshot on the storage system, are deleted (Delete) or kept (Retain) with their
	// VolumeGroupSnapshot.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="deletionPolicy is immutable once set"
	DeletionPolicy snapshotv1.DeletionPolicy `json:"deletionPolicy"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// VolumeGroupSnapshotClassList is a list of VolumeGroupSnapshotClasses.
// +kubebuilder:object:root=true
type VolumeGroupSnapshotClassList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// items are the VolumeGroupSnapshotClasses.
	Items []VolumeGroupSnapshotClass `json:"items"`
}

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// VolumeGroupSnapshotContent represents one group snapshot on the storage system.
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes-csi/external-snapshotter/pull/1068"
// +kubebuilder:resource:scope=Cluster,shortName=vgsc;vgscs
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="ReadyToUse",type=boolean,JSONPath=`.status.readyToUse`,description="Whether every member snapshot can be restored from."
// +kubebuilder:printcolumn:name="DeletionPolicy",type=string,JSONPath=`.spec.deletionPolicy`,description="Whether this content and its group snapshot on the storage system are deleted with the bound VolumeGroupSnapshot."
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.spec.driver`,description="The CSI driver that owns the group snapshot."
// +kubebuilder:printcolumn:name="VolumeGroupSnapshotClass",type=string,JSONPath=`.spec.volumeGroupSnapshotClassName`,description="The class the group snapshot was taken with."
// +kubebuilder:printcolumn:name="VolumeGroupSnapshotNamespace",type=string,JSONPath=`.spec.volumeGroupSnapshotRef.namespace`,description="The namespace of the VolumeGroupSnapshot this content is bound to."
// +kubebuilder:printcolumn:name="VolumeGroupSnapshot",type=string,JSONPath=`.spec.volumeGroupSnapshotRef.name`,description="The VolumeGroupSnapshot this content is bound to."
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VolumeGroupSnapshotContent struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the group snapshot and the VolumeGroupSnapshot it belongs to.
	Spec VolumeGroupSnapshotContentSpec `json:"spec"`

	// status is what the snapshotter sidecar observed on the storage system.
	// +optional
	Status *VolumeGroupSnapshotContentStatus `json:"status,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// VolumeGroupSnapshotContentList is a list of VolumeGroupSnapshotContents.
// +kubebuilder:object:root=true
type VolumeGroupSnapshotContentList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// items are the VolumeGroupSnapshotContents.
	Items []VolumeGroupSnapshotContent `json:"items"`
}

// VolumeGroupSnapshotContentSpec is the desired state of a VolumeGroupSnapshotContent.
type VolumeGroupSnapshotContentSpec struct {
	// volumeGroupSnapshotRef points at the VolumeGroupSnapshot this content belongs to; that group
	// snapshot must name this content for the binding to hold. Once its uid is set, the reference
	// cannot change.
	// +kubebuilder:validation:XValidation:rule="has(self.name) && has(self.__namespace__)",message="both volumeGroupSnapshotRef.name and volumeGroupSnapshotRef.namespace must be set"
	// +kubebuilder:validation:XValidation:rule="!has(oldSelf.uid) || self == oldSelf",message="volumeGroupSnapshotRef is immutable once bound"
	VolumeGroupSnapshotRef corev1.ObjectReference `json:"volumeGroupSnapshotRef"`

	// deletionPolicy says whether this content, and the group snapshot on the storage system, are
	// deleted (Delete) or kept (Retain) when the bound VolumeGroupSnapshot is deleted.
	DeletionPolicy snapshotv1.DeletionPolicy `json:"deletionPolicy"`

	// driver is the CSI driver that owns the group snapshot.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="driver is immutable once set"
	Driver string `json:"driver"`

	// volumeGroupSnapshotClassName is the class the group snapshot was taken with; set for
	// dynamic group snapshots, optional for pre-provisioned ones.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="volumeGroupSnapshotClassName is immutable once set"
	VolumeGroupSnapshotClassName *string `json:"volumeGroupSnapshotClassName,omitempty"`

	// source is the volumes to snapshot (dynamic) or the existing group snapshot
	// (pre-provisioned). It cannot change once set.
	Source VolumeGroupSnapshotContentSource `json:"source"`
}

// VolumeSnapshotInfo describes one member snapshot of a group snapshot.
type VolumeSnapshotInfo struct {
	// volumeHandle is the CSI volume_id of the volume the snapshot was taken of.
	VolumeHandle string `json:"volumeHandle,omitempty"`

	// snapshotHandle is the CSI snapshot_id of the member snapshot.
	SnapshotHandle string `json:"snapshotHandle,omitempty"`

	// creationTime is when the storage system took the snapshot, in nanoseconds since the Unix
	// epoch.
	// +optional
	CreationTime *int64 `json:"creationTime,omitempty"`

	// readyToUse tells whether a volume can be restored from the snapshot.
	// +optional
	ReadyToUse *bool `json:"readyToUse,omitempty"`

	// restoreSize is the smallest volume, in bytes, a restore from this snapshot needs.
	// +optional
	RestoreSize *int64 `json:"restoreSize,omitempty"`
}

// VolumeGroupSnapshotContentStatus is the observed state of a VolumeGroupSnapshotContent.
type VolumeGroupSnapshotContentStatus struct {
	// volumeGroupSnapshotHandle is the CSI group_snapshot_id on the storage system.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="volumeGroupSnapshotHandle is immutable once set"
	VolumeGroupSnapshotHandle *string `json:"volumeGroupSnapshotHandle,omitempty"`

	// creationTime is when the storage system took the group snapshot; unknown when absent.
	// +optional
	CreationTime *metav1.Time `json:"creationTime,omitempty"`

	// readyToUse becomes true once every member snapshot is ready.
	// +optional
	ReadyToUse *bool `json:"readyToUse,omitempty"`

	// error is the last error met while creating the group snapshot. It is cleared on success.
	// +optional
	Error *snapshotv1.VolumeSnapshotError `json:"error,omitempty"`

	// volumeSnapshotInfoList describes every member snapshot the driver reported.
	// +optional
	VolumeSnapshotInfoList []VolumeSnapshotInfo `json:"volumeSnapshotInfoList,omitempty"`
}

// VolumeGroupSnapshotContentSource is the CSI source of a group snapshot. Exactly one member is
// set, and members cannot change.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.volumeHandles) || has(self.volumeHandles)", message="volumeHandles is required once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.groupSnapshotHandles) || has(self.groupSnapshotHandles)", message="groupSnapshotHandles is required once set"
// +kubebuilder:validation:XValidation:rule="(has(self.volumeHandles) && !has(self.groupSnapshotHandles)) || (!has(self.volumeHandles) && has(self.groupSnapshotHandles))", message="exactly one of volumeHandles and groupSnapshotHandles must be set"
type VolumeGroupSnapshotContentSource struct {
	// volumeHandles are the CSI volume_ids to snapshot together.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="volumeHandles is immutable"
	VolumeHandles []string `json:"volumeHandles,omitempty"`

	// groupSnapshotHandles identify a group snapshot that already exists on the storage system.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="groupSnapshotHandles is immutable"
	GroupSnapshotHandles *GroupSnapshotHandles `json:"groupSnapshotHandles,omitempty"`
}

// GroupSnapshotHandles identify a pre-provisioned group snapshot and its members.
type GroupSnapshotHandles struct {
	// volumeGroupSnapshotHandle is the CSI group_snapshot_id of the group snapshot.
	VolumeGroupSnapshotHandle string `json:"volumeGroupSnapshotHandle"`

	// volumeSnapshotHandles are the CSI snapshot_ids of its member snapshots.
	VolumeSnapshotHandles []string `json:"volumeSnapshotHandles"`
}
