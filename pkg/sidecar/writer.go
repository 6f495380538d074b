package sidecar

import (
	"context"
	"encoding/json"
	"fmt"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// fieldManager names the sidecar's writes.
const fieldManager = "csi-snapshotter"

// statusSubresource is the subresource status writes go through.
const statusSubresource = "status"

// write is the one way the sidecar changes an object: a JSON merge patch from old to changed,
// with old's resourceVersion as precondition (so a stale copy gets a conflict, never an
// overwrite), through the status subresource when asked. The result is remembered in the
// own-write cache. A change that patches nothing is not sent.
func (r *reconciler[T]) write(ctx context.Context, old, changed T, subresource ...string) (T, error) {
	data, err := mergePatch(old, changed)
	if err != nil || data == nil {
		return old, err
	}
	written, err := r.kind.patch(ctx, old.GetName(), types.MergePatchType, data, metav1.PatchOptions{FieldManager: fieldManager}, subresource...)
	what := "metadata"
	if len(subresource) > 0 {
		what = subresource[0]
	}
	r.metrics.write(r.kind.keys().name, what, err)
	if err != nil {
		return old, fmt.Errorf("patch %s of %s: %w", what, old.GetName(), err)
	}
	r.writes.Record(written)
	return written, nil
}

// mergePatch returns the merge patch from old to changed with old's resourceVersion as
// precondition, or nil when nothing changed.
func mergePatch(old, changed any) ([]byte, error) {
	oldJSON, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	newJSON, err := json.Marshal(changed)
	if err != nil {
		return nil, err
	}
	diff, err := jsonpatch.CreateMergePatch(oldJSON, newJSON)
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
	meta["resourceVersion"] = old.(metav1.Object).GetResourceVersion()
	return json.Marshal(patch)
}

// withAnnotation returns a copy of obj with annotation key set to value, or removed when value
// is empty.
func withAnnotation[T object[T]](obj T, key, value string) T {
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

// withoutFinalizer returns a copy of obj without finalizer.
func withoutFinalizer[T object[T]](obj T, finalizer string) T {
	c := obj.DeepCopy()
	var kept []string
	for _, f := range c.GetFinalizers() {
		if f != finalizer {
			kept = append(kept, f)
		}
	}
	c.SetFinalizers(kept)
	return c
}
