// Command e2e is `make bench-e2e`: the end-to-end snapshot benchmark. On a local control plane
// with an audit policy it installs Shutter's chart, runs snapshot-controller, csi-snapshotter and
// the hostpath driver as processes with the chart's ServiceAccount tokens, binds N claims to
// driver volumes, then per run creates N VolumeSnapshots at once, waits until all are readyToUse,
// deletes them all and waits until snapshots, contents and backend snapshots are gone. Each phase
// reports wall time, latencies, API requests per snapshot by component (from the audit log),
// conflicts, CPU seconds of every process and peak RSS. With -scale it also restarts the
// controller with all snapshots present and times one new snapshot to readyToUse.
//
//	go run ./test/bench/e2e [-n N] [-runs R] [-qps Q -burst B] [-scale] [-out FILE] [-keep]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

type options struct {
	n, runs    int
	qps        float64
	burst      int
	scale      bool
	out        string
	keep       bool
	verbosity  int
	concurrent int
	// controllerFlags are appended to the controller's arguments.
	controllerFlags []string
	// controllerEnv is added to the controller's environment.
	controllerEnv []string
	// claims is the number of claims to bind; 0 means n.
	claims int
	// upstream runs upstream's snapshot-controller and csi-snapshotter instead of Shutter's.
	upstream bool
	// waves selects the scale benchmark (scale.go) and holds its settings.
	waves bool
	sc    scaleOptions
}

// results is the JSON file.
type results struct {
	Started  time.Time            `json:"started"`
	Options  map[string]any       `json:"options"`
	Machine  map[string]any       `json:"machine"`
	Runs     []runResult          `json:"runs"`
	Figures  []map[string]float64 `json:"figures"`
	Summary  map[string]stat      `json:"summary"`
	Warnings []string             `json:"warnings,omitempty"`
}

type runResult struct {
	Phases  []*Phase           `json:"phases"`
	Restart map[string]float64 `json:"restart,omitempty"`
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 0, "snapshots created at once (default 200, or 5000 with -scale)")
	flag.IntVar(&o.runs, "runs", 1, "runs; with more than one, medians and ranges are reported")
	flag.Float64Var(&o.qps, "qps", 0, "--kube-api-qps for controller and sidecar (0: their defaults)")
	flag.IntVar(&o.burst, "burst", 0, "--kube-api-burst for controller and sidecar (0: their defaults)")
	flag.BoolVar(&o.scale, "scale", false, "also restart the controller with all snapshots present and time a new one")
	flag.StringVar(&o.out, "out", "", "JSON results file (default $TMPDIR/shutter-bench-e2e-<time>.json)")
	flag.BoolVar(&o.keep, "keep", false, "keep the state folder (logs, audit log)")
	flag.IntVar(&o.verbosity, "v", 2, "klog level of the components (the chart's default is 2)")
	flag.IntVar(&o.concurrent, "concurrency", 100, "parallel create and delete calls of the benchmark's client")
	flag.Func("controller-flag", "an extra snapshot-controller flag, e.g. -controller-flag=--profiling (repeatable)", func(v string) error {
		o.controllerFlags = append(o.controllerFlags, v)
		return nil
	})
	flag.Func("controller-env", "an extra NAME=value environment pair for the snapshot-controller, e.g. GOGC=25 (repeatable)", func(v string) error {
		o.controllerEnv = append(o.controllerEnv, v)
		return nil
	})
	o.sc.addFlags(&o.waves)
	flag.Parse()
	if o.waves {
		if err := o.sc.complete(&o); err != nil {
			fmt.Fprintf(os.Stderr, "bench-scale: %v\n", err)
			os.Exit(2)
		}
	}
	if o.n <= 0 {
		o.n = 200
		if o.scale {
			o.n = 5000
		}
	}
	if o.out == "" {
		o.out = filepath.Join(os.TempDir(), "shutter-bench-e2e-"+time.Now().Format("20060102-150405")+".json")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	runner := run
	if o.waves {
		runner = runScale
	}
	if err := runner(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "bench-e2e: FAILED: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	b := &bench{opts: o}
	res := &results{Started: time.Now(), Options: map[string]any{
		"n": o.n, "runs": o.runs, "qps": o.qps, "burst": o.burst, "scale": o.scale, "v": o.verbosity,
	}}
	defer b.cleanup()
	if err := b.setUp(ctx); err != nil {
		return err
	}
	res.Machine = b.machine()
	for r := range o.runs {
		rr, err := b.oneRun(ctx, r)
		if err != nil {
			return fmt.Errorf("run %d: %w", r+1, err)
		}
		res.Runs = append(res.Runs, rr)
		figs := map[string]float64{}
		for _, p := range rr.Phases {
			p.figures(figs)
		}
		for k, v := range rr.Restart {
			figs["restart."+k] = v
		}
		res.Figures = append(res.Figures, figs)
	}
	res.Summary = summarize(res.Figures)
	res.Warnings = b.warnings
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.out, data, 0o644); err != nil {
		return err
	}
	b.printHeader(res)
	printTable(os.Stdout, res.Summary, o.runs)
	fmt.Printf("\nresults: %s\n", o.out)
	return nil
}

// oneRun creates and deletes N snapshots (and with -scale restarts the controller in between).
func (b *bench) oneRun(ctx context.Context, r int) (runResult, error) {
	var rr runResult
	names, claims := make([]string, b.opts.n), make([]string, b.opts.n)
	for i := range names {
		names[i], claims[i] = fmt.Sprintf("snap-r%d-%05d", r+1, i), claimName(i)
	}
	b.progress("run %d/%d: create %d VolumeSnapshots at once", r+1, b.opts.runs, b.opts.n)
	created, err := b.createPhase(ctx, names, claims)
	if err != nil {
		return rr, err
	}
	rr.Phases = append(rr.Phases, created)
	if b.opts.scale {
		b.progress("run %d/%d: restart the controller with %d snapshots present, time a new one", r+1, b.opts.runs, b.opts.n)
		if rr.Restart, err = b.restartPhase(ctx, r); err != nil {
			return rr, err
		}
	}
	b.progress("run %d/%d: delete them all", r+1, b.opts.runs)
	deleted, err := b.deletePhase(ctx, names)
	if err != nil {
		return rr, err
	}
	rr.Phases = append(rr.Phases, deleted)
	return rr, nil
}

func (b *bench) printHeader(res *results) {
	fmt.Printf("\nShutter end-to-end snapshot benchmark: N=%d, runs=%d, scale=%v\n", b.opts.n, b.opts.runs, b.opts.scale)
	fmt.Printf("controller args %v; sidecar args %v\n", b.controllerArgs(), b.sidecarArgs())
	fmt.Printf("machine: %v\n", res.Machine)
	fmt.Println("per snapshot = divided by N; writes count the benchmark's own create/delete, the controller's and the")
	fmt.Println("sidecar's (Lease renewals apart); medians over runs, [min .. max] with more than one run")
	for _, w := range b.warnings {
		fmt.Printf("WARNING: %s\n", w)
	}
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-e2e: %s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
