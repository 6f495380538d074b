package schedule

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
)

// State is where a scheduled snapshot stands, as retention sees it.
type State int

const (
	// Pending snapshots are still being taken: never pruned, never counted.
	Pending State = iota
	// Ready snapshots are what the retention rules count.
	Ready
	// Failed snapshots are not counted and are pruned once a later snapshot of their series is
	// ready.
	Failed
)

// Item is one snapshot a schedule took.
type Item struct {
	Name string
	UID  types.UID
	// Series is what retention counts separately: the claim, or "" for group snapshots.
	Series string
	// Time is the run the snapshot was taken for.
	Time  time.Time
	State State
	// Keep is the user's snapshot.shutter.dev/keep=true label: never pruned, never counted.
	Keep bool
	// Owned is true while the snapshot carries the schedule's owner reference.
	Owned bool
}

// Policy is a parsed spec.retention; the zero Policy keeps everything.
type Policy struct {
	MaxCount                       int
	MaxAge                         time.Duration
	Hourly, Daily, Weekly, Monthly int
	set                            bool
}

// ParsePolicy turns spec.retention into a Policy.
func ParsePolicy(r *schedulev1alpha1.Retention) (Policy, error) {
	if r == nil {
		return Policy{}, nil
	}
	count := func(v *int32) int {
		if v == nil {
			return 0
		}
		return int(*v)
	}
	p := Policy{MaxCount: count(r.MaxCount), Hourly: count(r.Hourly), Daily: count(r.Daily),
		Weekly: count(r.Weekly), Monthly: count(r.Monthly), set: true}
	if r.MaxAge != nil {
		d, err := time.ParseDuration(*r.MaxAge)
		if err != nil || d <= 0 {
			return Policy{}, fmt.Errorf("retention.maxAge %q is not a positive duration", *r.MaxAge)
		}
		p.MaxAge = d
	}
	return p, nil
}

// tier keeps the first snapshot in each of the latest count periods that have one; period maps
// a time in the schedule's zone to its period.
type tier struct {
	count  int
	period func(time.Time) string
}

func (p Policy) tiers() []tier {
	return []tier{
		{p.Hourly, func(t time.Time) string {
			_, off := t.Zone() // the repeated hour of a DST change is an hour of its own
			return fmt.Sprintf("%s%+d", t.Format("2006010215"), off)
		}},
		{p.Daily, func(t time.Time) string { return t.Format("20060102") }},
		{p.Weekly, func(t time.Time) string {
			y, w := t.ISOWeek()
			return fmt.Sprintf("%d-%d", y, w)
		}},
		{p.Monthly, func(t time.Time) string { return t.Format("200601") }},
	}
}

// Prune returns the names of the snapshots the policy does not keep, oldest first. Periods are
// read in loc; maxAge counts back from now. Rules apply to each series separately.
func (p Policy) Prune(items []Item, loc *time.Location, now time.Time) []string {
	if !p.set {
		return nil
	}
	series := map[string][]Item{}
	for _, it := range items {
		series[it.Series] = append(series[it.Series], it)
	}
	var prune []Item
	for _, its := range series {
		prune = append(prune, p.pruneSeries(its, loc, now)...)
	}
	sortItems(prune)
	var names []string
	for _, it := range prune {
		names = append(names, it.Name)
	}
	return names
}

func (p Policy) pruneSeries(items []Item, loc *time.Location, now time.Time) []Item {
	var ready []Item
	var newestReady time.Time
	for _, it := range items {
		if it.State == Ready && !it.Keep {
			ready = append(ready, it)
			if it.Time.After(newestReady) {
				newestReady = it.Time
			}
		}
	}
	sortItems(ready)
	kept := p.keep(ready, loc, now)
	var prune []Item
	for _, it := range items {
		switch {
		case it.Keep || it.State == Pending:
		case it.State == Failed && it.Time.Before(newestReady):
			prune = append(prune, it)
		case it.State == Ready && !kept[it.Name]:
			prune = append(prune, it)
		}
	}
	return prune
}

// keep returns the ready snapshots (sorted oldest first) that some rule keeps.
func (p Policy) keep(ready []Item, loc *time.Location, now time.Time) map[string]bool {
	kept := map[string]bool{}
	for i := len(ready) - 1; i >= 0 && len(ready)-i <= p.MaxCount; i-- {
		kept[ready[i].Name] = true
	}
	if p.MaxAge > 0 {
		for _, it := range ready {
			if now.Sub(it.Time) < p.MaxAge {
				kept[it.Name] = true
			}
		}
	}
	for _, t := range p.tiers() {
		if t.count == 0 {
			continue
		}
		first := map[string]Item{}
		var periods []string
		for _, it := range ready { // oldest first: the first item seen is the period's first
			key := t.period(it.Time.In(loc))
			if _, ok := first[key]; !ok {
				first[key] = it
				periods = append(periods, key)
			}
		}
		for i := len(periods) - 1; i >= 0 && len(periods)-i <= t.count; i-- {
			kept[first[periods[i]].Name] = true
		}
	}
	return kept
}

// sortItems sorts by run time, then name.
func sortItems(items []Item) {
	sort.Slice(items, func(i, j int) bool {
		if !items[i].Time.Equal(items[j].Time) {
			return items[i].Time.Before(items[j].Time)
		}
		return items[i].Name < items[j].Name
	})
}
