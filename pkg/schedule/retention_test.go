package schedule

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
)

// snap is a test snapshot, written "2006-01-02 15:04" in the case's zone, optionally with
// " failed", " pending", " keep" or " claim=x" after it. Its name is that text.
func snaps(t *testing.T, loc *time.Location, specs ...string) []Item {
	t.Helper()
	var items []Item
	for _, spec := range specs {
		f := strings.Fields(spec)
		at, err := time.ParseInLocation("2006-01-02 15:04", f[0]+" "+f[1], loc)
		if err != nil {
			t.Fatal(err)
		}
		it := Item{Name: spec, Time: at, State: Ready}
		for _, flag := range f[2:] {
			switch {
			case flag == "failed":
				it.State = Failed
			case flag == "pending":
				it.State = Pending
			case flag == "keep":
				it.Keep = true
			case strings.HasPrefix(flag, "claim="):
				it.Series = strings.TrimPrefix(flag, "claim=")
			default:
				t.Fatalf("bad flag %q", flag)
			}
		}
		items = append(items, it)
	}
	return items
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// every returns a snapshot each step from start (in loc) up to and excluding end.
func every(start, end string, step time.Duration) []string {
	s, _ := time.Parse("2006-01-02 15:04", start)
	e, _ := time.Parse("2006-01-02 15:04", end)
	var out []string
	for at := s; at.Before(e); at = at.Add(step) {
		out = append(out, at.Format("2006-01-02 15:04"))
	}
	return out
}

func TestRetention(t *testing.T) {
	for _, tc := range []struct {
		name   string
		zone   string
		policy schedulev1alpha1.Retention
		snaps  []string
		now    string
		pruned []string
	}{
		{name: "maxCount keeps the newest", policy: schedulev1alpha1.Retention{MaxCount: ptr.To[int32](3)},
			snaps:  every("2026-05-01 00:00", "2026-05-01 06:00", time.Hour),
			pruned: []string{"2026-05-01 00:00", "2026-05-01 01:00", "2026-05-01 02:00"}},
		{name: "a failed snapshot does not push a good one out", policy: schedulev1alpha1.Retention{MaxCount: ptr.To[int32](3)},
			snaps:  []string{"2026-05-01 00:00", "2026-05-01 01:00", "2026-05-01 02:00", "2026-05-01 03:00 failed"},
			pruned: nil},
		{name: "a failed snapshot goes once a later one is ready", policy: schedulev1alpha1.Retention{MaxCount: ptr.To[int32](2)},
			snaps:  []string{"2026-05-01 00:00", "2026-05-01 01:00 failed", "2026-05-01 02:00", "2026-05-01 03:00"},
			pruned: []string{"2026-05-01 00:00", "2026-05-01 01:00 failed"}},
		{name: "pending snapshots stay and do not count", policy: schedulev1alpha1.Retention{MaxCount: ptr.To[int32](1)},
			snaps:  []string{"2026-05-01 00:00", "2026-05-01 01:00", "2026-05-01 02:00 pending"},
			pruned: []string{"2026-05-01 00:00"}},
		{name: "keep label: never pruned, never counted", policy: schedulev1alpha1.Retention{MaxCount: ptr.To[int32](1)},
			snaps:  []string{"2026-05-01 00:00 keep", "2026-05-01 01:00", "2026-05-01 02:00", "2026-05-01 03:00 failed keep"},
			pruned: []string{"2026-05-01 01:00"}},
		{name: "each claim is its own series", policy: schedulev1alpha1.Retention{MaxCount: ptr.To[int32](1)},
			snaps: []string{"2026-05-01 00:00 claim=a", "2026-05-01 00:00 claim=b", "2026-05-01 01:00 claim=a",
				"2026-05-01 01:00 claim=b pending"},
			pruned: []string{"2026-05-01 00:00 claim=a"}},
		{name: "maxAge counts back from now", policy: schedulev1alpha1.Retention{MaxAge: ptr.To("2h")},
			snaps: every("2026-05-01 00:00", "2026-05-01 06:00", time.Hour), now: "2026-05-01 05:30",
			pruned: []string{"2026-05-01 00:00", "2026-05-01 01:00", "2026-05-01 02:00", "2026-05-01 03:00"}},
		{name: "hourly and daily in Berlin: the first of each day", zone: "Europe/Berlin",
			policy: schedulev1alpha1.Retention{Hourly: ptr.To[int32](2), Daily: ptr.To[int32](2)},
			snaps:  every("2026-03-01 00:00", "2026-03-04 00:00", 6*time.Hour),
			pruned: []string{"2026-03-01 00:00", "2026-03-01 06:00", "2026-03-01 12:00", "2026-03-01 18:00",
				"2026-03-02 06:00", "2026-03-02 12:00", "2026-03-02 18:00", "2026-03-03 06:00"}},
		{name: "the same snapshots with days in UTC", zone: "UTC",
			policy: schedulev1alpha1.Retention{Hourly: ptr.To[int32](2), Daily: ptr.To[int32](2)},
			// Berlin's midnights are 23:00 UTC the day before.
			snaps: every("2026-02-28 23:00", "2026-03-03 23:00", 6*time.Hour),
			pruned: []string{"2026-02-28 23:00", "2026-03-01 05:00", "2026-03-01 11:00", "2026-03-01 17:00",
				"2026-03-01 23:00", "2026-03-02 11:00", "2026-03-02 17:00", "2026-03-02 23:00"}},
		{name: "weekly (Monday) and monthly", policy: schedulev1alpha1.Retention{Weekly: ptr.To[int32](2), Monthly: ptr.To[int32](2)},
			snaps:  []string{"2026-01-15 00:00", "2026-02-01 00:00", "2026-02-20 00:00", "2026-03-01 00:00", "2026-03-22 00:00", "2026-03-23 00:00", "2026-03-29 00:00", "2026-03-30 00:00", "2026-03-31 00:00"},
			pruned: []string{"2026-01-15 00:00", "2026-02-20 00:00", "2026-03-22 00:00", "2026-03-29 00:00", "2026-03-31 00:00"}},
		{name: "periods without snapshots do not count", policy: schedulev1alpha1.Retention{Daily: ptr.To[int32](2)},
			snaps:  []string{"2026-05-01 00:00", "2026-05-02 00:00", "2026-05-20 00:00"},
			pruned: []string{"2026-05-01 00:00"}},
		{name: "the repeated hour of fall-back is an hour of its own", zone: "America/New_York",
			policy: schedulev1alpha1.Retention{Hourly: ptr.To[int32](3)},
			// 00:30 EDT, 01:00 EDT, 01:00 EST (an hour later), 02:00 EST; parsed in UTC below.
			snaps: nil, pruned: []string{"2026-11-01T04:30:00Z"}},
		{name: "no retention keeps everything", snaps: every("2026-05-01 00:00", "2026-05-01 06:00", time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc := time.UTC
			if tc.zone != "" {
				loc = mustZone(t, tc.zone)
			}
			items := snaps(t, loc, tc.snaps...)
			if tc.snaps == nil && tc.zone == "America/New_York" {
				for _, s := range []string{"2026-11-01T04:30:00Z", "2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"} {
					items = append(items, Item{Name: s, Time: mustTime(t, s), State: Ready})
				}
			}
			var r *schedulev1alpha1.Retention
			if tc.policy != (schedulev1alpha1.Retention{}) {
				r = &tc.policy
			}
			p, err := ParsePolicy(r)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
			if tc.now != "" {
				now, _ = time.ParseInLocation("2006-01-02 15:04", tc.now, loc)
			}
			got := p.Prune(items, loc, now)
			if !reflect.DeepEqual(got, tc.pruned) {
				t.Errorf("pruned:\n got %q\nwant %q", got, tc.pruned)
			}
			logTable(t, items, got)
		})
	}
}

// logTable prints each snapshot and whether it was kept, for reading a failure.
func logTable(t *testing.T, items []Item, pruned []string) {
	gone := map[string]bool{}
	for _, n := range pruned {
		gone[n] = true
	}
	var b strings.Builder
	for _, it := range items {
		verdict := "kept"
		if gone[it.Name] {
			verdict = "pruned"
		}
		fmt.Fprintf(&b, "\n  %-32s %s", it.Name, verdict)
	}
	t.Log(b.String())
}
