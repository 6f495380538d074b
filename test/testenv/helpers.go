package testenv

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// WaitFor reads an object with get every 50ms until ok holds for it, and returns it. An object
// that is not found is passed to ok as the zero T (nil for a pointer); other errors of get are
// read again. The test fails, naming what and the last object read, when ok does not hold
// within timeout.
func WaitFor[T any](t testing.TB, what string, timeout time.Duration, get func(context.Context) (T, error), ok func(T) bool) T {
	t.Helper()
	var last T
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		obj, err := get(ctx)
		if apierrors.IsNotFound(err) {
			var gone T
			obj = gone
		} else if err != nil {
			return false, nil
		}
		last = obj
		return ok(obj), nil
	})
	if err != nil {
		t.Fatalf("%s: %v; last %+v", what, err, last)
	}
	return last
}

// WaitUntil calls done every 50ms until it holds. The test fails, naming what, when it does not
// within timeout.
func WaitUntil(t testing.TB, what string, timeout time.Duration, done func(context.Context) bool) {
	t.Helper()
	WaitFor(t, what, timeout, func(ctx context.Context) (bool, error) { return done(ctx), nil }, func(ok bool) bool { return ok })
}

// WaitGone waits until get answers NotFound. The test fails, naming what, when it does not
// within timeout.
func WaitGone(t testing.TB, what string, timeout time.Duration, get func(context.Context) error) {
	t.Helper()
	WaitUntil(t, what+" gone", timeout, func(ctx context.Context) bool { return apierrors.IsNotFound(get(ctx)) })
}

// Go runs run in the background with a context derived from ctx, until the test ends or stop is
// called: stop cancels the context, waits for run to return and fails the test if run returned
// an error, naming what. stop may be called more than once.
func Go(t testing.TB, ctx context.Context, what string, run func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	})
	t.Cleanup(stop)
	return stop
}

// WaitGoroutines waits until no more goroutines run than base (a count taken before the calls
// under test). The test fails with every goroutine's stack when some are still running after
// timeout.
func WaitGoroutines(t testing.TB, base int, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return runtime.NumGoroutine() <= base, nil
	})
	if err != nil {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines, %d before the calls:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
	}
}
