package controllertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shutter-csi/shutter/pkg/controller"
)

// TestSignalsReachSubscribers runs a queue with the hook in its context: a subscriber of a key
// sees each of its syncs with the outcome, a subscriber of another key nothing.
func TestSignalsReachSubscribers(t *testing.T) {
	s := NewSignals()
	fail := errors.New("boom")
	q := controller.NewQueue[string]("signals", controller.Options{RetryStart: time.Hour, RetryMax: time.Hour},
		func(_ context.Context, key string) error {
			if key == "bad" {
				return fail
			}
			return nil
		})
	good, bad, other := s.After(t, "signals", "good"), s.After(t, "signals", "bad"), s.After(t, "other", "good")
	ctx, cancel := context.WithCancel(controller.WithProcessed(t.Context(), s.Hook))
	done := make(chan struct{})
	go func() { q.Run(ctx, 1); close(done) }()
	defer func() { cancel(); <-done }()

	q.Add("good")
	if r := good.Next(t); r.Outcome != controller.OutcomeSuccess || r.Err != nil || r.Queue != "signals" || r.Key != "good" {
		t.Errorf("good: %+v", r)
	}
	q.Add("bad")
	if r := bad.Until(t, "it failed", func(r controller.Result) bool { return r.Err != nil }); r.Outcome != controller.OutcomeError || !errors.Is(r.Err, fail) {
		t.Errorf("bad: %+v", r)
	}
	select {
	case r := <-other.ch:
		t.Errorf("a subscriber of another queue got %+v", r)
	default:
	}
}

// TestLatestResultWins: a subscriber that has not taken a result gets the newest one.
func TestLatestResultWins(t *testing.T) {
	s := NewSignals()
	w := s.After(t, "q", "k")
	s.Hook(controller.Result{Queue: "q", Key: "k", Outcome: controller.OutcomeError})
	s.Hook(controller.Result{Queue: "q", Key: "k", Outcome: controller.OutcomeSuccess})
	if r := w.Next(t); r.Outcome != controller.OutcomeSuccess {
		t.Errorf("got %s, want the latest, success", r.Outcome)
	}
}
