// Package v1 holds the snapshot.storage.k8s.io/v1 API: VolumeSnapshot, VolumeSnapshotContent and
// VolumeSnapshotClass. The JSON shape of every type is fixed by the public Kubernetes API; change
// nothing here that an existing cluster's objects could not round-trip through.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +groupName=snapshot.storage.k8s.io
// +kubebuilder:object:generate=true
package v1
