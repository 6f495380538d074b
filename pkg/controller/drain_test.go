package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shutter-csi/shutter/test/testenv"
)

// TestRunFinishesSyncUnderWay cancels Run's context while a sync is under way: the sync keeps a
// live context and finishes, the key waiting behind it is not taken, and Run returns then.
func TestRunFinishesSyncUnderWay(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var syncErr, finished atomic.Bool
	var synced []string
	q := NewQueue[string]("drain", Options{DrainTimeout: time.Minute}, func(ctx context.Context, key string) error {
		synced = append(synced, key)
		if key == "first" {
			close(started)
			<-release
			syncErr.Store(ctx.Err() == nil)
			finished.Store(true)
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	q.Add("first")
	returned := make(chan struct{})
	var finishedAtReturn bool
	go func() {
		q.Run(ctx, 1)
		finishedAtReturn = finished.Load()
		close(returned)
	}()
	<-started
	q.Add("second")
	cancel()
	// Run has seen the cancellation once it shut its queue down; from there it waits for the sync.
	testenv.WaitUntil(t, "Run begins its shutdown", 10*time.Second, func(context.Context) bool { return q.queue.ShuttingDown() })
	close(release)
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the sync finished")
	}
	if !finishedAtReturn {
		t.Error("Run returned while a sync was under way")
	}
	if !syncErr.Load() {
		t.Error("the sync under way saw its context cancelled at shutdown")
	}
	if len(synced) != 1 {
		t.Errorf("synced %v after shutdown began, want only [first]", synced)
	}
}

// TestRunDrainIsBounded: a sync that does not finish on its own is cancelled after the drain
// timeout, and Run returns.
func TestRunDrainIsBounded(t *testing.T) {
	started := make(chan struct{})
	var cause atomic.Value
	q := NewQueue[string]("drain-bounded", Options{DrainTimeout: 200 * time.Millisecond}, func(ctx context.Context, key string) error {
		close(started)
		<-ctx.Done()
		cause.Store(ctx.Err())
		return ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	q.Add("stuck")
	returned := make(chan struct{})
	go func() { q.Run(ctx, 1); close(returned) }()
	<-started
	begin := time.Now()
	cancel()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the drain timeout")
	}
	if took := time.Since(begin); took < 200*time.Millisecond {
		t.Errorf("Run returned after %s, before the drain timeout", took)
	}
	if err, _ := cause.Load().(error); !errors.Is(err, context.Canceled) {
		t.Errorf("stuck sync ended with %v, want context.Canceled", err)
	}
}
