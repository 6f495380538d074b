package v1beta1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shutter-csi/shutter/client/apis/internal/register"
)

// GroupName is the API group of changed block tracking.
const GroupName = "cbt.storage.k8s.io"

// SchemeGroupVersion is the group and version the types of this package are served as.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1beta1"}

var (
	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = register.NewSchemeBuilder(SchemeGroupVersion, &SnapshotMetadataService{}, &SnapshotMetadataServiceList{})
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource turns an unqualified resource name into a group-qualified one.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}
