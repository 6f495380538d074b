package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shutter-csi/shutter/pkg/controller"
)

// Client is the part of a generated typed client that writes objects of type T.
type Client[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// What a write changed, as Writer counts it.
const (
	WriteCreate   = "create"
	WriteMetadata = "metadata"
	WriteStatus   = "status"
	WriteDelete   = "delete"
)

// statusSubresource is the subresource status writes go through.
const statusSubresource = "status"

// WriterOptions tune a Writer.
type WriterOptions struct {
	// FieldManager names the component's patches; empty leaves it to the API server.
	FieldManager string
	// UpdateMetadata makes Patch read the object and write it back whole with an update (PUT)
	// instead of patching it: for RBAC roles that grant update but not patch (the upstream
	// snapshot-controller's on persistentvolumeclaims). The merge patch is applied to what was
	// read, and the write still fails with a conflict when the object changed since old.
	UpdateMetadata bool
	// Count, when set, is called after every request with the writer's kind, what was written
	// (WriteCreate, WriteMetadata, WriteStatus, WriteDelete) and the request's error.
	Count func(kind, write string, err error)
}

// Writer is the one way a component writes objects of one kind: metadata and spec as a JSON merge
// patch with a resourceVersion precondition, status through the status subresource, creates, and
// deletes with a uid precondition. Every result is remembered in the own-write cache, so that the
// next sync reads through it instead of a stale lister copy, and every request is counted.
type Writer[T Object[T]] struct {
	kind   string
	client func(namespace string) Client[T]
	cache  *controller.Writes[T]
	opts   WriterOptions
}

// NewWriter returns the writer of kind (its name in errors and counts) through client, which
// returns the typed client of a namespace ("" for cluster-scoped kinds), remembering results in
// cache.
func NewWriter[T Object[T]](kind string, client func(namespace string) Client[T], cache *controller.Writes[T], opts WriterOptions) *Writer[T] {
	return &Writer[T]{kind: kind, client: client, cache: cache, opts: opts}
}

// Cache is the writer's own-write cache.
func (w *Writer[T]) Cache() *controller.Writes[T] { return w.cache }

// Patch writes the change from old to updated outside status. A change that patches nothing is
// not sent; old is returned.
func (w *Writer[T]) Patch(ctx context.Context, old, updated T) (T, error) {
	return w.patch(ctx, old, updated, WriteMetadata)
}

// PatchFinalizers adds add to obj's finalizers and drops drop, with a strategic merge patch and no
// resourceVersion precondition: the list merges with whatever others wrote to the object since,
// so a busy object (a claim that kube-controller-manager, a provisioner or a resizer writes too)
// gives no conflict and no retry. The API server still refuses a new finalizer on an object
// being deleted. Strategic merge patches are served for built-in kinds only. With UpdateMetadata
// the change is applied to the object as read and written back with an update. Nothing is sent
// when obj's finalizers already say so; obj is returned.
func (w *Writer[T]) PatchFinalizers(ctx context.Context, obj T, add, drop []string) (T, error) {
	if _, changed := WithFinalizers(obj.GetFinalizers(), add, drop); !changed {
		return obj, nil
	}
	client := w.client(obj.GetNamespace())
	if w.opts.UpdateMetadata {
		current, err := client.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if err != nil {
			return obj, fmt.Errorf("read %s %s for an update: %w", w.kind, obj.GetName(), err)
		}
		finalizers, changed := WithFinalizers(current.GetFinalizers(), add, drop)
		if !changed {
			w.cache.Record(current)
			return current, nil
		}
		next := current.DeepCopy()
		next.SetFinalizers(finalizers)
		result, err := client.Update(ctx, next, metav1.UpdateOptions{FieldManager: w.opts.FieldManager})
		return w.written(WriteMetadata, result, err, obj, "update finalizers of "+w.kind+" "+obj.GetName())
	}
	meta := map[string]any{}
	if len(add) > 0 {
		meta["finalizers"] = add
	}
	if len(drop) > 0 {
		meta["$deleteFromPrimitiveList/finalizers"] = drop
	}
	data, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return obj, err
	}
	result, err := client.Patch(ctx, obj.GetName(), types.StrategicMergePatchType, data, metav1.PatchOptions{FieldManager: w.opts.FieldManager})
	return w.written(WriteMetadata, result, err, obj, "patch finalizers of "+w.kind+" "+obj.GetName())
}

// PatchStatus writes the change from old to updated in status, as Patch does.
func (w *Writer[T]) PatchStatus(ctx context.Context, old, updated T) (T, error) {
	return w.patch(ctx, old, updated, WriteStatus, statusSubresource)
}

func (w *Writer[T]) patch(ctx context.Context, old, updated T, what string, subresource ...string) (T, error) {
	data, err := MergePatch(old, updated)
	if err != nil || data == nil {
		return old, err
	}
	if w.opts.UpdateMetadata && len(subresource) == 0 {
		return w.update(ctx, old, data)
	}
	result, err := w.client(old.GetNamespace()).Patch(ctx, old.GetName(), types.MergePatchType, data,
		metav1.PatchOptions{FieldManager: w.opts.FieldManager}, subresource...)
	return w.written(what, result, err, old, "patch "+what+" of "+old.GetName())
}

// update reads the object of old's name, applies the merge patch data (which carries old's
// resourceVersion as its precondition) and writes the result with an update.
func (w *Writer[T]) update(ctx context.Context, old T, data []byte) (T, error) {
	client := w.client(old.GetNamespace())
	current, err := client.Get(ctx, old.GetName(), metav1.GetOptions{})
	if err != nil {
		return old, fmt.Errorf("read %s %s for an update: %w", w.kind, old.GetName(), err)
	}
	if current.GetResourceVersion() != old.GetResourceVersion() {
		return old, apierrors.NewConflict(schema.GroupResource{Resource: w.kind}, old.GetName(),
			errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	}
	before, err := json.Marshal(current)
	if err != nil {
		return old, err
	}
	after, err := jsonpatch.MergePatch(before, data)
	if err != nil {
		return old, err
	}
	next := current.DeepCopy()
	// Decode into a zero object: decoding into current's copy would keep map keys the patch removed.
	reflect.ValueOf(next).Elem().SetZero()
	if err := json.Unmarshal(after, next); err != nil {
		return old, err
	}
	result, err := client.Update(ctx, next, metav1.UpdateOptions{FieldManager: w.opts.FieldManager})
	return w.written(WriteMetadata, result, err, old, "update "+w.kind+" "+old.GetName())
}

// UpdateStatus replaces obj's status; obj's resourceVersion is the precondition.
func (w *Writer[T]) UpdateStatus(ctx context.Context, obj T) (T, error) {
	result, err := w.client(obj.GetNamespace()).UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	var zero T
	return w.written(WriteStatus, result, err, zero, "update status of "+obj.GetName())
}

// Create creates obj.
func (w *Writer[T]) Create(ctx context.Context, obj T) (T, error) {
	result, err := w.client(obj.GetNamespace()).Create(ctx, obj, metav1.CreateOptions{})
	var zero T
	return w.written(WriteCreate, result, err, zero, "create "+w.kind+" "+obj.GetName())
}

// Delete deletes obj, on the condition that the object of its name is still obj (its uid).
func (w *Writer[T]) Delete(ctx context.Context, obj T) error {
	uid := obj.GetUID()
	err := w.client(obj.GetNamespace()).Delete(ctx, obj.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	w.count(WriteDelete, err)
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", w.kind, obj.GetName(), err)
	}
	return nil
}

// written counts a write of what that answered result and err. A result is remembered in the
// own-write cache; an error is returned wrapped in the write's description, with onError.
func (w *Writer[T]) written(what string, result T, err error, onError T, description string) (T, error) {
	w.count(what, err)
	if err != nil {
		return onError, fmt.Errorf("%s: %w", description, err)
	}
	w.cache.Record(result)
	return result, nil
}

func (w *Writer[T]) count(what string, err error) {
	if w.opts.Count != nil {
		w.opts.Count(w.kind, what, err)
	}
}
