// Package v1alpha1 holds the snapshot.shutter.dev/v1alpha1 API: SnapshotSchedule, Shutter's own
// kind for snapshots taken on a cron schedule and pruned by a retention policy. Unlike the
// snapshot.storage.k8s.io kinds, its shape is Shutter's to define.
//
// +k8s:deepcopy-gen=package
// +k8s:openapi-gen=true
// +groupName=snapshot.shutter.dev
// +groupGoName=Schedule
// +kubebuilder:object:generate=true
package v1alpha1
