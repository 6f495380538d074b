// Package controller is the one queue-and-worker skeleton that every Shutter reconciler plugs
// into: the snapshot-controller's four queues and the sidecar's two.
//
// A reconciler is a function from a key to an error. What happens next is decided here, in one
// place:
//
//   - nil: the key is forgotten (its backoff resets);
//   - RequeueAfter(d): forgotten, and looked at again after d (waiting for something else);
//   - Final(err): forgotten and not retried; the reconciler has already reported it (a Warning
//     event and status.error), and a change to the object brings the key back;
//   - a conflict: retried with backoff, logged quietly (someone else wrote first);
//   - anything else: retried with per-key exponential backoff.
//
// A sync that panics is recovered, logged with its stack, counted in
// shutter_reconcile_panics_total and retried as an error. Each sync runs with a deadline
// (Options.SyncTimeout), so one call that hangs cannot hold a worker forever.
//
// The workqueue never hands one key to two workers at once.
package controller

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/metrics"
)

// SyncFunc reconciles the object behind one key.
type SyncFunc[K comparable] func(ctx context.Context, key K) error

// Options tune a queue's retries.
type Options struct {
	// RetryStart and RetryMax bound the per-key exponential backoff.
	RetryStart, RetryMax time.Duration
	// QPS and Burst bound retries across all keys together; zero means 10 and 100.
	QPS   float64
	Burst int
	// Processed, when set, is called after each sync, once its outcome is routed: the "key
	// processed" signal tests wait on before they check that a component looked at an object
	// (and what it did or did not do). WithProcessed reaches the queues inside a component.
	Processed func(Result)
	// DrainTimeout bounds how long the syncs under way when Run's context ends may go on;
	// zero means DefaultDrainTimeout.
	DrainTimeout time.Duration
	// SyncTimeout is the deadline of each sync's context: a sync still running then sees its
	// context end, and its error is retried like any other. Zero means no deadline.
	SyncTimeout time.Duration
}

// DefaultSyncTimeout is the components' default --sync-timeout: far longer than any sync
// should take (a few API calls, or one CSI call and a status write), so that it only ends one
// that hangs.
const DefaultSyncTimeout = 10 * time.Minute

// DefaultDrainTimeout is how long syncs under way at shutdown may take to finish: a CSI call
// and a status write, with room for a loaded API server.
const DefaultDrainTimeout = 15 * time.Second

// Queue is a named, rate-limited work queue of keys with the routing of sync outcomes.
type Queue[K comparable] struct {
	name      string
	queue     workqueue.TypedRateLimitingInterface[K]
	sync      SyncFunc[K]
	processed func(Result)
	drain     time.Duration
	timeout   time.Duration
	outcomes  map[Outcome]prometheus.Counter
	panics    prometheus.Counter

	// paceMu guards nextPaced, the time at which the next paced key is due.
	paceMu    sync.Mutex
	nextPaced time.Time
}

// paceInterval spaces the keys of AddPaced: 10,000 objects listed at start are queued over a
// second, slower than the workers take them, so the queue stays short.
const paceInterval = 100 * time.Microsecond

// NewQueue makes a queue whose workers call sync. Its name shows in workqueue metrics and logs.
func NewQueue[K comparable](name string, opts Options, sync SyncFunc[K]) *Queue[K] {
	return newQueue(name, opts, sync, workqueue.DefaultQueue[K]())
}

// NewUrgentFirstQueue is NewQueue whose workers take the waiting keys for which urgent holds
// before the others. urgent runs under the queue's lock: it must be quick and must not touch
// the queue.
func NewUrgentFirstQueue[K comparable](name string, opts Options, sync SyncFunc[K], urgent func(K) bool) *Queue[K] {
	return newQueue(name, opts, sync, newTwoClassFIFO(urgent))
}

func newQueue[K comparable](name string, opts Options, sync SyncFunc[K], store workqueue.Queue[K]) *Queue[K] {
	if opts.RetryStart <= 0 {
		opts.RetryStart = time.Second
	}
	if opts.RetryMax < opts.RetryStart {
		opts.RetryMax = 5 * time.Minute
	}
	if opts.QPS <= 0 {
		opts.QPS, opts.Burst = 10, 100
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	limiter := workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[K](opts.RetryStart, opts.RetryMax),
		&workqueue.TypedBucketRateLimiter[K]{Limiter: rate.NewLimiter(rate.Limit(opts.QPS), opts.Burst)},
	)
	return &Queue[K]{
		name:      name,
		sync:      sync,
		processed: opts.Processed,
		drain:     opts.DrainTimeout,
		timeout:   opts.SyncTimeout,
		outcomes:  outcomeCounters(name),
		panics:    metrics.ReconcilePanics.WithLabelValues(name),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[K]{
			Name: name,
			DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[K]{
				Name:  name,
				Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[K]{Name: name, Queue: store}),
			}),
		}),
	}
}

// Name is the queue's name.
func (q *Queue[K]) Name() string { return q.name }

// Add queues key now.
func (q *Queue[K]) Add(key K) { q.queue.Add(key) }

// AddPaced queues a key of a bulk of routine work (an informer's first list) at most one per
// paceInterval. Keys added with Add meanwhile, the changes happening now, are then taken after
// a few paced keys instead of after the whole bulk: a snapshot created right after a restart
// with thousands of objects is not kept waiting while all of them are looked at again.
func (q *Queue[K]) AddPaced(key K) {
	q.paceMu.Lock()
	now := time.Now()
	at := q.nextPaced
	if at.Before(now) {
		at = now
	}
	q.nextPaced = at.Add(paceInterval)
	q.paceMu.Unlock()
	q.queue.AddAfter(key, at.Sub(now))
}

// AddAfter queues key after d.
func (q *Queue[K]) AddAfter(key K, d time.Duration) { q.queue.AddAfter(key, d) }

// Len is the number of keys waiting.
func (q *Queue[K]) Len() int { return q.queue.Len() }

// ShutDown stops handing out keys once the waiting ones are taken; in-flight syncs finish.
func (q *Queue[K]) ShutDown() { q.queue.ShutDownWithDrain() }

// Run starts workers and blocks until ctx is done, then lets the syncs under way finish (for
// at most the drain timeout) and returns. No key is taken once ctx is done. The syncs run with
// a context of their own, cancelled only after the drain timeout, so that a shutdown does not
// cut a CSI call or a status write in half: the next process would have to find out what the
// backend did.
func (q *Queue[K]) Run(ctx context.Context, workers int) {
	logger := klog.FromContext(ctx).WithValues("queue", q.name)
	logger.V(2).Info("Starting workers", "count", workers)
	work, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	defer cancel()
	if hook := processedFrom(ctx); hook != nil {
		q.processed = chain(q.processed, hook)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for q.next(ctx, work) {
			}
		})
	}
	<-ctx.Done()
	timer := time.AfterFunc(q.drain, cancel)
	defer timer.Stop()
	q.queue.ShutDown()
	wg.Wait()
	logger.V(2).Info("Workers stopped")
}

// next processes one key with ctx; it returns false once the queue is shut down or stop is
// done.
func (q *Queue[K]) next(stop, ctx context.Context) bool {
	key, quit := q.queue.Get()
	if quit {
		return false
	}
	defer q.queue.Done(key)
	if stop.Err() != nil {
		return false
	}
	err := q.safeSync(ctx, key)
	outcome := q.route(ctx, key, err)
	q.outcomes[outcome].Inc()
	if q.processed != nil {
		q.processed(Result{Queue: q.name, Key: key, Outcome: outcome, Err: err})
	}
	return true
}

// errSyncTimeout is the cause of a sync's context that reached the queue's SyncTimeout.
var errSyncTimeout = errors.New("sync deadline reached")

// safeSync runs the sync of key with the queue's deadline, and turns a panic into an error
// after logging it with its stack and counting it.
func (q *Queue[K]) safeSync(ctx context.Context, key K) (err error) {
	if q.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, q.timeout, errSyncTimeout)
		defer cancel()
	}
	defer func() {
		if r := recover(); r != nil {
			q.panics.Inc()
			klog.FromContext(ctx).Error(nil, "Sync panicked", "key", key, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("sync panicked: %v", r)
		}
	}()
	err = q.sync(ctx, key)
	if err != nil && context.Cause(ctx) == errSyncTimeout {
		err = fmt.Errorf("sync did not finish within %s: %w", q.timeout, err)
	}
	return err
}

// route decides, in one place, what a sync's outcome means for its key, and returns it.
func (q *Queue[K]) route(ctx context.Context, key K, err error) Outcome {
	logger := klog.FromContext(ctx)
	outcome := OutcomeOf(err)
	switch outcome {
	case OutcomeSuccess:
		q.queue.Forget(key)
	case OutcomeRequeueAfter:
		wait, _ := AsRequeue(err)
		q.queue.Forget(key)
		q.queue.AddAfter(key, wait.After)
		logger.V(4).Info("Waiting", "key", key, "after", wait.After, "reason", wait.Reason)
	case OutcomeFinal:
		q.queue.Forget(key)
		logger.V(2).Info("Not retrying", "key", key, "err", err)
	case OutcomeRequeue:
		q.queue.AddRateLimited(key)
		logger.V(4).Info("Conflict, retrying", "key", key)
	default:
		q.queue.AddRateLimited(key)
		logger.Error(err, "Sync failed, retrying", "key", key, "retries", q.queue.NumRequeues(key))
	}
	return outcome
}
