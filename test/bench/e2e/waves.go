package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/shutter-csi/shutter/test/stack"
)

// wave is what one wave of creates (or deletes) measured.
type wave struct {
	Phase string `json:"phase"`
	Index int    `json:"index"`
	// Snapshots is how many snapshots exist after a create wave, before a delete wave.
	Snapshots int `json:"snapshots"`
	Size      int `json:"size"`
	// Per snapshot of the wave: each snapshot's create (delete) call to ready (gone).
	WallSeconds float64 `json:"wallSeconds"`
	PerSecond   float64 `json:"snapshotsPerSecond"`
	LatencyP50  float64 `json:"latencyP50Seconds"`
	LatencyP99  float64 `json:"latencyP99Seconds"`
	// CPU milliseconds per snapshot of the wave, by process.
	CPUMsPerSnapshot map[string]float64 `json:"cpuMsPerSnapshot"`
	// RSSMiB is each component's resident memory after the wave; PeakRSSMiB its peak during it.
	RSSMiB     map[string]float64 `json:"rssMiB"`
	PeakRSSMiB map[string]float64 `json:"peakRSSMiB"`
	// EtcdMiB is the size of etcd's database file after the wave.
	EtcdMiB           float64 `json:"etcdMiB"`
	WritesPerSnapshot float64 `json:"writesPerSnapshot"`
	Load              float64 `json:"load"`
	// Requests are the audit log's counts, kept for the checkpoint waves only.
	Requests []request `json:"requests,omitempty"`
}

// Process names in the figures.
const (
	procAPIServer  = "kube-apiserver"
	procEtcd       = "etcd"
	procController = "snapshot-controller"
	procSidecar    = "csi-snapshotter"
	procDriver     = "hostpath-driver"
)

// waveOf turns a measured phase into a wave's figures.
func (b *bench) waveOf(p *Phase, index, present int, checkpoint bool) *wave {
	n := float64(p.Snapshots)
	w := &wave{Phase: p.Name, Index: index, Snapshots: present, Size: p.Snapshots, WallSeconds: p.WallSeconds,
		PerSecond: p.PerSecond, LatencyP50: p.LatencyP50, LatencyP99: p.LatencyP99,
		CPUMsPerSnapshot: map[string]float64{}, RSSMiB: map[string]float64{}, PeakRSSMiB: p.PeakRSSMiB,
		EtcdMiB: b.etcdMiB(), Load: (p.LoadStart + p.LoadEnd) / 2}
	for proc, s := range p.CPUSeconds {
		w.CPUMsPerSnapshot[proc] = 1000 * s / n
	}
	for name, pid := range b.pids() {
		if name == procController || name == procSidecar || name == procDriver {
			w.RSSMiB[name] = memoryMiB(pid, "VmRSS")
		}
	}
	figs := map[string]float64{}
	p.figures(figs)
	w.WritesPerSnapshot = figs[p.Name+".writes_per_snapshot"]
	if checkpoint {
		w.Requests = p.Requests
	}
	return w
}

// etcdMiB is the size of etcd's database file.
func (b *bench) etcdMiB() float64 {
	fi, err := os.Stat(filepath.Join(b.cluster.Dir, "etcd", "member", "snap", "db"))
	if err != nil {
		return 0
	}
	return float64(fi.Size()) / (1 << 20)
}

// wavesUp creates N snapshots in waves, snapshot i of a wave from claim i, and returns the
// waves and every name. With -fill, the snapshots between the waves up to 1,000 and the wave
// that reaches each checkpoint are filled in (fill.go), and the starts after each fill go to
// side.Starts.
func (b *bench) wavesUp(ctx context.Context, side *sideResult) ([]*wave, []string, error) {
	var waves []*wave
	var all []string
	size := b.opts.sc.wave
	for index := 0; len(all) < b.opts.n; index++ {
		if gap := b.fillGap(len(all)); gap > 0 {
			names, start, err := b.fill(ctx, len(all), gap, len(all))
			if err != nil {
				return waves, all, err
			}
			all = append(all, names...)
			side.Starts = append(side.Starts, start)
		}
		count := min(size, b.opts.n-len(all))
		names, claims := make([]string, count), make([]string, count)
		for i := range names {
			names[i], claims[i] = fmt.Sprintf("w%05d-%05d", index, i), claimName(i)
		}
		p, err := b.createPhase(ctx, names, claims)
		if err != nil {
			return waves, all, fmt.Errorf("create wave %d: %w", index, err)
		}
		all = append(all, names...)
		w := b.waveOf(p, index, len(all), b.checkpoint(len(all)-count, len(all)))
		waves = append(waves, w)
		b.progressWave(side.Name, w)
	}
	return waves, all, nil
}

// fillBaseline is the number of snapshots up to which -fill measures every wave: the waves the
// flatness of the cost per snapshot is compared with.
const fillBaseline = 1000

// fillGap is how many snapshots -fill writes before the next wave, with present there: enough
// that the wave ends on the next checkpoint; none below fillBaseline or without -fill.
func (b *bench) fillGap(present int) int {
	if !b.opts.sc.fill || present < fillBaseline {
		return 0
	}
	for _, c := range slices.Sorted(slices.Values(b.opts.sc.checkpoints)) {
		if c > present {
			return max(0, c-b.opts.sc.wave-present)
		}
	}
	return 0
}

// wavesDown deletes names in waves of the wave size, newest first; filled snapshots are removed
// in one go per run of them (fill.go), and the starts after that go to side.Starts.
func (b *bench) wavesDown(ctx context.Context, side *sideResult, names []string) ([]*wave, error) {
	var waves []*wave
	size := b.opts.sc.wave
	for index := 0; len(names) > 0; index++ {
		present := len(names)
		if filled := trailingRun(names, true); filled > 0 {
			start, err := b.unfill(ctx, names[present-filled:], present)
			if err != nil {
				return waves, err
			}
			side.Starts = append(side.Starts, start)
			names = names[:present-filled]
			continue
		}
		batch := names[max(0, present-size, present-trailingRun(names, false)):]
		names = names[:present-len(batch)]
		p, err := b.deleteSome(ctx, batch, len(names))
		if err != nil {
			return waves, fmt.Errorf("delete wave %d: %w", index, err)
		}
		w := b.waveOf(p, index, present, b.checkpoint(len(names), present))
		waves = append(waves, w)
		b.progressWave(side.Name, w)
	}
	return waves, nil
}

// trailingRun is the number of snapshots at the end of names that were filled (or, with filled
// false, that were not).
func trailingRun(names []string, filled bool) int {
	n := 0
	for n < len(names) && strings.HasPrefix(names[len(names)-1-n], fillPrefix) == filled {
		n++
	}
	return n
}

// checkpoint tells whether a wave that took the snapshot count over (from, to] crosses one of
// the checkpoints.
func (b *bench) checkpoint(from, to int) bool {
	return slices.ContainsFunc(b.opts.sc.checkpoints, func(c int) bool { return c > from && c <= to })
}

func (b *bench) progressWave(side string, w *wave) {
	b.progress("%s: %s wave %d: %d snapshots, %.1f/s, p50 %.2fs p99 %.2fs, API server %.1f ms/snapshot, RSS controller %.0f sidecar %.0f MiB, etcd %.0f MiB, load %.1f",
		side, w.Phase, w.Index, w.Snapshots, w.PerSecond, w.LatencyP50, w.LatencyP99, w.CPUMsPerSnapshot[procAPIServer],
		w.RSSMiB[procController], w.RSSMiB[procSidecar], w.EtcdMiB, w.Load)
}

// restartBoth stops the controller and the sidecar gracefully and starts both again with every
// snapshot present (startBoth).
func (b *bench) restartBoth(ctx context.Context, present int) (map[string]float64, error) {
	procs := map[string]*stack.Process{procController: b.stack.Controllers[0], procSidecar: b.stack.Snapshotter}
	before := map[string]float64{}
	for name, p := range procs {
		before[name+".rss_before_mib"] = memoryMiB(p.Pid(), "VmRSS")
		p.Stop(30 * time.Second)
	}
	out, err := b.startBoth(ctx, present)
	if err != nil {
		return nil, err
	}
	for k, v := range before {
		out[k] = v
	}
	return out, nil
}

// printScale writes the checkpoint rows of every side.
func printScale(w io.Writer, res *scaleResults) {
	fmt.Fprintf(w, "\nShutter scale benchmark, %s; machine %v\n", res.Started.Format(time.RFC3339), res.Machine)
	for _, warning := range res.Warnings {
		fmt.Fprintf(w, "WARNING: %s\n", warning)
	}
	for _, side := range res.Sides {
		fmt.Fprintf(w, "\n%s: N=%d, waves of %d\n", side.Name, side.N, side.Wave)
		if p := side.AtOnce; p != nil {
			fmt.Fprintf(w, "  %d at once: all ready in %.1fs (p50 %.1fs), API server %.1f ms/snapshot, %.1f writes/snapshot\n",
				p.Snapshots, p.WallSeconds, p.LatencyP50, 1000*p.CPUSeconds[procAPIServer]/float64(p.Snapshots), writesOf(p))
		}
		fmt.Fprintf(w, "  %-7s %9s %5s %8s %8s %8s %10s %10s %10s %9s %9s %8s %6s\n", "phase", "snapshots", "wave", "per s",
			"p50 s", "p99 s", "apisrv ms", "ctrl ms", "sidecar ms", "ctrl MiB", "side MiB", "etcd MiB", "load")
		for _, wv := range append(slices.Clone(side.Create), side.Delete...) {
			if wv.Requests == nil && wv.Index != 0 {
				continue
			}
			fmt.Fprintf(w, "  %-7s %9d %5d %8.1f %8.2f %8.2f %10.1f %10.1f %10.1f %9.0f %9.0f %8.0f %6.1f\n", wv.Phase, wv.Snapshots,
				wv.Index, wv.PerSecond, wv.LatencyP50, wv.LatencyP99, wv.CPUMsPerSnapshot[procAPIServer],
				wv.CPUMsPerSnapshot[procController], wv.CPUMsPerSnapshot[procSidecar], wv.RSSMiB[procController],
				wv.RSSMiB[procSidecar], wv.EtcdMiB, wv.Load)
		}
		for _, r := range side.Starts {
			fmt.Fprintf(w, "  start with %.0f present after a fill: new snapshot ready after %.2fs; peak RSS controller %.0f MiB, sidecar %.0f MiB\n",
				r["snapshots"], r["ready_after_restart_s"], r[procController+".peak_rss_after_restart_mib"], r[procSidecar+".peak_rss_after_restart_mib"])
		}
		if r := side.Restart; r != nil {
			fmt.Fprintf(w, "  restart with all present: new snapshot ready after %.2fs; start-up peak RSS controller %.0f MiB, sidecar %.0f MiB\n",
				r["ready_after_restart_s"], r[procController+".peak_rss_after_restart_mib"], r[procSidecar+".peak_rss_after_restart_mib"])
		}
		if s := side.Stuck; s != nil {
			fmt.Fprintf(w, "  kubectl shutter stuck -A with all present: %.2fs, peak RSS %.0f MiB\n", s["stuck_all_s"], s["stuck_all_peak_rss_mib"])
		}
		if s := side.Schedules; s != nil {
			fmt.Fprintf(w, "  %d schedules: wave before %.1f/s, controller %.1f ms, API server %.1f ms per snapshot; with them %.1f/s, %.1f ms, %.1f ms\n",
				s.Count, s.Before.PerSecond, s.Before.CPUMsPerSnapshot[procController], s.Before.CPUMsPerSnapshot[procAPIServer],
				s.With.PerSecond, s.With.CPUMsPerSnapshot[procController], s.With.CPUMsPerSnapshot[procAPIServer])
		}
	}
}

func writesOf(p *Phase) float64 {
	figs := map[string]float64{}
	p.figures(figs)
	return figs[p.Name+".writes_per_snapshot"]
}
