package controller

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// Handler turns informer events for objects of type T into calls of add, and drops no-ops: an
// update with an unchanged resourceVersion (an informer resync), an update that this component
// caused itself (written is its own-write cache; nil for none), and objects of other types.
// Deletions seen only as tombstones are unwrapped, so none is lost.
func Handler[T metav1.Object](written *Writes[T], add func(T)) cache.ResourceEventHandlerDetailedFuncs {
	return HandlerWithInitialList(written, add, add)
}

// HandlerWithInitialList is Handler with another function, initial, for the objects of the
// informer's first list. At start every object of every kind is queued by its own informer, so
// initial needs to queue only the object itself, not the objects that depend on it: after a
// restart with thousands of objects, that halves the backlog a new object waits behind.
func HandlerWithInitialList[T metav1.Object](written *Writes[T], add, initial func(T)) cache.ResourceEventHandlerDetailedFuncs {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if o, ok := obj.(T); ok {
				if written != nil {
					written.Observe(o)
				}
				if isInInitialList {
					initial(o)
					return
				}
				add(o)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(T)
			n, ok2 := newObj.(T)
			if !ok1 || !ok2 || o.GetResourceVersion() == n.GetResourceVersion() {
				return
			}
			if written != nil && written.Observe(n) {
				return
			}
			add(n)
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if o, ok := obj.(T); ok {
				if written != nil {
					written.Forget(o)
				}
				add(o)
			}
		},
	}
}

// FirstList returns what an informer's first list does with each object (HandlerWithInitialList's
// initial): the keys of settled objects, those likely to need nothing, are queued in q paced
// (AddPaced), and every other object goes to add at once. After a restart with tens of thousands
// of objects, the few that the restart interrupted or that were created meanwhile are taken
// first, and a change made later waits behind a few of the rest, not behind all of them.
func FirstList[T metav1.Object](q *Queue[Key], settled func(T) bool, add func(T)) func(T) {
	return func(obj T) {
		if settled(obj) {
			q.AddPaced(KeyOf(obj))
			return
		}
		add(obj)
	}
}

// Key is the queue key of an object: its namespace (empty for cluster-scoped kinds) and name.
type Key = cache.ObjectName

// KeyOf returns obj's queue key.
func KeyOf(obj metav1.Object) Key { return Key{Namespace: obj.GetNamespace(), Name: obj.GetName()} }

// Resync adds every key that list returns, once per period, until ctx is done: the safety net
// that catches anything a missed event would otherwise leave waiting. A period of 0 disables it.
// The keys are added paced (AddPaced), so that with tens of thousands of objects the changes
// happening meanwhile are not queued behind all of them.
func Resync[K comparable](ctx context.Context, q *Queue[K], period time.Duration, list func() []K) {
	if period <= 0 {
		return
	}
	wait.Until(func() {
		for _, key := range list() {
			q.AddPaced(key)
		}
	}, period, ctx.Done())
}
