package schedule

import (
	"errors"
	"testing"
	"time"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCronNext pins the runs of schedules across daylight saving changes. Expected times are UTC
// instants worked out by hand from the zones' rules for 2026: New York springs forward on 8 March
// (02:00 EST -> 03:00 EDT) and falls back on 1 November (02:00 EDT -> 01:00 EST); London and
// Berlin on 29 March and 25 October.
func TestCronNext(t *testing.T) {
	for _, tc := range []struct {
		name, spec, zone, from string
		want                   []string
	}{
		{name: "UTC weekdays", spec: "0 9 * * MON-FRI", from: "2026-01-02T10:00:00Z",
			want: []string{"2026-01-05T09:00:00Z", "2026-01-06T09:00:00Z"}},
		{name: "New York: a run in the skipped hour is skipped that day", spec: "30 2 * * *", zone: "America/New_York",
			from: "2026-03-07T12:00:00Z", want: []string{"2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"}},
		{name: "New York: hourly runs on across spring-forward", spec: "0 * * * *", zone: "America/New_York",
			from: "2026-03-08T05:30:00Z", want: []string{"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
		{name: "New York: 01:30 runs once in the repeated hour", spec: "30 1 * * *", zone: "America/New_York",
			from: "2026-10-31T12:00:00Z", want: []string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{name: "New York: every 30 minutes of hour 1 runs once per wall-clock time", spec: "*/30 1 * * *", zone: "America/New_York",
			from: "2026-11-01T04:30:00Z", want: []string{"2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:00:00Z"}},
		{name: "New York: hourly runs in both repeated hours", spec: "0 * * * *", zone: "America/New_York",
			from: "2026-11-01T04:30:00Z", want: []string{"2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
		{name: "London: spring-forward skips 01:30", spec: "30 1 * * *", zone: "Europe/London",
			from: "2026-03-28T00:00:00Z", want: []string{"2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z"}},
		{name: "London: fall-back runs 01:30 once", spec: "30 1 * * *", zone: "Europe/London",
			from: "2026-10-24T12:00:00Z", want: []string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{name: "Berlin: @daily is local midnight", spec: "@daily", zone: "Europe/Berlin",
			from: "2026-03-28T12:00:00Z", want: []string{"2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"}},
		{name: "Berlin: @hourly across fall-back", spec: "@hourly", zone: "Europe/Berlin",
			from: "2026-10-24T23:30:00Z", want: []string{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseCron(tc.spec, tc.zone)
			if err != nil {
				t.Fatal(err)
			}
			at := mustTime(t, tc.from)
			for i, want := range tc.want {
				at = c.Next(at)
				if got := at.Format(time.RFC3339); got != want {
					t.Fatalf("run %d: got %s, want %s", i, got, want)
				}
			}
		})
	}
}

func TestParseCronErrors(t *testing.T) {
	for _, tc := range []struct {
		spec, zone string
		want       error
	}{
		{spec: "", want: errInvalidSchedule},
		{spec: "* * * *", want: errInvalidSchedule},
		{spec: "0 * * * * *", want: errInvalidSchedule},
		{spec: "61 * * * *", want: errInvalidSchedule},
		{spec: "0 25 * * *", want: errInvalidSchedule},
		{spec: "@every 5m", want: errInvalidSchedule},
		{spec: "TZ=UTC 0 * * * *", want: errInvalidSchedule},
		{spec: "0 0 30 2 *", want: errInvalidSchedule},
		{spec: "@fortnightly", want: errInvalidSchedule},
		{spec: "0 * * * *", zone: "Mars/Olympus_Mons", want: errUnknownTimeZone},
		{spec: "0 * * * *", zone: "Local", want: errUnknownTimeZone},
	} {
		t.Run(tc.spec+" "+tc.zone, func(t *testing.T) {
			_, err := ParseCron(tc.spec, tc.zone)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCronDue(t *testing.T) {
	every, err := ParseCron("* * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, after, now string
		want             string
		earlier          int64
		atLeast          bool
	}{
		{name: "nothing due yet", after: "2026-05-01T10:00:00Z", now: "2026-05-01T10:00:59Z"},
		{name: "one due", after: "2026-05-01T10:00:00Z", now: "2026-05-01T10:01:00Z", want: "2026-05-01T10:01:00Z"},
		{name: "latest of five", after: "2026-05-01T10:00:00Z", now: "2026-05-01T10:05:30Z", want: "2026-05-01T10:05:00Z", earlier: 4},
		{name: "a week down", after: "2026-05-01T00:00:00Z", now: "2026-05-08T00:00:10Z", want: "2026-05-08T00:00:00Z", earlier: 7*24*60 - 1},
		{name: "a year down", after: "2026-01-01T00:00:00Z", now: "2027-01-01T00:00:10Z", want: "2027-01-01T00:00:00Z", earlier: maxSteps, atLeast: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			latest, earlier, ok := every.Due(mustTime(t, tc.after), mustTime(t, tc.now))
			if ok != (tc.want != "") {
				t.Fatalf("due %v, want %v", ok, tc.want != "")
			}
			if !ok {
				return
			}
			if got := latest.Format(time.RFC3339); got != tc.want {
				t.Errorf("latest %s, want %s", got, tc.want)
			}
			if earlier != tc.earlier && !(tc.atLeast && earlier >= tc.earlier) {
				t.Errorf("earlier %d, want %d", earlier, tc.earlier)
			}
		})
	}
}

// TestSnapshotName pins the names (the hashes are the first 8 hex digits of
// `printf '<schedule>/<claim>' | sha256sum`).
func TestSnapshotName(t *testing.T) {
	at := mustTime(t, "2026-03-01T04:00:00Z")
	for _, tc := range []struct {
		schedule, claim, want string
	}{
		{"hourly", "data", "hourly-data-421878c7-20260301t0400z"},
		{"nightly", "", "nightly-20260301t0400z"},
		// Schedule a with claim b-c and schedule a-b with claim c spell the same prefix.
		{"a", "b-c", "a-b-c-b88f83c8-20260301t0400z"},
		{"a-b", "c", "a-b-c-4e84717d-20260301t0400z"},
		// Longer than 63 characters: the schedule and claim part is cut to 39.
		{"backups-of-the-primary-database", "postgres-data-00", "backups-of-the-primary-database-postgre-2ce822e3-20260301t0400z"},
		{"a-very-long-schedule-name-for-the-database", "data-postgres-0",
			"a-very-long-schedule-name-for-the-datab-ef9619d9-20260301t0400z"},
		{"a-very-long-schedule-name-for-the-database-and-more-more", "",
			"a-very-long-schedule-name-for-the-datab-fcc0a996-20260301t0400z"},
		// The cut ends in a dash, which is dropped.
		{"nightly-snapshots-of-the-production-db", "postgres-data-0",
			"nightly-snapshots-of-the-production-db-ec808862-20260301t0400z"},
	} {
		got := SnapshotName(tc.schedule, tc.claim, at)
		if got != tc.want {
			t.Errorf("SnapshotName(%q, %q) = %q, want %q", tc.schedule, tc.claim, got, tc.want)
		}
		if len(got) > 63 {
			t.Errorf("%q is %d characters long", got, len(got))
		}
	}
	// The time in the name is UTC whatever the time's zone.
	ny, _ := time.LoadLocation("America/New_York")
	if got := SnapshotName("s", "c", at.In(ny)); got != "s-c-5d830f44-20260301t0400z" {
		t.Errorf("got %q", got)
	}
}
