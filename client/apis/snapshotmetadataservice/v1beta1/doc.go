// Package v1beta1 holds the cbt.storage.k8s.io/v1beta1 API of KEP-3314 (changed block tracking):
// SnapshotMetadataService, the cluster-scoped object through which a CSI driver announces where
// its snapshot-metadata sidecar listens, which audience its callers' tokens must carry and the CA
// that signed its serving certificate. The object's name is the driver's name. Its shape is the
// public one (the upstream external-snapshot-metadata CRD), field for field.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +groupName=cbt.storage.k8s.io
// +groupGoName=Cbt
// +kubebuilder:object:generate=true
package v1beta1
