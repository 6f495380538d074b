// Package register is what the register.go of every API package here does alike.
package register

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// NewSchemeBuilder returns the builder that adds types to a scheme as group version gv, with the
// options, list and watch types every served group version has.
func NewSchemeBuilder(gv schema.GroupVersion, types ...runtime.Object) runtime.SchemeBuilder {
	return runtime.NewSchemeBuilder(func(scheme *runtime.Scheme) error {
		scheme.AddKnownTypes(gv, types...)
		metav1.AddToGroupVersion(scheme, gv)
		return nil
	})
}
