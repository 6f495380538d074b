package main

// The scale benchmark, `make bench-scale`: N snapshots of N/100 claims created in waves (one
// snapshot per claim per wave, the way a backup product takes them), all kept, with each wave's
// figures measured as N grows; then both components restarted with all N present, a new snapshot
// timed to ready; then 1,000 SnapshotSchedules added and one more wave measured; then everything
// deleted in waves. The same runs for upstream's external-snapshotter at N=5,000 in the same
// invocation, after 500 snapshots at once on each side at equal QPS flags.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// scaleOptions are the scale benchmark's settings.
type scaleOptions struct {
	// wave is the number of snapshots per wave; 0 means N/100 (one per claim).
	wave int
	// checkpoints are the numbers of snapshots at which a wave's requests are kept.
	checkpoints []int
	// atOnce is the size of the burst created at once on each side.
	atOnce int
	// upstreamN is N for upstream's side; 0 skips it.
	upstreamN int
	// schedules is the number of SnapshotSchedules present during the schedule wave.
	schedules int
	// plot is the PNG written beside the JSON.
	plot string
	// skipShutter runs upstream's side only.
	skipShutter bool
	// fill writes the snapshots between the measured waves straight into the API (fill.go).
	fill bool
}

// upstreamVersion is the external-snapshotter release hack/tools/snapshotter pins.
const upstreamVersion = "v8.6.0"

func (s *scaleOptions) addFlags(waves *bool) {
	flag.BoolVar(waves, "waves", false, "the scale benchmark (make bench-scale): N snapshots in waves, kept, restart, delete; upstream beside")
	flag.IntVar(&s.wave, "wave", 0, "with -waves: snapshots per wave (default N/100, one per claim)")
	flag.Func("checkpoints", "with -waves: comma-separated snapshot counts whose waves keep their request counts (default 1000,5000,10000,20000,50000 up to N, and N)", func(v string) error {
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return err
			}
			s.checkpoints = append(s.checkpoints, n)
		}
		return nil
	})
	flag.IntVar(&s.atOnce, "at-once", 500, "with -waves: snapshots created at once on each side before the waves (0 skips)")
	flag.IntVar(&s.upstreamN, "upstream-n", 5000, "with -waves: N for upstream "+upstreamVersion+" (0 skips upstream)")
	flag.IntVar(&s.schedules, "schedules", 1000, "with -waves: SnapshotSchedules present during one more wave (0 skips)")
	flag.StringVar(&s.plot, "plot", "", "with -waves: PNG plot (default the JSON's path with .png)")
	flag.BoolVar(&s.skipShutter, "upstream-only", false, "with -waves: measure upstream's side only")
	flag.BoolVar(&s.fill, "fill", false, "with -waves: measure every wave up to 1,000 and the wave reaching each checkpoint; write the snapshots in between straight into the API with the components stopped")
}

// complete fills the defaults that depend on N.
func (s *scaleOptions) complete(o *options) error {
	if o.scale {
		return fmt.Errorf("-waves and -scale do not go together")
	}
	if o.n <= 0 {
		o.n = 50000
	}
	if s.wave <= 0 {
		s.wave = max(o.n/100, 10)
	}
	if len(s.checkpoints) == 0 {
		for _, c := range []int{1000, 5000, 10000, 20000, 50000} {
			if c < o.n {
				s.checkpoints = append(s.checkpoints, c)
			}
		}
	}
	s.checkpoints = append(s.checkpoints, o.n)
	o.claims = max(s.wave, s.atOnce)
	// Both sides get the same QPS flags, Shutter's defaults unless given.
	if o.qps == 0 && o.burst == 0 {
		o.qps, o.burst = 100, 200
	}
	if o.out == "" {
		o.out = filepath.Join(os.TempDir(), "shutter-bench-scale-"+time.Now().Format("20060102-150405")+".json")
	}
	if s.plot == "" {
		s.plot = strings.TrimSuffix(o.out, ".json") + ".png"
	}
	return nil
}

// scaleResults is the scale benchmark's JSON file.
type scaleResults struct {
	Started  time.Time      `json:"started"`
	Finished time.Time      `json:"finished"`
	Options  map[string]any `json:"options"`
	Machine  map[string]any `json:"machine"`
	Sides    []*sideResult  `json:"sides"`
	Warnings []string       `json:"warnings,omitempty"`
}

// sideResult is what one implementation measured.
type sideResult struct {
	Name string `json:"name"`
	N    int    `json:"n"`
	Wave int    `json:"wave"`
	// AtOnce and AtOnceDelete are the burst of snapshots created at once, and its deletion.
	AtOnce       *Phase `json:"atOnce,omitempty"`
	AtOnceDelete *Phase `json:"atOnceDelete,omitempty"`
	// Create and Delete are every wave, in order.
	Create []*wave `json:"create"`
	Delete []*wave `json:"delete"`
	// Restart is the restart of both components with all N present.
	Restart map[string]float64 `json:"restart,omitempty"`
	// Starts are the components' starts after each -fill, with the snapshots then present.
	Starts []map[string]float64 `json:"starts,omitempty"`
	// Schedules is the wave taken with the SnapshotSchedules present, and the one before it.
	Schedules *scheduleResult `json:"schedules,omitempty"`
	// Stuck times `kubectl shutter stuck -A` with all N present (Shutter's side).
	Stuck map[string]float64 `json:"stuck,omitempty"`
}

func runScale(ctx context.Context, o options) error {
	res := &scaleResults{Started: time.Now(), Options: map[string]any{
		"n": o.n, "wave": o.sc.wave, "checkpoints": o.sc.checkpoints, "atOnce": o.sc.atOnce, "upstreamN": o.sc.upstreamN,
		"schedules": o.sc.schedules, "qps": o.qps, "burst": o.burst, "v": o.verbosity, "fill": o.sc.fill,
	}}
	var sides []options
	if !o.sc.skipShutter {
		sides = append(sides, o)
	}
	if o.sc.upstreamN > 0 {
		up := o
		up.upstream, up.n = true, min(o.sc.upstreamN, o.n)
		up.sc.schedules = 0 // upstream has no schedules
		up.sc.checkpoints = slices.DeleteFunc(slices.Clone(o.sc.checkpoints), func(c int) bool { return c > up.n })
		if !slices.Contains(up.sc.checkpoints, up.n) {
			up.sc.checkpoints = append(up.sc.checkpoints, up.n)
		}
		sides = append(sides, up)
	}
	for _, so := range sides {
		side, machine, warnings, err := runSide(ctx, so)
		if side != nil {
			res.Sides = append(res.Sides, side)
		}
		res.Warnings = append(res.Warnings, warnings...)
		if res.Machine == nil {
			res.Machine = machine
		}
		if err != nil {
			_ = writeScale(res, o)
			return fmt.Errorf("%s: %w", sideName(so), err)
		}
	}
	res.Finished = time.Now()
	if err := writeScale(res, o); err != nil {
		return err
	}
	printScale(os.Stdout, res)
	fmt.Printf("\nresults: %s\nplot: %s\n", o.out, o.sc.plot)
	return nil
}

func sideName(o options) string {
	if o.upstream {
		return "upstream " + upstreamVersion
	}
	return "shutter"
}

// runSide runs the whole sequence for one implementation on a control plane of its own.
func runSide(ctx context.Context, o options) (side *sideResult, machine map[string]any, warnings []string, err error) {
	b := &bench{opts: o}
	defer b.cleanup()
	side = &sideResult{Name: sideName(o), N: o.n, Wave: o.sc.wave}
	b.progress("%s: N=%d in waves of %d", side.Name, o.n, o.sc.wave)
	if err := b.setUp(ctx); err != nil {
		return side, nil, b.warnings, err
	}
	machine = b.machine()
	err = b.scaleSequence(ctx, side)
	return side, machine, b.warnings, err
}

// scaleSequence is one side's run: the burst, the waves up, the restart, the schedule wave and
// the waves down.
func (b *bench) scaleSequence(ctx context.Context, side *sideResult) error {
	var err error
	if n := b.opts.sc.atOnce; n > 0 {
		names, claims := make([]string, n), make([]string, n)
		for i := range names {
			names[i], claims[i] = fmt.Sprintf("at-once-%05d", i), claimName(i)
		}
		b.progress("%s: %d snapshots at once", side.Name, n)
		if side.AtOnce, err = b.createPhase(ctx, names, claims); err != nil {
			return err
		}
		if side.AtOnceDelete, err = b.deletePhase(ctx, names); err != nil {
			return err
		}
	}
	var names []string
	if side.Create, names, err = b.wavesUp(ctx, side); err != nil {
		return err
	}
	b.progress("%s: restart controller and sidecar with %d snapshots present", side.Name, len(names))
	if side.Restart, err = b.restartBoth(ctx, len(names)); err != nil {
		return err
	}
	if !b.opts.upstream {
		if side.Stuck, err = b.timeStuck(ctx); err != nil {
			return err
		}
	}
	if b.opts.sc.schedules > 0 {
		var more []string
		if side.Schedules, more, err = b.scheduleWave(ctx, side.Create[len(side.Create)-1], len(side.Create)); err != nil {
			return err
		}
		names = append(names, more...)
	}
	side.Delete, err = b.wavesDown(ctx, side, names)
	return err
}

func writeScale(res *scaleResults, o options) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.out, data, 0o644); err != nil {
		return err
	}
	return plotScale(res, o.sc.plot)
}
