package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSoakQueueJudgedByDrainWhenShort: a workqueue backlog that builds up during a short soak
// (a component starved of CPU by other work) is not a failure of the slope check, which still
// judges a long soak's queue; the other series are judged in both.
func TestSoakQueueJudgedByDrainWhenShort(t *testing.T) {
	for _, tc := range []struct {
		duration time.Duration
		want     []string
	}{
		{2 * time.Minute, []string{"sidecar goroutines rises"}},
		{time.Hour, []string{"sidecar goroutines rises", "sidecar workqueueDepth rises"}},
	} {
		r := &soakReport{Samples: map[string][]sample{}, Trends: map[string]map[string]trend{}}
		step := tc.duration.Seconds() / 10
		for i := range 11 {
			r.Samples["sidecar"] = append(r.Samples["sidecar"], sample{At: float64(i) * step, Depth: float64(i * 40), Goroutines: float64(i * 10)})
		}
		r.evaluate(tc.duration)
		slices.Sort(r.Failures) // evaluate goes through a map
		if len(r.Failures) != len(tc.want) {
			t.Fatalf("%s: failures %q, want %q", tc.duration, r.Failures, tc.want)
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(r.Failures[i], w) {
				t.Errorf("%s: failure %q, want %q", tc.duration, r.Failures[i], w)
			}
		}
	}
}
