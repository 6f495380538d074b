// Package v1 holds the groupsnapshot.storage.k8s.io/v1 API: VolumeGroupSnapshot,
// VolumeGroupSnapshotContent and VolumeGroupSnapshotClass. The JSON shape of every type is fixed
// by the public Kubernetes API; change nothing here that an existing cluster's objects could not
// round-trip through.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +groupName=groupsnapshot.storage.k8s.io
// +kubebuilder:object:generate=true
package v1
