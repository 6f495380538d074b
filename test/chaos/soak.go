package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// soakConfig is one soak run.
type soakConfig struct {
	Duration time.Duration
	Rate     float64
	Seed     uint64
	Keep     bool
	Log      func(format string, args ...any)
}

// sample is one measurement of one component.
type sample struct {
	At         float64 `json:"t"` // seconds since the start
	RSSMiB     float64 `json:"rssMiB"`
	Goroutines float64 `json:"goroutines"`
	FDs        float64 `json:"fds"`
	Depth      float64 `json:"workqueueDepth"`
	Retries    float64 `json:"workqueueRetries"`
}

// trend is a linear fit of one series after warm-up, and whether it passed.
type trend struct {
	Mean     float64 `json:"mean"`
	PerHour  float64 `json:"slopePerHour"`
	Rise     float64 `json:"riseOverWindow"`
	Allowed  float64 `json:"allowedRise"`
	Max      float64 `json:"max"`
	Pass     bool    `json:"pass"`
	Measured int     `json:"samples"`
}

// soakReport is the outcome of a soak run.
type soakReport struct {
	Duration  string                      `json:"duration"`
	Rate      float64                     `json:"rate"`
	Created   int64                       `json:"created"`
	Deleted   int64                       `json:"deleted"`
	Errors    int64                       `json:"workloadErrors"`
	Interval  string                      `json:"interval"`
	Samples   map[string][]sample         `json:"samples"`
	Trends    map[string]map[string]trend `json:"trends"`
	Failures  []string                    `json:"failures"`
	Leftovers []violation                 `json:"leftovers,omitempty"`
	// Drained is each component's workqueue depth once the churn's objects are gone.
	Drained map[string]float64 `json:"drainedDepth,omitempty"`
}

// drainBy is how long after the churn's objects are gone a queue may still hold work, and
// queueTrendFrom the shortest soak whose queue depth's slope is judged: in a few minutes on a
// machine whose cores other work takes, a sidecar falls behind and catches up again (a backlog of
// 200 over two minutes beside other test packages, none alone), which is no leak; a queue that
// never drains is one.
const (
	drainBy        = time.Minute
	queueTrendFrom = 10 * time.Minute
)

func (r *soakReport) failed() bool { return len(r.Failures) > 0 }

// runSoak churns snapshots at cfg.Rate: each is created, waited for until ready and deleted.
func runSoak(ctx context.Context, cfg soakConfig) (*soakReport, error) {
	e := &env{keep: cfg.Keep, log: cfg.Log}
	defer e.tearDown()
	if err := setUp(ctx, e); err != nil {
		e.keep = true
		return nil, err
	}
	w := newWorkload(e, cfg.Seed, 0, time.Second)
	if err := w.prepare(ctx); err != nil {
		return nil, err
	}
	interval := time.Minute
	if cfg.Duration < 10*time.Minute {
		interval = 10 * time.Second
	}
	rep := &soakReport{Duration: cfg.Duration.String(), Rate: cfg.Rate, Interval: interval.String(),
		Samples: map[string][]sample{}, Trends: map[string]map[string]trend{}}
	e.log("soak: %.1f snapshots/s for %s, sampling every %s", cfg.Rate, cfg.Duration, interval)
	sctx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var created, deleted, errs atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() { churn(sctx, e, cfg.Rate, &created, &deleted, &errs) })
	start := time.Now()
	scrapeErrs := map[string]string{}
	for {
		for name, addr := range e.stack.Endpoints {
			s, err := measure(e, name, addr, start)
			if err != nil {
				scrapeErrs[name] = err.Error()
				continue
			}
			rep.Samples[name] = append(rep.Samples[name], s)
		}
		if pause(sctx, interval) != nil {
			break
		}
	}
	wg.Wait()
	rep.Created, rep.Deleted, rep.Errors = created.Load(), deleted.Load(), errs.Load()
	for name, msg := range scrapeErrs {
		rep.Failures = append(rep.Failures, name+": "+msg)
	}
	rep.evaluate(cfg.Duration)
	// Whatever the churn left must still go: nothing stuck, nothing leaked.
	left, _ := e.converge(ctx, w, 2*time.Minute)
	rep.Leftovers = left
	if len(left) > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d invariants broken after the churn", len(left)))
		e.keep = true
	}
	rep.Failures = append(rep.Failures, rep.drain(ctx, e, start)...)
	return rep, nil
}

// drain waits, up to drainBy, until every component's workqueue holds no more than the depth a
// soak's queue may rise by, and says which did not get there.
func (r *soakReport) drain(ctx context.Context, e *env, start time.Time) []string {
	limit := limits["workqueueDepth"].abs
	r.Drained = map[string]float64{}
	deadline := time.Now().Add(drainBy)
	for {
		var busy []string
		for name, addr := range e.stack.Endpoints {
			s, err := measure(e, name, addr, start)
			if err != nil {
				busy = append(busy, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			r.Drained[name] = s.Depth
			if s.Depth > limit {
				busy = append(busy, fmt.Sprintf("%s workqueueDepth is %.0f %s after the churn (allowed %.0f)", name, s.Depth, drainBy, limit))
			}
		}
		if len(busy) == 0 || time.Now().After(deadline) {
			sort.Strings(busy)
			return busy
		}
		if pause(ctx, 5*time.Second) != nil {
			return busy
		}
	}
}

// churn creates a snapshot every 1/rate s, at most 100 at a time; each is deleted once ready.
func churn(ctx context.Context, e *env, rate float64, created, deleted, errs *atomic.Int64) {
	sem := make(chan struct{}, 100)
	every := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i++ {
		next = next.Add(every)
		if pause(ctx, time.Until(next)) != nil {
			return
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		name := fmt.Sprintf("k%07d", i)
		claim := sourceClaims[i%len(sourceClaims)].name
		wg.Go(func() {
			defer func() { <-sem }()
			// The churn's own calls must finish even when the soak's time is up.
			ctx := context.WithoutCancel(ctx)
			if err := e.createSnapshot(ctx, name, claim, classDelete); err != nil {
				errs.Add(1)
				return
			}
			created.Add(1)
			if _, err := e.readyHandle(ctx, name, 2*time.Minute); err != nil {
				errs.Add(1)
			}
			if err := e.deleteSnapshot(ctx, name); err != nil {
				errs.Add(1)
				return
			}
			deleted.Add(1)
		})
	}
}

// measure reads one component's RSS and descriptors from /proc and its goroutines, workqueue
// depth and retries from its /metrics.
func measure(e *env, name, addr string, start time.Time) (sample, error) {
	var pid int
	for _, p := range e.stack.Processes() {
		if p.Name == name {
			pid = p.Pid()
		}
	}
	if pid == 0 {
		return sample{}, fmt.Errorf("not running")
	}
	s := sample{At: time.Since(start).Seconds(), RSSMiB: rssMiB(pid)}
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		s.FDs = float64(len(fds))
	}
	metrics, err := scrape("http://" + addr + "/metrics")
	if err != nil {
		return sample{}, err
	}
	if _, ok := metrics["go_goroutines"]; !ok {
		return sample{}, fmt.Errorf("no go_goroutines in its /metrics")
	}
	s.Goroutines, s.Depth, s.Retries = metrics["go_goroutines"], metrics["workqueue_depth"], metrics["workqueue_retries_total"]
	return s, nil
}

func rssMiB(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// scrape sums each metric's samples over their labels.
func scrape(url string) (map[string]float64, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "{")
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err == nil {
			out[name] += v
		}
	}
	return out, sc.Err()
}

// limits are the allowed rise of each series over the measured window: the larger of an
// absolute amount and a share of its mean.
var limits = map[string]struct{ abs, rel float64 }{
	"rssMiB": {16, 0.15}, "goroutines": {20, 0.10}, "fds": {10, 0.10}, "workqueueDepth": {50, 0.5},
}

// evaluate fits each series after warm-up (the first quarter) and records what failed.
func (r *soakReport) evaluate(duration time.Duration) {
	warm := duration.Seconds() / 4
	names := make([]string, 0, len(r.Samples))
	for name := range r.Samples {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		var ts []float64
		series := map[string][]float64{}
		var retries []sample
		for _, s := range r.Samples[name] {
			if s.At < warm {
				continue
			}
			ts = append(ts, s.At)
			series["rssMiB"] = append(series["rssMiB"], s.RSSMiB)
			series["goroutines"] = append(series["goroutines"], s.Goroutines)
			series["fds"] = append(series["fds"], s.FDs)
			series["workqueueDepth"] = append(series["workqueueDepth"], s.Depth)
			retries = append(retries, s)
		}
		if len(ts) < 3 {
			r.Failures = append(r.Failures, fmt.Sprintf("%s: %d samples after warm-up, need 3", name, len(ts)))
			continue
		}
		r.Trends[name] = map[string]trend{}
		for metric, ys := range series {
			if metric == "workqueueDepth" && duration < queueTrendFrom {
				continue // judged by drain instead
			}
			t := fit(ts, ys)
			lim := limits[metric]
			t.Allowed = math.Max(lim.abs, lim.rel*t.Mean)
			t.Pass = t.Rise <= t.Allowed
			r.Trends[name][metric] = t
			if !t.Pass {
				r.Failures = append(r.Failures, fmt.Sprintf("%s %s rises %.1f over the window (allowed %.1f)", name, metric, t.Rise, t.Allowed))
			}
		}
		if msg := retryCreep(retries); msg != "" {
			r.Failures = append(r.Failures, name+": "+msg)
		}
	}
}

// fit is an ordinary least-squares line through (ts, ys).
func fit(ts, ys []float64) trend {
	n := float64(len(ts))
	var st, sy, stt, sty, maxY float64
	for i := range ts {
		st, sy, stt, sty = st+ts[i], sy+ys[i], stt+ts[i]*ts[i], sty+ts[i]*ys[i]
		maxY = math.Max(maxY, ys[i])
	}
	slope := 0.0
	if d := n*stt - st*st; d != 0 {
		slope = (n*sty - st*sy) / d
	}
	window := ts[len(ts)-1] - ts[0]
	return trend{Mean: sy / n, PerHour: slope * 3600, Rise: slope * window, Max: maxY, Measured: len(ts)}
}

// retryCreep fails when the retry rate of the last third is above twice the first third's
// and more than one retry every two seconds.
func retryCreep(s []sample) string {
	third := len(s) / 3
	if third < 1 {
		return ""
	}
	rate := func(a, b sample) float64 {
		if b.At == a.At {
			return 0
		}
		return (b.Retries - a.Retries) / (b.At - a.At)
	}
	first, last := rate(s[0], s[third]), rate(s[len(s)-1-third], s[len(s)-1])
	if last > 2*first && last > 0.5 {
		return fmt.Sprintf("retries creep up: %.2f/s at the start, %.2f/s at the end", first, last)
	}
	return ""
}

func (r *soakReport) print(out io.Writer) {
	fmt.Fprintf(out, "soak %s at %.1f/s (sampled every %s): %d created, %d deleted, %d workload errors\n",
		r.Duration, r.Rate, r.Interval, r.Created, r.Deleted, r.Errors)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "component\tmetric\tmean\tmax\tslope/h\trise\tallowed\tpass")
	for _, name := range slices.Sorted(maps.Keys(r.Trends)) {
		for _, metric := range []string{"rssMiB", "goroutines", "fds", "workqueueDepth"} {
			t, ok := r.Trends[name][metric]
			if !ok && metric == "workqueueDepth" {
				continue // a short soak's queues are judged by drain
			}
			fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%v\n", name, metric, t.Mean, t.Max, t.PerHour, t.Rise, t.Allowed, t.Pass)
		}
	}
	tw.Flush()
	if len(r.Drained) > 0 {
		fmt.Fprint(out, "workqueue depth after the churn:")
		for _, name := range slices.Sorted(maps.Keys(r.Drained)) {
			fmt.Fprintf(out, " %s %.0f", name, r.Drained[name])
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "failures: %d\n", len(r.Failures))
	for _, f := range r.Failures {
		fmt.Fprintln(out, "  "+f)
	}
}
