package controller

import (
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// Writes is an own-write cache: the objects this component wrote last, by key, until its informer
// has caught up with them. A sync that reads through Latest never acts on a lister copy older than
// its own last write, and Handler drops the informer events those writes cause. Objects in it are
// never changed; the informer's store is never written.
type Writes[T metav1.Object] struct {
	mu      sync.Mutex
	objects map[Key]T
	// trim, when set, cuts a recorded object down as the informer's transform cuts its copies.
	trim func(T) T
}

// NewWrites makes an empty own-write cache.
func NewWrites[T metav1.Object]() *Writes[T] {
	return &Writes[T]{objects: map[Key]T{}}
}

// WithTrim makes the cache keep each recorded object as trim returns it, so that remembered
// writes cost no more memory than the informer's copies. It returns w.
func (w *Writes[T]) WithTrim(trim func(T) T) *Writes[T] {
	w.trim = trim
	return w
}

// Record remembers obj, as returned by the API server after this component's write.
func (w *Writes[T]) Record(obj T) {
	if w.trim != nil {
		obj = w.trim(obj)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.objects[KeyOf(obj)] = obj
}

// Observe is called with each object the informer delivers. It tells whether obj is exactly
// this component's last write of it, and drops the remembered write once the informer has
// caught up with it (the lister now serves the same or a newer object), so that the cache holds
// only writes in flight instead of every object ever written.
func (w *Writes[T]) Observe(obj T) (caused bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := KeyOf(obj)
	own, ok := w.objects[key]
	if !ok || own.GetUID() != obj.GetUID() {
		return false
	}
	caused = own.GetResourceVersion() == obj.GetResourceVersion()
	if !newer(own, obj) && !released(own, obj) {
		delete(w.objects, key)
	}
	return caused
}

// Forget drops what is remembered of obj's key (the object is gone).
func (w *Writes[T]) Forget(obj T) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.objects, KeyOf(obj))
}

// Latest returns the newer of the lister's copy and this component's last write of the same
// object. Once the lister has caught up, the remembered write is dropped.
func (w *Writes[T]) Latest(listed T) T {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := KeyOf(listed)
	own, ok := w.objects[key]
	if !ok {
		return listed
	}
	if own.GetUID() == listed.GetUID() && (newer(own, listed) || released(own, listed)) {
		return own
	}
	delete(w.objects, key)
	return listed
}

// released tells whether own is the last write of an object: its final finalizer removed while it
// was being deleted. The API server answers that write with the object's last resourceVersion,
// so the lister's copy looks just as new until the deletion arrives; own is the truth until then
// (Handler forgets it on the deletion).
func released(own, listed metav1.Object) bool {
	return own.GetDeletionTimestamp() != nil && len(own.GetFinalizers()) == 0 &&
		own.GetResourceVersion() == listed.GetResourceVersion()
}

// Get returns this component's last write of key while the informer has not caught up with it:
// an object it created that the lister does not show yet.
func (w *Writes[T]) Get(key Key) (T, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	obj, ok := w.objects[key]
	return obj, ok
}

// Lookup returns the newest copy of the object at key: the one get reads from the informer's
// lister, made current by this component's own writes (Latest), or, where the lister does not
// hold it, the object this component created that the informer has not delivered yet (Get).
// found is false when neither has it; a lister error other than NotFound is returned.
func (w *Writes[T]) Lookup(key Key, get func(Key) (T, error)) (obj T, found bool, err error) {
	listed, err := get(key)
	switch {
	case err == nil:
		return w.Latest(listed), true, nil
	case apierrors.IsNotFound(err):
		obj, found = w.Get(key)
		return obj, found, nil
	default:
		return obj, false, err
	}
}

// newer tells whether a's resourceVersion is later than b's. Versions that cannot be compared
// count as not newer, so the lister's copy wins.
func newer(a, b metav1.Object) bool {
	cmp, err := resourceversion.CompareResourceVersion(a.GetResourceVersion(), b.GetResourceVersion())
	return err == nil && cmp > 0
}

// lastApplied is the annotation in which kubectl apply keeps a copy of the whole object.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// TrimMeta drops what no reconciler reads from an object's metadata, its managedFields and
// kubectl's last-applied copy, which are most of a small object's memory. It is an informer
// transform (cache.TransformFunc) and, through Trimmed, a trim for Writes.
func TrimMeta(obj any) (any, error) {
	if accessor, ok := obj.(metav1.ObjectMetaAccessor); ok {
		m := accessor.GetObjectMeta()
		m.SetManagedFields(nil)
		if a := m.GetAnnotations(); a[lastApplied] != "" {
			delete(a, lastApplied)
			m.SetAnnotations(a)
		}
	}
	return obj, nil
}

// Trimmed adapts an informer transform to Writes.WithTrim.
func Trimmed[T any](transform func(any) (any, error)) func(T) T {
	return func(obj T) T {
		out, err := transform(obj)
		if err != nil {
			return obj
		}
		return out.(T)
	}
}
