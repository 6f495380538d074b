package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	// The controller's image may have no zoneinfo; Go's copy of the database is always there.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// Reasons a schedule is rejected, reported in the Ready condition and a Warning event.
var (
	errInvalidSchedule = errors.New("invalid schedule")
	errUnknownTimeZone = errors.New("unknown time zone")
)

// starBit is the bit robfig/cron sets in a field written as "*" (or a descriptor's full range).
const starBit = 1 << 63

// maxSteps bounds the walk over missed runs after a long outage; past it the latest run is found
// by searching back from now and the older ones are not counted one by one.
const maxSteps = 200000

// Cron is a parsed schedule in its time zone.
type Cron struct {
	spec *cron.SpecSchedule
	loc  *time.Location
	// skipRepeated drops a run whose wall-clock time is the second occurrence of that time in
	// the hour a zone repeats when it leaves daylight saving time: a job at 01:30 runs once on
	// that night. Schedules whose hour field is "*" run in both hours; they are an hour apart.
	skipRepeated bool
}

// ParseCron parses a 5-field cron expression or descriptor (@hourly and friends) in the IANA
// time zone tz (UTC when empty). @every and TZ= prefixes are refused: a schedule has fixed
// times, in spec.timeZone.
func ParseCron(expr, tz string) (*Cron, error) {
	expr = strings.TrimSpace(expr)
	switch {
	case strings.HasPrefix(expr, "@every"):
		return nil, fmt.Errorf("%w %q: @every has no fixed times; use cron fields such as \"*/15 * * * *\"", errInvalidSchedule, expr)
	case strings.Contains(expr, "TZ="):
		return nil, fmt.Errorf("%w %q: set the time zone in spec.timeZone", errInvalidSchedule, expr)
	}
	parsed, err := cron.ParseStandard(expr)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", errInvalidSchedule, expr, err)
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("%w %q: not a cron schedule", errInvalidSchedule, expr)
	}
	loc := time.UTC
	if tz != "" {
		if tz == "Local" {
			return nil, fmt.Errorf("%w %q: name a zone", errUnknownTimeZone, tz)
		}
		if loc, err = time.LoadLocation(tz); err != nil {
			return nil, fmt.Errorf("%w %q", errUnknownTimeZone, tz)
		}
	}
	spec.Location = loc
	c := &Cron{spec: spec, loc: loc, skipRepeated: spec.Hour&starBit == 0}
	if c.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("%w %q: it never runs", errInvalidSchedule, expr)
	}
	return c, nil
}

// Location is the schedule's time zone.
func (c *Cron) Location() *time.Location { return c.loc }

// Next is the first run strictly after t, in UTC; zero if there is none within five years.
func (c *Cron) Next(t time.Time) time.Time {
	for {
		t = c.spec.Next(t)
		if t.IsZero() || !c.skipRepeated || !repeated(t.In(c.loc)) {
			return t.UTC()
		}
	}
}

// repeated tells whether t's wall-clock time already happened once, shortly before, at a larger
// UTC offset: t lies in the hour a zone repeats when its clocks go back.
func repeated(t time.Time) bool {
	_, now := t.Zone()
	_, before := t.Add(-6 * time.Hour).Zone()
	if before <= now {
		return false
	}
	back := time.Duration(before-now) * time.Second
	_, then := t.Add(-back).Zone()
	return then == before
}

// Due returns the latest run in (after, now] and how many earlier runs in that interval it
// leaves behind (missed runs); ok is false when no run is due.
func (c *Cron) Due(after, now time.Time) (latest time.Time, earlier int64, ok bool) {
	latest = c.Next(after)
	if latest.IsZero() || latest.After(now) {
		return time.Time{}, 0, false
	}
	for steps := 0; ; steps++ {
		n := c.Next(latest)
		if n.IsZero() || n.After(now) {
			return latest, earlier, true
		}
		if steps == maxSteps {
			return c.latestBefore(now, latest), earlier, true
		}
		latest = n
		earlier++
	}
}

// latestBefore finds the latest run at or before now (and after floor) by searching back from
// now in growing windows.
func (c *Cron) latestBefore(now, floor time.Time) time.Time {
	for w := time.Minute; ; w *= 2 {
		from := now.Add(-w)
		if !from.After(floor) {
			from = floor
		}
		if n := c.Next(from); !n.After(now) {
			for m := c.Next(n); !m.IsZero() && !m.After(now); m = c.Next(n) {
				n = m
			}
			return n
		}
		if from.Equal(floor) {
			return floor
		}
	}
}
