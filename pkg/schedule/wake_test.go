package schedule

import (
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/shutter-csi/shutter/pkg/controller"
)

// jumpingClock passes next right after its first reading, as a test stepping the clock (or a
// slow machine) can between the reconciler's reading and its starting a timer.
type jumpingClock struct {
	*testingclock.FakeClock
	next time.Time
	once sync.Once
}

func (c *jumpingClock) Now() time.Time {
	now := c.FakeClock.Now()
	c.once.Do(func() { c.FakeClock.SetTime(c.next) })
	return now
}

// TestWakeAtWhenTheClockPassesTheRun: a run that came due while its timer was being started is
// queued at once, not a whole interval later.
func TestWakeAtWhenTheClockPassesTheRun(t *testing.T) {
	now := time.Date(2030, 3, 31, 1, 3, 0, 0, time.UTC)
	f := newFixture(t, now)
	next := now.Add(time.Minute)
	f.r.clock = &jumpingClock{FakeClock: f.clock, next: next}
	key := controller.Key{Namespace: "ns", Name: "every"}
	f.r.wakeAt(key, next)
	if n := f.r.queue.Len(); n != 1 {
		t.Errorf("queue holds %d keys, want the schedule's: its run is due", n)
	}
	if _, ok := f.r.timers[key]; ok {
		t.Error("a timer is kept for a run already due")
	}
}
