package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/shutter-csi/shutter/pkg/metrics"
)

func TestRouteOutcomes(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		want        Outcome
		wantRetries int  // the key's failure count afterwards
		wantQueued  bool // the key comes back by itself
	}{
		{name: "success forgets", err: nil, want: OutcomeSuccess},
		{name: "requeue after waits without a failure", err: RequeueAfter(10*time.Millisecond, "waiting"), want: OutcomeRequeueAfter, wantQueued: true},
		{name: "final is not retried", err: Final(errors.New("bad input")), want: OutcomeFinal},
		{name: "wrapped final is not retried", err: errors.Join(Final(errors.New("bad input"))), want: OutcomeFinal},
		{name: "conflict is retried", err: apierrors.NewConflict(schema.GroupResource{}, "x", errors.New("stale")), want: OutcomeRequeue, wantRetries: 1, wantQueued: true},
		{name: "other errors are retried", err: errors.New("boom"), want: OutcomeError, wantRetries: 1, wantQueued: true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("route-%d", i)
			var got Result
			q := NewQueue[string](name, Options{RetryStart: time.Millisecond, RetryMax: time.Millisecond,
				Processed: func(r Result) { got = r }},
				func(context.Context, string) error { return tc.err })
			defer q.ShutDown()
			counted := metrics.Reconciles.WithLabelValues(name, string(tc.want))
			before := testutil.ToFloat64(counted)
			q.Add("k")
			q.next(context.Background(), context.Background())
			if got.Outcome != tc.want || got.Queue != name || got.Key != "k" || got.Err != tc.err {
				t.Errorf("processed %+v, want outcome %s", got, tc.want)
			}
			if n := testutil.ToFloat64(counted) - before; n != 1 {
				t.Errorf("%s_%s{name=%q,result=%q} rose by %v, want 1", metrics.Namespace, metrics.ReconcileTotal, name, tc.want, n)
			}
			if got := q.queue.NumRequeues("k"); got != tc.wantRetries {
				t.Errorf("retries = %d, want %d", got, tc.wantRetries)
			}
			// A key due later than any requeue of k: if k is to come back, it comes first.
			q.AddAfter("later", 50*time.Millisecond)
			first, _ := q.queue.Get()
			q.queue.Done(first)
			if queued := first == "k"; queued != tc.wantQueued {
				t.Errorf("queued again = %v, want %v", queued, tc.wantQueued)
			}
		})
	}
}

func TestRequeueIsReadable(t *testing.T) {
	err := fmt.Errorf("sync: %w", RequeueAfter(250*time.Millisecond, "busy"))
	wait, ok := AsRequeue(err)
	if !ok || wait.After != 250*time.Millisecond || wait.Reason != "busy" {
		t.Errorf("AsRequeue = %+v, %v", wait, ok)
	}
	if OutcomeOf(err) != OutcomeRequeueAfter {
		t.Errorf("outcome %s", OutcomeOf(err))
	}
	for _, err := range []error{nil, errors.New("requeue after 1s: text alone is no requeue"), Final(errors.New("x"))} {
		if wait, ok := AsRequeue(err); ok {
			t.Errorf("AsRequeue(%v) = %+v", err, wait)
		}
	}
}

// TestPanicIsCountedLoggedAndRetried: a panicking sync costs the worker nothing; it is logged
// with the stack of the panic, counted in shutter_reconcile_panics_total{name} and retried as an
// error.
func TestPanicIsCountedLoggedAndRetried(t *testing.T) {
	var got Result
	q := NewQueue[string]("panic", Options{RetryStart: time.Millisecond, RetryMax: time.Millisecond,
		Processed: func(r Result) { got = r }},
		func(context.Context, string) error { panic("bug") })
	defer q.ShutDown()
	panics := metrics.ReconcilePanics.WithLabelValues("panic")
	before := testutil.ToFloat64(panics)
	var logs bytes.Buffer
	ctx := klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs))))
	q.Add("k")
	q.next(ctx, ctx)
	if q.queue.NumRequeues("k") != 1 {
		t.Error("a panicking sync was not retried")
	}
	if got.Outcome != OutcomeError || got.Err == nil || got.Err.Error() != "sync panicked: bug" {
		t.Errorf("processed %+v, want an error, sync panicked: bug", got)
	}
	if n := testutil.ToFloat64(panics) - before; n != 1 {
		t.Errorf("shutter_reconcile_panics_total{name=\"panic\"} rose by %v, want 1", n)
	}
	// The stack names the function that panicked.
	for _, want := range []string{`"Sync panicked"`, `key="k"`, `panic="bug"`, "pkg/controller.TestPanicIsCountedLoggedAndRetried.func"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
}

// TestSyncDeadline: every sync's context ends after SyncTimeout; a sync stuck until then fails
// as an error that says so, and the worker takes the next key. Without SyncTimeout a sync's
// context has no deadline.
func TestSyncDeadline(t *testing.T) {
	results := make(chan Result, 10)
	q := NewQueue[string]("deadline", Options{RetryStart: time.Hour, RetryMax: time.Hour, SyncTimeout: 50 * time.Millisecond,
		Processed: func(r Result) { results <- r }},
		func(ctx context.Context, key string) error {
			if key == "stuck" {
				<-ctx.Done() // a call that honours its context and hangs until it ends
				return fmt.Errorf("call: %w", ctx.Err())
			}
			return nil
		})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); q.Run(ctx, 1) }()
	defer func() { cancel(); <-done }()
	q.Add("stuck")
	q.Add("next")
	stuck, next := <-results, <-results
	if stuck.Key != "stuck" || stuck.Outcome != OutcomeError || !errors.Is(stuck.Err, context.DeadlineExceeded) ||
		stuck.Err.Error() != "sync did not finish within 50ms: call: context deadline exceeded" {
		t.Errorf("stuck sync: %+v, want an error: the deadline", stuck)
	}
	if next.Key != "next" || next.Outcome != OutcomeSuccess {
		t.Errorf("after the stuck sync the worker processed %+v, want next, success", next)
	}

	for _, tc := range []struct {
		timeout      time.Duration
		wantDeadline bool
	}{{timeout: 0}, {timeout: time.Hour, wantDeadline: true}} {
		var deadline time.Time
		var has bool
		q := NewQueue[string]("deadline-set", Options{SyncTimeout: tc.timeout}, func(ctx context.Context, _ string) error {
			deadline, has = ctx.Deadline()
			return nil
		})
		q.Add("k")
		start := time.Now()
		q.next(context.Background(), context.Background())
		q.ShutDown()
		if has != tc.wantDeadline || has && (deadline.Before(start.Add(tc.timeout)) || deadline.After(time.Now().Add(tc.timeout))) {
			t.Errorf("SyncTimeout %s: sync's deadline %v (set %v)", tc.timeout, deadline, has)
		}
	}
}

func obj(name, uid, rv string) *metav1.ObjectMeta {
	return &metav1.ObjectMeta{Name: name, UID: types.UID("u" + uid), ResourceVersion: rv}
}

func TestWrites(t *testing.T) {
	w := NewWrites[*metav1.ObjectMeta]()
	listed := obj("a", "1", "5")
	if got := w.Latest(listed); got != listed {
		t.Fatal("with nothing recorded, the lister's copy wins")
	}
	own := obj("a", "1", "7")
	w.Record(own)
	if got := w.Latest(listed); got != own {
		t.Error("a newer own write must win over a stale lister copy")
	}
	if got, ok := w.Get(Key{Name: "a"}); !ok || got != own {
		t.Error("Get must return the recorded write")
	}
	caughtUp := obj("a", "1", "9")
	if got := w.Latest(caughtUp); got != caughtUp {
		t.Error("once the lister is newer, its copy wins")
	}
	if _, ok := w.Get(Key{Name: "a"}); ok {
		t.Error("the write must be dropped once the lister caught up")
	}
	w.Record(obj("b", "1", "7"))
	if got := w.Latest(obj("b", "2", "3")); got.UID != "u2" {
		t.Error("a recreated object (new uid) must not be shadowed by the old one's write")
	}
}

// TestWritesLookup: the lister's copy made current by an own write, an own create the lister does
// not show yet, nothing, and a lister failure.
func TestWritesLookup(t *testing.T) {
	w := NewWrites[*metav1.ObjectMeta]()
	listed := map[string]*metav1.ObjectMeta{"stale": obj("stale", "1", "5"), "current": obj("current", "1", "5")}
	get := func(key Key) (*metav1.ObjectMeta, error) {
		if key.Name == "broken" {
			return nil, errors.New("broken lister")
		}
		if o, ok := listed[key.Name]; ok {
			return o, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "things"}, key.Name)
	}
	w.Record(obj("stale", "1", "7"))
	w.Record(obj("created", "1", "1"))
	tests := []struct {
		name    string
		wantRV  string // "" for not found
		wantErr bool
	}{
		{name: "stale", wantRV: "7"},
		{name: "current", wantRV: "5"},
		{name: "created", wantRV: "1"},
		{name: "missing"},
		{name: "broken", wantErr: true},
	}
	for _, tc := range tests {
		got, found, err := w.Lookup(Key{Name: tc.name}, get)
		switch {
		case (err != nil) != tc.wantErr:
			t.Errorf("%s: error %v, want one: %v", tc.name, err, tc.wantErr)
		case found != (tc.wantRV != ""):
			t.Errorf("%s: found %v, want %v", tc.name, found, tc.wantRV != "")
		case found && got.ResourceVersion != tc.wantRV:
			t.Errorf("%s: resourceVersion %s, want %s", tc.name, got.ResourceVersion, tc.wantRV)
		}
	}
}

func TestWritesObserve(t *testing.T) {
	w := NewWrites[*metav1.ObjectMeta]().WithTrim(func(o *metav1.ObjectMeta) *metav1.ObjectMeta {
		o.ManagedFields = nil
		return o
	})
	own := obj("a", "1", "7")
	own.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
	w.Record(own)
	if got, _ := w.Get(Key{Name: "a"}); got.ManagedFields != nil {
		t.Error("a recorded write was not trimmed")
	}
	if w.Observe(obj("a", "1", "6")) {
		t.Error("an older event is not the own write")
	}
	if _, ok := w.Get(Key{Name: "a"}); !ok {
		t.Error("the own write was dropped before the informer caught up with it")
	}
	if w.Observe(obj("a", "2", "7")) {
		t.Error("an object with another uid is not the own write")
	}
	if !w.Observe(obj("a", "1", "7")) {
		t.Error("the event of the own write must be recognised")
	}
	if _, ok := w.Get(Key{Name: "a"}); ok {
		t.Error("the own write must be dropped once the informer delivered it")
	}
	w.Record(obj("b", "1", "7"))
	if w.Observe(obj("b", "1", "8")) {
		t.Error("a newer write by someone else is not the own write")
	}
	if _, ok := w.Get(Key{Name: "b"}); ok {
		t.Error("the own write must be dropped once the informer is past it")
	}
	now := metav1.Now()
	released := obj("c", "1", "5")
	released.DeletionTimestamp = &now
	w.Record(released)
	listed := obj("c", "1", "5")
	listed.DeletionTimestamp, listed.Finalizers = &now, []string{"f"}
	w.Observe(listed)
	if _, ok := w.Get(Key{Name: "c"}); !ok {
		t.Error("the release of the last finalizer must be kept until the deletion arrives")
	}
}

func TestWritesKeepsReleasedObject(t *testing.T) {
	w := NewWrites[*metav1.ObjectMeta]()
	now := metav1.Now()
	listed := obj("a", "1", "5")
	listed.DeletionTimestamp, listed.Finalizers = &now, []string{"f"}
	// The API server answers the removal of the last finalizer with the same resourceVersion.
	own := obj("a", "1", "5")
	own.DeletionTimestamp = &now
	w.Record(own)
	for range 2 {
		if got := w.Latest(listed); len(got.Finalizers) != 0 {
			t.Fatal("a stale copy with finalizers shadowed the released object")
		}
	}
	w.Forget(own)
	if got := w.Latest(listed); got != listed {
		t.Error("after the deletion, the lister's copy is what there is")
	}
}

func TestHandlerDropsNoOps(t *testing.T) {
	var added []string
	w := NewWrites[*metav1.ObjectMeta]()
	h := Handler(w, func(o *metav1.ObjectMeta) { added = append(added, o.Name+"@"+o.ResourceVersion) })
	h.OnAdd(obj("a", "1", "1"), false)
	h.OnUpdate(obj("a", "1", "1"), obj("a", "1", "1")) // resync
	w.Record(obj("a", "1", "2"))
	h.OnUpdate(obj("a", "1", "1"), obj("a", "1", "2")) // our own write
	h.OnUpdate(obj("a", "1", "2"), obj("a", "1", "3")) // someone else's
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "a", Obj: obj("a", "1", "4")})
	h.OnAdd("not an object", false)
	want := []string{"a@1", "a@3", "a@4"}
	if len(added) != len(want) {
		t.Fatalf("added %v, want %v", added, want)
	}
	for i := range want {
		if added[i] != want[i] {
			t.Fatalf("added %v, want %v", added, want)
		}
	}
}

func TestHandlerInitialList(t *testing.T) {
	var added, initial []string
	h := HandlerWithInitialList(nil,
		func(o *metav1.ObjectMeta) { added = append(added, o.Name) },
		func(o *metav1.ObjectMeta) { initial = append(initial, o.Name) })
	h.OnAdd(obj("listed", "1", "1"), true)
	h.OnAdd(obj("new", "2", "2"), false)
	if !slices.Equal(initial, []string{"listed"}) || !slices.Equal(added, []string{"new"}) {
		t.Errorf("initial %v, added %v", initial, added)
	}
}

func TestAddPacedLetsNewKeysThrough(t *testing.T) {
	q := NewQueue[string]("paced", Options{}, func(context.Context, string) error { return nil })
	defer q.ShutDown()
	start := time.Now()
	for i := range 5000 {
		q.AddPaced(fmt.Sprintf("listed-%d", i))
	}
	// The paced keys trickle in one per paceInterval: the new key comes after those due by now
	// (adding 5,000 keys takes a while itself), not after all 5,000.
	expectNewKeySoon(t, q, start)
}

// TestFirstListTakesUnfinishedFirst: of a first list of 5,000 settled objects and one that is
// not, listed last, the unsettled one is queued at once, after no more of the paced keys than are
// due by then; paced like the others, it would come last.
func TestFirstListTakesUnfinishedFirst(t *testing.T) {
	q := NewQueue[Key]("first", Options{}, func(context.Context, Key) error { return nil })
	defer q.ShutDown()
	first := FirstList(q, func(o *metav1.ObjectMeta) bool { return o.Name != "unfinished" },
		func(o *metav1.ObjectMeta) { q.Add(KeyOf(o)) })
	start := time.Now()
	for i := range 5000 {
		first(obj(fmt.Sprintf("listed-%d", i), "1", "1"))
	}
	first(obj("unfinished", "1", "1"))
	due := int(time.Since(start)/paceInterval) + 50
	for i := 0; ; i++ {
		key, _ := q.queue.Get()
		q.queue.Done(key)
		if key.Name == "unfinished" {
			if i > due {
				t.Errorf("the unfinished object came after %d settled ones, want at most %d", i, due)
			}
			return
		}
	}
}

// expectNewKeySoon adds the key "new" and checks that it comes out of q after no more of the
// paced keys (added since start) than are due by now.
func expectNewKeySoon(t *testing.T, q *Queue[string], start time.Time) {
	t.Helper()
	q.Add("new")
	due := int(time.Since(start)/paceInterval) + 50
	for i := 0; ; i++ {
		key, _ := q.queue.Get()
		q.queue.Done(key)
		if key == "new" {
			if i > due {
				t.Errorf("the new key came after %d paced keys, want at most %d", i, due)
			}
			return
		}
	}
}

// TestResyncIsPaced: a resync of many keys does not queue a change made meanwhile behind all of
// them.
func TestResyncIsPaced(t *testing.T) {
	q := NewQueue[string]("resync", Options{}, func(context.Context, string) error { return nil })
	defer q.ShutDown()
	keys := make([]string, 5000)
	for i := range keys {
		keys[i] = fmt.Sprintf("listed-%d", i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	// Resync lists at once and returns after that first round, its context being done.
	Resync(ctx, q, time.Hour, func() []string {
		cancel()
		return keys
	})
	expectNewKeySoon(t, q, start)
}

func TestProcessedSignal(t *testing.T) {
	boom := errors.New("boom")
	calls := make(chan Result, 1)
	q := NewQueue[string]("signal", Options{RetryStart: time.Hour, RetryMax: time.Hour,
		Processed: func(r Result) { calls <- r }},
		func(context.Context, string) error { return boom })
	defer q.ShutDown()
	q.Add("k")
	q.next(context.Background(), context.Background())
	if got := <-calls; got != (Result{Queue: "signal", Key: "k", Outcome: OutcomeError, Err: boom}) {
		t.Errorf("processed signal %+v", got)
	}
	if q.queue.NumRequeues("k") != 1 {
		t.Error("the outcome must be routed before the signal")
	}
}

// TestProcessedFromContext: Run calls the hooks of its context as well as Options.Processed.
func TestProcessedFromContext(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	hook := func(who string) func(Result) {
		return func(r Result) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, who+":"+r.Key.(string))
		}
	}
	done := make(chan struct{})
	q := NewQueue[string]("context", Options{Processed: hook("options")}, func(context.Context, string) error { return nil })
	ctx := WithProcessed(WithProcessed(context.Background(), hook("outer")), func(r Result) {
		hook("inner")(r)
		close(done)
	})
	ctx, cancel := context.WithCancel(ctx)
	returned := make(chan struct{})
	go func() { q.Run(ctx, 1); close(returned) }()
	q.Add("k")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the key was not processed")
	}
	cancel()
	<-returned
	if want := []string{"options:k", "outer:k", "inner:k"}; !slices.Equal(seen, want) {
		t.Errorf("hooks called %v, want %v", seen, want)
	}
}
