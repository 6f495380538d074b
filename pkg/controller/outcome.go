package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/shutter-csi/shutter/pkg/metrics"
)

// Outcome is what the queue made of a sync's error: the label of the reconcile metric and what
// the processed signal reports.
type Outcome string

// The outcomes of a sync, as route treats them.
const (
	// OutcomeSuccess: nil; the key is forgotten.
	OutcomeSuccess Outcome = metrics.ReconcileSuccess
	// OutcomeRequeue: a conflict; retried with backoff, quietly.
	OutcomeRequeue Outcome = metrics.ReconcileRequeue
	// OutcomeRequeueAfter: RequeueAfter; looked at again after a while, not a failure.
	OutcomeRequeueAfter Outcome = metrics.ReconcileRequeueAfter
	// OutcomeError: any other error; retried with backoff.
	OutcomeError Outcome = metrics.ReconcileError
	// OutcomeFinal: Final; not retried until the object changes.
	OutcomeFinal Outcome = metrics.ReconcileFinal
)

var outcomes = []Outcome{OutcomeSuccess, OutcomeRequeue, OutcomeRequeueAfter, OutcomeError, OutcomeFinal}

// OutcomeOf tells how the queue routes err.
func OutcomeOf(err error) Outcome {
	var wait *Requeue
	switch {
	case err == nil:
		return OutcomeSuccess
	case errors.As(err, &wait):
		return OutcomeRequeueAfter
	case IsFinal(err):
		return OutcomeFinal
	case apierrors.IsConflict(err):
		return OutcomeRequeue
	default:
		return OutcomeError
	}
}

// Result is one processed key: the queue's name, the key, the sync's error and its outcome.
type Result struct {
	Queue   string
	Key     any
	Outcome Outcome
	Err     error
}

// Requeue is the error of RequeueAfter: look at the key again after After, for Reason. Tests
// read it with AsRequeue instead of matching error text.
type Requeue struct {
	After  time.Duration
	Reason string
}

func (e *Requeue) Error() string { return fmt.Sprintf("requeue after %s: %s", e.After, e.Reason) }

// RequeueAfter asks for the key to be looked at again after d, without counting a failure.
func RequeueAfter(d time.Duration, reason string) error {
	return &Requeue{After: d, Reason: reason}
}

// AsRequeue returns the Requeue in err's chain, if err asks for one.
func AsRequeue(err error) (*Requeue, bool) {
	var wait *Requeue
	if errors.As(err, &wait) {
		return wait, true
	}
	return nil, false
}

type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }
func (e *finalError) Unwrap() error { return e.err }

// Final marks err as not worth retrying until the object changes: bad user input that has been
// reported in status and an event.
func Final(err error) error {
	if err == nil {
		return nil
	}
	return &finalError{err: err}
}

// IsFinal tells whether err was marked with Final.
func IsFinal(err error) bool {
	var f *finalError
	return errors.As(err, &f)
}

type processedKey struct{}

// WithProcessed returns a context with which every queue's Run also calls hook after each
// sync, next to its Options.Processed: a test reaches the queues inside a component it runs
// with that context without the component passing a test option through.
func WithProcessed(ctx context.Context, hook func(Result)) context.Context {
	return context.WithValue(ctx, processedKey{}, chain(processedFrom(ctx), hook))
}

func processedFrom(ctx context.Context) func(Result) {
	hook, _ := ctx.Value(processedKey{}).(func(Result))
	return hook
}

// chain calls a, then b; either may be nil.
func chain(a, b func(Result)) func(Result) {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return func(r Result) { a(r); b(r) }
}

// outcomeCounters are the queue's children of metrics.Reconciles, one per outcome.
func outcomeCounters(queue string) map[Outcome]prometheus.Counter {
	out := make(map[Outcome]prometheus.Counter, len(outcomes))
	for _, o := range outcomes {
		out[o] = metrics.Reconciles.WithLabelValues(queue, string(o))
	}
	return out
}
