//go:build linux

package quiesce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"
)

// fakeWorld is what fake targets stop and resume; it records every step.
type fakeWorld struct {
	mu      sync.Mutex
	stopped map[string]bool
	events  []string
	// changed is closed, and replaced, at every stop and resume.
	changed chan struct{}
	// stopErr fails the stop of a target; slow makes stopped() report
	// false that many times first.
	stopErr map[string]error
	slow    map[string]int
}

func newFakeWorld() *fakeWorld {
	return &fakeWorld{stopped: map[string]bool{}, stopErr: map[string]error{}, slow: map[string]int{}, changed: make(chan struct{})}
}

// record logs a step and signals it. Called with w.mu.
func (w *fakeWorld) record(event string) {
	w.events = append(w.events, event)
	close(w.changed)
	w.changed = make(chan struct{})
}

// isStopped reports whether name is stopped and has reported so: a slow
// target's tasks are still running until it has.
func (w *fakeWorld) isStopped(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopped[name] && w.slow[name] == 0
}

func (w *fakeWorld) anyStopped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.stopped) > 0
}

func (w *fakeWorld) log() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.events)
}

type fakeTarget struct {
	w    *fakeWorld
	name string
}

func (f fakeTarget) key() string { return f.name }

func (f fakeTarget) stop() (bool, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if err := f.w.stopErr[f.name]; err != nil {
		return false, err
	}
	f.w.stopped[f.name] = true
	f.w.record("stop " + f.name)
	return true, nil
}

func (f fakeTarget) stopped() (bool, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	if f.w.slow[f.name] > 0 {
		f.w.slow[f.name]--
		return false, nil
	}
	return f.w.stopped[f.name], nil
}

func (f fakeTarget) resume() error {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	delete(f.w.stopped, f.name)
	f.w.record("resume " + f.name)
	return nil
}

func (f fakeTarget) record() heldRecord { return heldRecord{Kind: "fake", Dir: f.name} }

// newFakeQuiescer returns an enabled Quiescer that finds one fake target
// per pod UID, named as the UID.
func newFakeQuiescer(t *testing.T, w *fakeWorld, timeout time.Duration) *Quiescer {
	q := New(Config{Enabled: true, Timeout: timeout, Journal: filepath.Join(t.TempDir(), "quiesced.json")})
	q.find = func(uids []string) ([]target, error) {
		var out []target
		for _, n := range uids {
			out = append(out, fakeTarget{w: w, name: n})
		}
		return out, nil
	}
	return q
}

func TestQuiesceStopsThenCopiesThenResumes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newFakeWorld()
	w.slow["a"] = 3
	q := newFakeQuiescer(t, w, time.Minute)
	var during []string
	job := func() error {
		if !w.isStopped("a") || !w.isStopped("b") {
			return errors.New("copy ran while a writer runs")
		}
		b, err := os.ReadFile(q.journal)
		during = append(during, string(b))
		return err
	}
	res, errs, err := q.Run(ctx, "g", []string{"a", "b"}, []func() error{job})
	if err != nil || errors.Join(errs...) != nil {
		t.Fatalf("run = %v, %v", errs, err)
	}
	if res.Pods != 2 || res.Targets != 2 || res.Frozen <= 0 {
		t.Fatalf("result = %+v", res)
	}
	if got, want := w.log(), []string{"stop a", "stop b", "resume a", "resume b"}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	var recs []heldRecord
	if err := json.Unmarshal([]byte(during[0]), &recs); err != nil || len(recs) != 2 {
		t.Fatalf("journal during the copy = %s, %v", during[0], err)
	}
	if _, err := os.Stat(q.journal); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal left after resuming: %v", err)
	}
}

func TestQuiesceAlwaysResumes(t *testing.T) {
	for _, tc := range []struct {
		name string
		// job is the copy; it gets a cancel func for its request.
		job     func(w *fakeWorld, cancel func()) error
		stopErr bool
		// neverStops leaves a target running: a task stuck in the kernel.
		neverStops bool
		// cancelled cancels the request before run.
		cancelled bool
		timeout   time.Duration
		wantCode  codes.Code
		wantJob   bool // the job's own error is returned
		panics    bool
		// noCopy: the copy must not start.
		noCopy bool
	}{
		{name: "copy fails", job: func(*fakeWorld, func()) error { return errors.New("disk full") }, wantJob: true},
		{name: "copy panics", job: func(*fakeWorld, func()) error { panic("boom") }, panics: true},
		{name: "request cancelled", job: func(w *fakeWorld, cancel func()) error {
			cancel()
			return waitResumed(w)
		}, wantCode: codes.Canceled},
		{name: "timeout", timeout: 50 * time.Millisecond, job: func(w *fakeWorld, _ func()) error {
			return waitResumed(w)
		}, wantCode: codes.Unavailable},
		{name: "a stop fails", stopErr: true, wantCode: codes.Internal, noCopy: true},
		{name: "a writer never stops", neverStops: true, timeout: 50 * time.Millisecond, wantCode: codes.Unavailable, noCopy: true},
		{name: "request cancelled before", cancelled: true, wantCode: codes.Canceled, noCopy: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			w := newFakeWorld()
			if tc.stopErr {
				w.stopErr["b"] = errors.New("EACCES")
			}
			if tc.neverStops {
				w.slow["b"] = 1 << 30
			}
			if tc.cancelled {
				cancel()
			}
			q := newFakeQuiescer(t, w, orDefault(tc.timeout, time.Minute))
			ran := false
			jobs := []func() error{func() error {
				ran = true
				if tc.job == nil {
					return nil
				}
				return tc.job(w, cancel)
			}}
			var errs []error
			var err error
			panicked := catchPanic(func() { _, errs, err = q.Run(ctx, "g", []string{"a", "b"}, jobs) })
			if w.anyStopped() {
				t.Fatalf("still stopped after run returned (events %v)", w.log())
			}
			if _, err := os.Stat(q.journal); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("journal left: %v", err)
			}
			if panicked != nil != tc.panics || tc.panics && !strings.Contains(fmt.Sprint(panicked), "boom") {
				t.Fatalf("panic = %v, want one: %v", panicked, tc.panics)
			}
			if tc.wantJob && (err != nil || errors.Join(errs...) == nil) {
				t.Fatalf("run = %v, %v; want the copy's error", errs, err)
			}
			if tc.wantCode != codes.OK {
				if got := status.Code(err); got != tc.wantCode {
					t.Fatalf("run = %v, want code %s", err, tc.wantCode)
				}
			}
			if ran == tc.noCopy {
				t.Fatalf("copy ran = %v, want %v", ran, !tc.noCopy)
			}
		})
	}
}

// waitResumed waits until the fake world has nothing stopped, as a copy
// that outlives its quiesce would.
func waitResumed(w *fakeWorld) error {
	deadline := time.After(time.Minute)
	for {
		w.mu.Lock()
		idle, changed := len(w.stopped) == 0, w.changed
		w.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-changed:
		case <-deadline:
			return errors.New("never resumed")
		}
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func catchPanic(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

func TestQuiescePanicResumesBeforeOtherCopiesEnd(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newFakeWorld()
	q := newFakeQuiescer(t, w, time.Minute)
	var slowErr error
	slow := func() error { slowErr = waitResumed(w); return slowErr }
	panicky := func() error { panic("boom") }
	if v := catchPanic(func() { _, _, _ = q.Run(ctx, "g", []string{"a"}, []func() error{slow, panicky}) }); v == nil {
		t.Fatal("the panic was swallowed")
	}
	if slowErr != nil {
		t.Fatalf("the other copy: %v; want the writers resumed while it still ran", slowErr)
	}
}

func TestQuiesceSessionsShareTargets(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newFakeWorld()
	q := newFakeQuiescer(t, w, time.Minute)
	firstStopped, secondDone := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _, _ = q.Run(ctx, "g1", []string{"shared"}, []func() error{func() error {
			close(firstStopped)
			<-secondDone
			return nil
		}})
	})
	<-firstStopped
	_, _, err := q.Run(ctx, "g2", []string{"shared"}, []func() error{func() error { return nil }})
	stillStopped := w.isStopped("shared")
	close(secondDone)
	wg.Wait()
	if err != nil || !stillStopped {
		t.Fatalf("second session: %v; target stopped after it ended = %v, want true while the first runs", err, stillStopped)
	}
	if got, want := w.log(), []string{"stop shared", "resume shared"}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
}

func TestQuiesceDisabledDoesNotScan(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	q := New(Config{Enabled: false})
	q.find = func([]string) ([]target, error) { return nil, errors.New("scanned") }
	res, errs, err := q.Run(ctx, "g", []string{"a"}, []func() error{func() error { return nil }})
	if err != nil || errors.Join(errs...) != nil || res != (Result{}) {
		t.Fatalf("run = %+v, %v, %v", res, errs, err)
	}
}

func TestQuiesceEndAll(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w := newFakeWorld()
	q := newFakeQuiescer(t, w, time.Minute)
	_, _, err := q.Run(ctx, "g", []string{"a"}, []func() error{func() error {
		q.EndAll() // the driver stops serving mid-copy
		return waitResumed(w)
	}})
	if got := status.Code(err); got != codes.Unavailable {
		t.Fatalf("run = %v, want code Unavailable", err)
	}
}
