// Command chaos runs Shutter's chaos and soak suites against a local control plane with the
// real components (two snapshot-controllers with leader election, the sidecar, the hostpath
// driver) and the chart's RBAC. `make chaos` injects a seeded schedule of faults into a steady
// snapshot workload and checks the invariants once it converges; `make soak` churns snapshots
// for a long time and checks that memory, goroutines and descriptors stay flat.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	mode := flag.String("mode", "chaos", "chaos or soak")
	n := flag.Int("n", 500, "chaos: snapshots created over the run")
	seed := flag.Uint64("seed", 1, "seed of the workload and the fault schedule")
	duration := flag.Duration("duration", 10*time.Minute, "how long the workload and the faults (or the soak) last")
	per := flag.Int("faults", 0, "chaos: injections of each fault kind (0: one per 50 s of duration, at least 1)")
	converge := flag.Duration("converge", 2*time.Minute, "chaos: deadline of the convergence after the last fault")
	rate := flag.Float64("rate", 5, "soak: snapshots created (and deleted) per second")
	out := flag.String("json", "", "write the JSON report here")
	keep := flag.Bool("keep", false, "keep the state folder and the logs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	var rep interface{ failed() bool }
	var err error
	switch *mode {
	case "chaos":
		if *per == 0 {
			*per = max(1, int(*duration/(50*time.Second)))
		}
		var r *report
		r, err = runChaos(ctx, config{N: *n, Seed: *seed, Duration: *duration, PerKind: *per, Converge: *converge, Keep: *keep, Log: logf})
		if r != nil {
			r.print(os.Stdout)
			rep = r
		}
	case "soak":
		var r *soakReport
		r, err = runSoak(ctx, soakConfig{Duration: *duration, Rate: *rate, Seed: *seed, Keep: *keep, Log: logf})
		if r != nil {
			r.print(os.Stdout)
			rep = r
		}
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err == nil && *out != "" {
		err = writeJSON(*out, rep)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if rep.failed() {
		os.Exit(1)
	}
}

func (r *report) failed() bool { return len(r.Violations) > 0 }
