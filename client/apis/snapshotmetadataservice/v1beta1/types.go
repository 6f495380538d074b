package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=sms
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes-csi/external-snapshot-metadata/pull/2"

// SnapshotMetadataService tells backup applications how to reach a CSI driver's Kubernetes
// SnapshotMetadata gRPC service: its name is the driver's name. Every call to that service carries
// in its security_token field a Kubernetes token issued for spec.audience.
type SnapshotMetadataService struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says where the service listens and how a client trusts and authenticates to it.
	// Required.
	Spec SnapshotMetadataServiceSpec `json:"spec"`
}

// SnapshotMetadataServiceSpec is what a client needs to call the service.
type SnapshotMetadataServiceSpec struct {
	// Audience is the audience the service requires of the tokens its callers send.
	// Required.
	Audience string `json:"audience"`
	// Address is the service's TCP endpoint, host:port.
	// Required.
	Address string `json:"address"`
	// CACert is the PEM bundle of the certificate authority that signed the service's serving
	// certificate.
	// Required.
	CACert []byte `json:"caCert"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SnapshotMetadataServiceList is a list of SnapshotMetadataServices.
type SnapshotMetadataServiceList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SnapshotMetadataService `json:"items"`
}
