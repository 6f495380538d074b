// Package kube is what Shutter's components need from the API server beyond the generated
// clients: the one write path (a JSON merge patch with a resourceVersion precondition, status
// writes, creates and deletes, each remembered in the own-write cache and counted), finalizer and
// annotation helpers, and the wait for resources the API server does not serve yet.
package kube

import (
	"encoding/json"
	"slices"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Object is an API object, as a pointer that deep-copies to its own type.
type Object[T any] interface {
	metav1.Object
	runtime.Object
	DeepCopy() T
}

// MergePatch returns the JSON merge patch that turns old into updated, with old's resourceVersion
// as the precondition, or nil when nothing changed. A stale old gets a conflict, never an
// overwrite; that is also what makes replacing lists such as finalizers whole safe.
func MergePatch(old, updated metav1.Object) ([]byte, error) {
	before, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	after, err := json.Marshal(updated)
	if err != nil {
		return nil, err
	}
	diff, err := jsonpatch.CreateMergePatch(before, after)
	if err != nil {
		return nil, err
	}
	patch := map[string]any{}
	if err := json.Unmarshal(diff, &patch); err != nil {
		return nil, err
	}
	if len(patch) == 0 {
		return nil, nil
	}
	meta, _ := patch["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		patch["metadata"] = meta
	}
	meta["resourceVersion"] = old.GetResourceVersion()
	return json.Marshal(patch)
}

// HasFinalizer tells whether obj carries finalizer.
func HasFinalizer(obj metav1.Object, finalizer string) bool {
	return slices.Contains(obj.GetFinalizers(), finalizer)
}

// WithFinalizers returns finalizers with add appended (those not there yet) and drop removed, and
// whether that changed anything. The order of the others is kept.
func WithFinalizers(finalizers, add, drop []string) ([]string, bool) {
	out := make([]string, 0, len(finalizers)+len(add))
	changed := false
	for _, f := range finalizers {
		if slices.Contains(drop, f) {
			changed = true
			continue
		}
		out = append(out, f)
	}
	for _, f := range add {
		if !slices.Contains(out, f) {
			out = append(out, f)
			changed = true
		}
	}
	return out, changed
}

// WithoutFinalizer returns a copy of obj without finalizer.
func WithoutFinalizer[T Object[T]](obj T, finalizer string) T {
	c := obj.DeepCopy()
	kept, _ := WithFinalizers(c.GetFinalizers(), nil, []string{finalizer})
	c.SetFinalizers(kept)
	return c
}

// WithAnnotation returns a copy of obj with annotation key set to value, or removed when value is
// empty.
func WithAnnotation[T Object[T]](obj T, key, value string) T {
	c := obj.DeepCopy()
	ann := c.GetAnnotations()
	if value == "" {
		delete(ann, key)
	} else {
		if ann == nil {
			ann = map[string]string{}
		}
		ann[key] = value
	}
	c.SetAnnotations(ann)
	return c
}
