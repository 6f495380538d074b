package protocol

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// SecretParams are the two class parameter keys that name one secret.
type SecretParams struct{ Name, Namespace string }

// The secrets a class can name.
var (
	SnapshotterSecret     = SecretParams{ParamSnapshotterSecretName, ParamSnapshotterSecretNamespace}
	SnapshotterListSecret = SecretParams{ParamSnapshotterListSecretName, ParamSnapshotterListSecretNamespace}
	GroupSecret           = SecretParams{ParamGroupSecretName, ParamGroupSecretNamespace}
	GroupGetSecret        = SecretParams{ParamGroupGetSecretName, ParamGroupGetSecretNamespace}
)

// TemplateValues are what a secret template may refer to: the content's name and the name and
// namespace of the snapshot it is bound to (for groups: the group content and group snapshot).
type TemplateValues struct {
	ContentName, SnapshotName, SnapshotNamespace string
}

// ResolveSecret reads which secret params names, filling in templates. It returns nil when the
// class names no secret, and an error for a half-given pair, a template that refers to something
// not allowed there, or a result that is not a valid name.
//
// The name may use ${volumesnapshotcontent.name}, ${volumesnapshot.name} and
// ${volumesnapshot.namespace}; the namespace only ${volumesnapshotcontent.name} and
// ${volumesnapshot.namespace}.
func ResolveSecret(params map[string]string, keys SecretParams, v TemplateValues) (*types.NamespacedName, error) {
	nameTmpl, hasName := params[keys.Name]
	nsTmpl, hasNamespace := params[keys.Namespace]
	switch {
	case !hasName && !hasNamespace:
		return nil, nil
	case !hasName || !hasNamespace:
		return nil, fmt.Errorf("class parameters %s and %s must be given together", keys.Name, keys.Namespace)
	}
	namespace, err := expand(keys.Namespace, nsTmpl, map[string]string{
		"volumesnapshotcontent.name": v.ContentName,
		"volumesnapshot.namespace":   v.SnapshotNamespace,
	})
	if err != nil {
		return nil, err
	}
	name, err := expand(keys.Name, nameTmpl, map[string]string{
		"volumesnapshotcontent.name": v.ContentName,
		"volumesnapshot.name":        v.SnapshotName,
		"volumesnapshot.namespace":   v.SnapshotNamespace,
	})
	if err != nil {
		return nil, err
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, fmt.Errorf("%s %q resolves to %q, not a valid namespace: %s", keys.Namespace, nsTmpl, namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("%s %q resolves to %q, not a valid secret name: %s", keys.Name, nameTmpl, name, strings.Join(errs, "; "))
	}
	return &types.NamespacedName{Namespace: namespace, Name: name}, nil
}

// expand replaces every ${key} in tmpl with allowed[key], and fails on any other ${...}.
func expand(param, tmpl string, allowed map[string]string) (string, error) {
	var b strings.Builder
	rest := tmpl
	for {
		start := strings.Index(rest, "${")
		if start < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		end := strings.Index(rest[start:], "}")
		if end < 0 {
			return "", fmt.Errorf("%s %q: unterminated ${", param, tmpl)
		}
		key := rest[start+2 : start+end]
		value, ok := allowed[key]
		if !ok {
			return "", fmt.Errorf("%s %q: ${%s} is not allowed here", param, tmpl, key)
		}
		b.WriteString(rest[:start])
		b.WriteString(value)
		rest = rest[start+end+1:]
	}
}
