// Package controllertest lets tests wait on the "key processed" signal of pkg/controller's
// queues: a test subscribes to a key before the change it makes, then waits until the
// component has looked at the key (and, where it checks that nothing happened, asserts then).
package controllertest

import (
	"sync"
	"testing"
	"time"

	"github.com/shutter-csi/shutter/pkg/controller"
)

// Timeout bounds every wait of a Watch.
const Timeout = 30 * time.Second

// Signals passes the processed signals of queues to the tests that subscribed to their keys.
// Hand Hook to controller.Options.Processed or controller.WithProcessed.
type Signals struct {
	mu   sync.Mutex
	subs map[*Watch]struct{}
}

// NewSignals returns Signals with no subscriber.
func NewSignals() *Signals { return &Signals{subs: map[*Watch]struct{}{}} }

// Hook delivers one processed key to its subscribers. A subscriber that has not taken the last
// result yet gets the newer one in its place: the latest sync is what tests ask about.
func (s *Signals) Hook(r controller.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.subs {
		if w.queue != r.Queue || w.key != r.Key {
			continue
		}
		select {
		case <-w.ch:
		default:
		}
		w.ch <- r
	}
}

// Watch is a subscription to the syncs of one key in one queue.
type Watch struct {
	queue string
	key   any
	ch    chan controller.Result
}

// After subscribes to the syncs of key in queue from now on, until t ends; call it before the
// change the syncs react to.
func (s *Signals) After(t testing.TB, queue string, key any) *Watch {
	w := &Watch{queue: queue, key: key, ch: make(chan controller.Result, 1)}
	s.mu.Lock()
	s.subs[w] = struct{}{}
	s.mu.Unlock()
	t.Cleanup(func() {
		s.mu.Lock()
		delete(s.subs, w)
		s.mu.Unlock()
	})
	return w
}

// Next waits for the next sync of the key and returns its result.
func (w *Watch) Next(t testing.TB) controller.Result {
	t.Helper()
	select {
	case r := <-w.ch:
		return r
	case <-time.After(Timeout):
		t.Fatalf("no sync of %s %v within %s", w.queue, w.key, Timeout)
		return controller.Result{}
	}
}

// Until waits for a sync of the key after which done holds: the component has looked, and
// what done reads (the API, a fake) shows what that sync did.
func (w *Watch) Until(t testing.TB, what string, done func(controller.Result) bool) controller.Result {
	t.Helper()
	deadline := time.After(Timeout)
	for {
		select {
		case r := <-w.ch:
			if done(r) {
				return r
			}
		case <-deadline:
			t.Fatalf("no sync of %s %v after which %s", w.queue, w.key, what)
			return controller.Result{}
		}
	}
}
