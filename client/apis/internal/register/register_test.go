package register

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestNewSchemeBuilder(t *testing.T) {
	gv := schema.GroupVersion{Group: "example.com", Version: "v1"}
	scheme := runtime.NewScheme()
	builder := NewSchemeBuilder(gv, &metav1.PartialObjectMetadata{})
	if err := builder.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"PartialObjectMetadata", "ListOptions", "WatchEvent", "DeleteOptions"} {
		if !scheme.Recognizes(gv.WithKind(kind)) {
			t.Errorf("%s is not registered as %s", kind, gv)
		}
	}
}
