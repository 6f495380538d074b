package kube

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shutter-csi/shutter/pkg/controller"
)

// Client is the part of a generated typed client that writes objects of type T.
type Client[T any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
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
	// Count, when set, is called after every request with the writer's kind, what was written
	// (WriteCreate, WriteMetadata, WriteStatus, WriteDelete) and the request's error.
	Count func(kind, write string, err error)
}

// Writer is the one way a component writes objects of one kind: metadata and spec as a JSON merge
// patch with a resourceVersion precondition, status through the status subresource, creates, and
// deletes with a uid precondition. Every result is remembered in the own-write cache, so that the
// next sync reads through it instead of a stale lister copy, and every request is counted.
type Writer[T metav1.Object] struct {
	kind   string
	client func(namespace string) Client[T]
	cache  *controller.Writes[T]
	opts   WriterOptions
}

// NewWriter returns the writer of kind (its name in errors and counts) through client, which
// returns the typed client of a namespace ("" for cluster-scoped kinds), remembering results in
// cache.
func NewWriter[T metav1.Object](kind string, client func(namespace string) Client[T], cache *controller.Writes[T], opts WriterOptions) *Writer[T] {
	return &Writer[T]{kind: kind, client: client, cache: cache, opts: opts}
}

// Cache is the writer's own-write cache.
func (w *Writer[T]) Cache() *controller.Writes[T] { return w.cache }

// Patch writes the change from old to updated outside status. A change that patches nothing is
// not sent; old is returned.
func (w *Writer[T]) Patch(ctx context.Context, old, updated T) (T, error) {
	return w.patch(ctx, old, updated, WriteMetadata)
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
	result, err := w.client(old.GetNamespace()).Patch(ctx, old.GetName(), types.MergePatchType, data,
		metav1.PatchOptions{FieldManager: w.opts.FieldManager}, subresource...)
	return w.written(what, result, err, old, "patch "+what+" of "+old.GetName())
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
