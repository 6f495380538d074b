package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/watch"
)

// history records every version of one object that a watch delivers. A check that something
// did not happen too early becomes a check of order, made once both things have happened: the
// first version that shows the one change must come after the first that shows the other.
type history struct {
	mu       sync.Mutex
	versions []version
	// changed gets a signal after each version is recorded.
	changed chan struct{}
}

type version struct {
	obj     metav1.Object
	deleted bool
}

// watchHistory records the versions of the object called name that a watch started with start
// delivers, until the test ends.
func watchHistory(t *testing.T, start func(context.Context, metav1.ListOptions) (watch.Interface, error), name string) *history {
	t.Helper()
	w, err := start(context.Background(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	h := &history{changed: make(chan struct{}, 1)}
	go func() {
		for e := range w.ResultChan() {
			obj, err := meta.Accessor(e.Object)
			if err != nil || (e.Type != watch.Added && e.Type != watch.Modified && e.Type != watch.Deleted) {
				continue
			}
			h.mu.Lock()
			h.versions = append(h.versions, version{obj: obj, deleted: e.Type == watch.Deleted})
			h.mu.Unlock()
			select {
			case h.changed <- struct{}{}:
			default:
			}
		}
	}()
	return h
}

// first waits for the first version for which cond holds and returns its resourceVersion.
func (h *history) first(t *testing.T, what string, cond func(obj metav1.Object, deleted bool) bool) string {
	t.Helper()
	deadline := time.After(readyTimeout)
	for {
		if rv, ok := h.find(cond); ok {
			return rv
		}
		select {
		case <-h.changed:
		case <-deadline:
			t.Fatalf("no version in which %s", what)
			return ""
		}
	}
}

// find returns the resourceVersion of the first recorded version for which cond holds.
func (h *history) find(cond func(obj metav1.Object, deleted bool) bool) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, v := range h.versions {
		if cond(v.obj, v.deleted) {
			return v.obj.GetResourceVersion(), true
		}
	}
	return "", false
}

// deleting holds once the object is being deleted or gone.
func deleting(obj metav1.Object, deleted bool) bool {
	return deleted || obj.GetDeletionTimestamp() != nil
}

// released holds once the object has lost finalizer or is gone.
func released(finalizer string) func(metav1.Object, bool) bool {
	return func(obj metav1.Object, deleted bool) bool {
		return deleted || !hasFinalizer(obj.GetFinalizers(), finalizer)
	}
}

// checkAfter fails unless the change at resourceVersion later came after the one at earlier.
func checkAfter(t *testing.T, laterWhat, later, earlierWhat, earlier string) {
	t.Helper()
	cmp, err := resourceversion.CompareResourceVersion(later, earlier)
	if err != nil {
		t.Fatal(err)
	}
	if cmp <= 0 {
		t.Errorf("%s (resourceVersion %s) came before %s (%s)", laterWhat, later, earlierWhat, earlier)
	}
}
