package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"text/tabwriter"
	"time"
)

// config is one chaos run.
type config struct {
	N        int
	Seed     uint64
	Duration time.Duration
	// PerKind is how many times each fault kind is injected.
	PerKind int
	// Converge bounds the wait for convergence after the last fault.
	Converge time.Duration
	Keep     bool
	Log      func(format string, args ...any)
}

// kindReport is one fault kind's figures.
type kindReport struct {
	Injected int `json:"injected"`
	Failed   int `json:"failed,omitempty"`
	// ConvergedAfterLast is the time from the end of this kind's last injection to convergence.
	ConvergedAfterLast float64 `json:"convergedAfterLastSeconds"`
}

// report is the outcome of a chaos run.
type report struct {
	Seed            uint64                 `json:"seed"`
	N               int                    `json:"n"`
	Duration        string                 `json:"duration"`
	Operations      map[string]int         `json:"operations"`
	Faults          map[string]*kindReport `json:"faults"`
	Skipped         []string               `json:"skippedFaults,omitempty"`
	ConvergeSeconds float64                `json:"convergeSeconds"`
	Converged       bool                   `json:"converged"`
	DrainSeconds    float64                `json:"drainSeconds"`
	Violations      []violation            `json:"violations"`
	RefusedDeposed  []string               `json:"refusedDeposedWrites,omitempty"`
	// LateDeposed are writes a leader's fence let through before its successor acquired the
	// Lease that arrived after (the process was frozen in between).
	LateDeposed    []string `json:"lateDeposedWrites,omitempty"`
	InjectedFailed []string `json:"snapshotsFailedAsInjected,omitempty"`
	// NeverBound are pre-provisioned contents whose snapshot was deleted before it was bound.
	NeverBound     []string `json:"preProvisionedNeverBound,omitempty"`
	WorkloadErrors []string `json:"workloadErrors,omitempty"`
	LeaderTerms    int      `json:"leaderTerms"`
	FaultLog       []*fault `json:"faultLog"`
}

// runChaos runs one chaos run and returns its report; err is for the harness failing, not
// for invariant violations.
func runChaos(ctx context.Context, cfg config) (rep *report, err error) {
	e := &env{keep: cfg.Keep, log: cfg.Log}
	defer e.tearDown()
	if err := setUp(ctx, e); err != nil {
		e.keep = true
		return nil, err
	}
	w := newWorkload(e, cfg.Seed, cfg.N, cfg.Duration)
	if err := w.prepare(ctx); err != nil {
		return nil, err
	}
	skip := map[string]bool{}
	rep = &report{Seed: cfg.Seed, N: cfg.N, Duration: cfg.Duration.String(), Faults: map[string]*kindReport{}}
	if e.disk == "" {
		skip["disk-full"] = true
		rep.Skipped = append(rep.Skipped, "disk-full (not root, or no tmpfs)")
	}
	lanes := schedule(cfg.Seed, cfg.Duration, cfg.PerKind, skip)
	lctx, stopLeases := context.WithCancel(ctx)
	defer stopLeases()
	terms := e.watchLeases(lctx)
	e.log("workload: %d snapshots over %s; %d fault kinds x %d", cfg.N, cfg.Duration, len(faultKinds)-len(skip), cfg.PerKind)
	done := make(chan struct{})
	go func() { w.run(ctx); close(done) }()
	e.inject(ctx, lanes)
	<-done
	lastFault := time.Now()
	if err := e.allRunning(ctx); err != nil {
		return nil, err
	}
	e.log("faults and workload done; waiting for convergence (up to %s)", cfg.Converge)
	violations, took := e.converge(ctx, w, cfg.Converge)
	convergedAt := lastFault.Add(took)
	rep.Converged = len(violations) == 0
	rep.ConvergeSeconds = convergedAt.Sub(lastFaultEnd(lanes, lastFault)).Seconds()
	rep.tally(lanes, convergedAt)
	more, err := e.afterChecks(ctx, rep, terms)
	if err != nil {
		return nil, err
	}
	violations = append(violations, more...)
	e.log("drain: deleting every snapshot and group")
	start := time.Now()
	if err := w.deleteAll(ctx); err != nil {
		return nil, err
	}
	drained, took := e.converge(ctx, w, cfg.Converge)
	rep.DrainSeconds = took.Seconds()
	for _, v := range drained {
		v.Invariant = "after drain: " + v.Invariant
		violations = append(violations, v)
	}
	e.log("drained in %.1fs", time.Since(start).Seconds())
	rep.Violations = violations
	rep.Operations = w.ops
	rep.WorkloadErrors = w.errs
	if len(violations) > 0 {
		e.keep = true
	}
	return rep, nil
}

// converge waits until the state satisfies every invariant or timeout passes, and returns the
// violations left and the time it took.
func (e *env) converge(ctx context.Context, w *workload, timeout time.Duration) ([]violation, time.Duration) {
	start := time.Now()
	var last []violation
	for {
		s, err := e.read(ctx)
		if err == nil {
			if last = w.check(s); len(last) == 0 {
				return nil, time.Since(start)
			}
		} else {
			last = []violation{{Invariant: "state readable", Detail: err.Error()}}
		}
		if time.Since(start) > timeout || ctx.Err() != nil {
			return last, time.Since(start)
		}
		_ = pause(ctx, time.Second)
	}
}

// print writes the report's table.
func (r *report) print(out io.Writer) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "chaos seed %d, N=%d over %s\n", r.Seed, r.N, r.Duration)
	fmt.Fprintln(tw, "fault\tinjected\tfailed\tconverged after last (s)")
	for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
		f := r.Faults[k]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\n", k, f.Injected, f.Failed, f.ConvergedAfterLast)
	}
	tw.Flush()
	fmt.Fprintf(out, "converged %v in %.1fs after the last fault; drained in %.1fs; leader terms %d; operations %v\n",
		r.Converged, r.ConvergeSeconds, r.DrainSeconds, r.LeaderTerms, r.Operations)
	if len(r.InjectedFailed) > 0 {
		fmt.Fprintf(out, "snapshots failed by an injected final error (allowed): %d\n", len(r.InjectedFailed))
	}
	if len(r.NeverBound) > 0 {
		fmt.Fprintf(out, "pre-provisioned contents never bound (snapshot deleted first; the admin's to delete): %d\n", len(r.NeverBound))
	}
	if len(r.LateDeposed) > 0 {
		fmt.Fprintf(out, "writes checked by a leader's fence before its successor started, received after: %d\n", len(r.LateDeposed))
	}
	if len(r.RefusedDeposed) > 0 {
		fmt.Fprintf(out, "writes of a deposed leader that the API server refused: %d\n", len(r.RefusedDeposed))
	}
	fmt.Fprintf(out, "violations: %d\n", len(r.Violations))
	for _, v := range r.Violations {
		objs := v.Objects
		if len(objs) > 10 {
			objs = append(objs[:10:10], fmt.Sprintf("... %d more", len(v.Objects)-10))
		}
		fmt.Fprintf(out, "  %s %s: %v\n", v.Invariant, v.Detail, objs)
	}
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// lastFaultEnd is the end of the last injected fault, or fallback when none was.
func lastFaultEnd(lanes map[string][]*fault, fallback time.Time) time.Time {
	var last time.Time
	for _, fs := range lanes {
		for _, f := range fs {
			if f.Injected && f.Ended.After(last) {
				last = f.Ended
			}
		}
	}
	if last.IsZero() {
		return fallback
	}
	return last
}

// tally counts the faults per kind and the time from each kind's last one to convergence.
func (r *report) tally(lanes map[string][]*fault, convergedAt time.Time) {
	for _, fs := range lanes {
		for _, f := range fs {
			kr := r.Faults[f.Kind]
			if kr == nil {
				kr = &kindReport{}
				r.Faults[f.Kind] = kr
			}
			r.FaultLog = append(r.FaultLog, f)
			if !f.Injected {
				kr.Failed++
				continue
			}
			after := convergedAt.Sub(f.Ended).Seconds()
			if kr.Injected == 0 || after < kr.ConvergedAfterLast { // the kind's last injection
				kr.ConvergedAfterLast = after
			}
			kr.Injected++
		}
	}
	sort.Slice(r.FaultLog, func(i, j int) bool { return r.FaultLog[i].Started.Before(r.FaultLog[j].Started) })
}

// afterChecks are the invariants read from the harness's own records: the CSI proxy's log of
// CreateSnapshot answers and the audit log against the Lease history.
func (e *env) afterChecks(ctx context.Context, rep *report, terms *leases) ([]violation, error) {
	var violations []violation
	if s, err := e.read(ctx); err == nil {
		rep.InjectedFailed = s.failed
		s.contentChecks()
		rep.NeverBound = s.unbound
	}
	for name, ids := range e.csi.duplicates() {
		violations = append(violations, violation{Invariant: "at most one backend snapshot per content",
			Objects: append([]string{"CreateSnapshot " + name}, ids...)})
	}
	history := terms.history()
	rep.LeaderTerms = len(history)
	accepted, refused, late, err := deposedWrites(filepath.Join(e.cluster.Dir, "audit.log"), history)
	if err != nil {
		return nil, err
	}
	if len(accepted) > 0 {
		violations = append(violations, violation{Invariant: "no API write from a deposed leader", Objects: accepted})
	}
	rep.RefusedDeposed = refused
	rep.LateDeposed = late
	return violations, nil
}
