package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// Component names under which requests are counted. The benchmark, helm and
// kube-controller-manager all use the admin certificate; their user agents tell them apart.
const (
	compController = "controller"
	compSidecar    = "sidecar"
	compBench      = "bench"
	compKCM        = "kube-controller-manager"
)

// perSnapshotComponents are the components whose writes count as the snapshot's: the user's
// create or delete (the benchmark) and Shutter's two components.
var perSnapshotComponents = []string{compBench, compController, compSidecar}

var writeVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}

// request is one row of the audit count: who did what to which resource, with what answer.
type request struct {
	Component string `json:"component"`
	Verb      string `json:"verb"`
	Resource  string `json:"resource"`
	Code      int    `json:"code"`
	Count     int    `json:"count"`
}

func (r request) write() bool { return writeVerbs[r.Verb] }

// perSnapshot reports whether a write is paid per snapshot: leader election renewals are paid
// per second instead and are listed apart.
func (r request) perSnapshot() bool { return r.write() && r.Resource != "leases" }

// Phase is what one phase (create -> all ready, or delete -> all gone) measured.
type Phase struct {
	Name        string  `json:"name"`
	Snapshots   int     `json:"snapshots"`
	WallSeconds float64 `json:"wallSeconds"`
	PerSecond   float64 `json:"snapshotsPerSecond"`
	// LatencySeconds are each snapshot's time from its create (delete) call to readyToUse (gone).
	LatencyP50 float64 `json:"latencyP50Seconds"`
	LatencyP90 float64 `json:"latencyP90Seconds"`
	LatencyP99 float64 `json:"latencyP99Seconds"`
	LatencyMax float64 `json:"latencyMaxSeconds"`
	// Requests counts the audit log's completed requests in the phase.
	Requests []request `json:"requests"`
	// APIServerRequests is the growth of apiserver_request_total ("VERB resource code").
	APIServerRequests requestTotals      `json:"apiserverRequestTotal"`
	CPUSeconds        map[string]float64 `json:"cpuSeconds"`
	PeakRSSMiB        map[string]float64 `json:"peakRSSMiB"`
	LoadStart         float64            `json:"loadStart"`
	LoadEnd           float64            `json:"loadEnd"`
}

// phaseWindow collects a phase's measurements while it runs.
type phaseWindow struct {
	start     time.Time
	cpu       map[string]float64
	metrics   requestTotals
	auditPos  int64
	load      float64
	latencies []time.Duration
	last      time.Time
}

// classify names the component that made a request.
func classify(e *auditEvent, controllerUser, sidecarUser, adminUser string) string {
	switch u := e.User.Username; {
	case u == controllerUser:
		return compController
	case u == sidecarUser:
		return compSidecar
	case u == adminUser && strings.HasPrefix(e.UserAgent, benchUserAgent):
		return compBench
	case u == adminUser && strings.HasPrefix(e.UserAgent, "kube-controller-manager"):
		return compKCM
	case u == adminUser && strings.HasPrefix(e.UserAgent, "helm"):
		return "helm"
	default:
		return u
	}
}

// countRequests groups audit events into rows.
func countRequests(events map[request]int) []request {
	out := make([]request, 0, len(events))
	for r, n := range events {
		r.Count = n
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return fmt.Sprint(a.Component, a.Verb, a.Resource, a.Code) < fmt.Sprint(b.Component, b.Verb, b.Resource, b.Code)
	})
	return out
}

// percentile is the p-th percentile (0..1) of sorted durations, in seconds.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i].Seconds()
}

// figures flattens a phase into named numbers, the unit of medians across runs.
func (p *Phase) figures(out map[string]float64) {
	n := float64(p.Snapshots)
	k := p.Name + "."
	out[k+"wall_s"] = p.WallSeconds
	out[k+"snapshots_per_s"] = p.PerSecond
	out[k+"latency_p50_s"] = p.LatencyP50
	out[k+"latency_p90_s"] = p.LatencyP90
	out[k+"latency_max_s"] = p.LatencyMax
	out[k+"writes_per_snapshot"] = 0
	out[k+"conflicts_409"] = 0
	for _, r := range p.Requests {
		c := float64(r.Count)
		switch {
		case r.perSnapshot() && slices.Contains(perSnapshotComponents, r.Component):
			out[k+"writes_per_snapshot"] += c / n
			out[k+"writes_by_component."+r.Component] += c / n
			out[k+"writes_by_resource."+r.Verb+" "+r.Resource] += c / n
			out[k+"writes."+r.Component+" "+r.Verb+" "+r.Resource] += c / n
		case r.write():
			out[k+"other_writes."+r.Component+" "+r.Verb+" "+r.Resource] += c
		}
		if r.Verb == "get" {
			out[k+"gets_per_snapshot."+r.Component] += c / n
			out[k+"gets."+r.Component+" "+r.Resource] += c / n
		}
		if strings.HasPrefix(r.Resource, "volumesnapshot") && r.Verb != "list" && r.Verb != "watch" {
			out[k+"snapshot_api_requests_per_snapshot."+r.Component] += c / n
		}
		if r.Code == 409 {
			out[k+"conflicts_409"] += c
			out[k+"conflicts_409."+r.Component] += c
		}
	}
	for name, s := range p.CPUSeconds {
		out[k+"cpu_s."+name] = s
	}
	out[k+"apiserver_cpu_ms_per_snapshot"] = 1000 * p.CPUSeconds["kube-apiserver"] / n
	for name, m := range p.PeakRSSMiB {
		out[k+"peak_rss_mib."+name] = m
	}
	out[k+"load"] = (p.LoadStart + p.LoadEnd) / 2
}

// stat is one figure over all runs.
type stat struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Runs   []float64 `json:"runs"`
}

// summarize turns each run's figures into medians and ranges; a figure missing in a run is 0.
func summarize(runs []map[string]float64) map[string]stat {
	keys := map[string]bool{}
	for _, r := range runs {
		for k := range r {
			keys[k] = true
		}
	}
	out := map[string]stat{}
	for k := range keys {
		var vals []float64
		for _, r := range runs {
			vals = append(vals, r[k])
		}
		sorted := slices.Sorted(slices.Values(vals))
		med := sorted[len(sorted)/2]
		if len(sorted)%2 == 0 {
			med = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
		}
		out[k] = stat{Median: med, Min: sorted[0], Max: sorted[len(sorted)-1], Runs: vals}
	}
	return out
}

// printTable writes the summary: one line per figure, median and range when there are runs to
// compare.
func printTable(w io.Writer, summary map[string]stat, runs int) {
	keys := slices.Sorted(maps.Keys(summary))
	prefix := ""
	for _, k := range keys {
		if p, _, _ := strings.Cut(k, "."); p != prefix {
			prefix = p
			fmt.Fprintf(w, "\n%s\n", strings.ToUpper(p))
		}
		s := summary[k]
		if s.Median == 0 && s.Max == 0 {
			continue
		}
		line := fmt.Sprintf("  %-72s %10s", strings.TrimPrefix(k, prefix+"."), num(s.Median))
		if runs > 1 {
			line += fmt.Sprintf("   [%s .. %s]", num(s.Min), num(s.Max))
		}
		fmt.Fprintln(w, line)
	}
}

func num(v float64) string {
	switch {
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
