// Command models-schema prints the OpenAPI v2 definitions of the client's API types (and of the
// apimachinery types they use), named as the API server names them, for applyconfiguration-gen:
// they are the schema behind applyconfiguration.NewTypeConverter, with which the fake clientset's
// NewClientset tracks managed fields. hack/update-codegen.sh runs it.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/shutter-csi/shutter/client/openapi"
)

func main() {
	if err := json.NewEncoder(os.Stdout).Encode(swagger()); err != nil {
		fmt.Fprintln(os.Stderr, "models-schema:", err)
		os.Exit(1)
	}
}

// objectReference is the one type of k8s.io/api/core/v1 that the API types hold as a struct (the
// contents' references to their snapshots); its definition is given here rather than generating
// definitions for all of core/v1.
const objectReference = "io.k8s.api.core.v1.ObjectReference"

// objectReferenceSchema is core/v1 ObjectReference's schema: seven scalar fields, replaced as a
// whole (+structType=atomic).
func objectReferenceSchema() spec.Schema {
	s := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: map[string]spec.Schema{}}}
	for _, field := range []string{"kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"} {
		s.Properties[field] = *spec.StringProperty()
	}
	s.AddExtension("x-kubernetes-map-type", "atomic")
	return s
}

// swagger holds every definition under its REST-friendly name, the name a scheme's
// ToOpenAPIDefinitionName gives a kind, with references by that name too. A definition that
// carries a v2 form of itself (types whose v3 schema uses oneOf) is given in that form.
func swagger() *spec.Swagger {
	ref := func(name string) spec.Ref {
		return spec.MustCreateRef("#/definitions/" + util.ToRESTFriendlyName(name))
	}
	defs := openapi.GetOpenAPIDefinitions(ref)
	schemas := make(spec.Definitions, len(defs))
	for name, def := range defs {
		schema := def.Schema
		if v2, ok := schema.Extensions[common.ExtensionV2Schema].(spec.Schema); ok {
			schema = v2
		}
		schemas[util.ToRESTFriendlyName(name)] = schema
	}
	schemas[objectReference] = objectReferenceSchema()
	return &spec.Swagger{SwaggerProps: spec.SwaggerProps{
		Swagger:     "2.0",
		Info:        &spec.Info{InfoProps: spec.InfoProps{Title: "Shutter client API types", Version: "unversioned"}},
		Definitions: schemas,
	}}
}
