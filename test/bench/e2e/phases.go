package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shutter-csi/shutter/test/stack"
)

// begin records the counters a phase is measured against and resets the components' peak RSS.
func (b *bench) begin(ctx context.Context) (*phaseWindow, error) {
	w := &phaseWindow{cpu: map[string]float64{}, auditPos: b.audit.size(), load: loadAverage()}
	var err error
	if w.metrics, err = scrapeRequests(ctx, b.kube); err != nil {
		return nil, err
	}
	for name, pid := range b.pids() {
		if w.cpu[name], err = cpuSeconds(pid); err != nil {
			return nil, err
		}
		resetPeakRSS(pid)
	}
	w.start = time.Now()
	return w, nil
}

// finish waits for the phase's trailing writes (settle), then reads every counter again and
// builds the phase.
func (b *bench) finish(ctx context.Context, name string, w *phaseWindow) (*Phase, error) {
	until, err := b.settle(ctx, name == "create")
	if err != nil {
		return nil, err
	}
	p := &Phase{Name: name, Snapshots: len(w.latencies), WallSeconds: w.last.Sub(w.start).Seconds(),
		CPUSeconds: map[string]float64{}, PeakRSSMiB: map[string]float64{}, LoadStart: w.load, LoadEnd: loadAverage()}
	p.PerSecond = float64(p.Snapshots) / p.WallSeconds
	slices.Sort(w.latencies)
	p.LatencyP50, p.LatencyP90 = percentile(w.latencies, 0.5), percentile(w.latencies, 0.9)
	p.LatencyP99 = percentile(w.latencies, 0.99)
	p.LatencyMax = percentile(w.latencies, 1)
	for proc, pid := range b.pids() {
		s, err := cpuSeconds(pid)
		if err != nil {
			return nil, err
		}
		p.CPUSeconds[proc] = s - w.cpu[proc]
		if proc == "snapshot-controller" || proc == "csi-snapshotter" {
			p.PeakRSSMiB[proc] = memoryMiB(pid, "VmHWM")
		}
	}
	after, err := scrapeRequests(ctx, b.kube)
	if err != nil {
		return nil, err
	}
	p.APIServerRequests = after.since(w.metrics)
	counts := map[request]int{}
	err = b.audit.read(w.auditPos, func(e *auditEvent) {
		if e.StageTimestamp.Before(w.start) || e.StageTimestamp.After(until) {
			return
		}
		r := request{Component: classify(e, b.controllerUser, b.sidecarUser, adminUser), Verb: e.Verb, Resource: e.resource()}
		if e.ResponseStatus != nil {
			r.Code = e.ResponseStatus.Code
		}
		counts[r]++
	})
	p.Requests = countRequests(counts)
	b.checkAudit(p)
	return p, err
}

// checkAudit warns when the audit log holds fewer writes than the API server counted, e.g.
// because its buffer dropped events.
func (b *bench) checkAudit(p *Phase) {
	var audited, counted float64
	for _, r := range p.Requests {
		if r.write() {
			audited += float64(r.Count)
		}
	}
	for k, v := range p.APIServerRequests {
		switch verb, _, _ := strings.Cut(k, " "); verb {
		case "POST", "PUT", "PATCH", "DELETE":
			counted += v
		}
	}
	if audited < 0.98*counted {
		b.warnings = append(b.warnings, fmt.Sprintf("%s: the audit log holds %.0f writes, apiserver_request_total counted %.0f", p.Name, audited, counted))
	}
}

// sendAll begins a phase and makes n requests at once (b.opts.concurrent at a time), returning
// the phase's window and when each request went out.
func (b *bench) sendAll(ctx context.Context, n int, send func(ctx context.Context, i int) error) (*phaseWindow, []time.Time, error) {
	w, err := b.begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	sent := make([]time.Time, n)
	err = parallel(ctx, n, b.opts.concurrent, func(ctx context.Context, i int) error {
		sent[i] = time.Now()
		return send(ctx, i)
	})
	return w, sent, err
}

// createPhase creates every snapshot at once, the i-th of claim claims[i], and waits until all
// are readyToUse.
func (b *bench) createPhase(ctx context.Context, names, claims []string) (*Phase, error) {
	client := b.snaps.SnapshotV1().VolumeSnapshots(namespace)
	w, sent, err := b.sendAll(ctx, len(names), func(ctx context.Context, i int) error {
		_, err := client.Create(ctx, stack.NewSnapshot(namespace, names[i], claims[i], ""), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	b.progress("  all %d created in %.1fs; waiting for readyToUse", len(names), time.Since(w.start).Seconds())
	err = b.waitFor(ctx, "create", timeoutFor(len(names)), func() (bool, string) {
		_, n := b.tracker.times(names, false)
		return n == len(names), fmt.Sprintf("%d/%d ready", n, len(names))
	})
	if err != nil {
		return nil, err
	}
	ready, _ := b.tracker.times(names, false)
	w.latencies, w.last = latencies(sent, ready)
	return b.finish(ctx, "create", w)
}

// deletePhase deletes every snapshot at once and waits until the snapshots, their contents and
// the driver's backend snapshots are all gone.
func (b *bench) deletePhase(ctx context.Context, names []string) (*Phase, error) {
	return b.deleteSome(ctx, names, 0)
}

// deleteSome deletes the named snapshots at once and waits until they are gone and at most left
// contents remain; with none left, also until the driver holds no backend snapshot.
func (b *bench) deleteSome(ctx context.Context, names []string, left int) (*Phase, error) {
	client := b.snaps.SnapshotV1().VolumeSnapshots(namespace)
	w, sent, err := b.sendAll(ctx, len(names), func(ctx context.Context, i int) error {
		return client.Delete(ctx, names[i], metav1.DeleteOptions{})
	})
	if err != nil {
		return nil, err
	}
	b.progress("  all %d deleted in %.1fs; waiting until snapshots, contents and backend snapshots are gone", len(names), time.Since(w.start).Seconds())
	var allGone time.Time
	lastList := time.Time{}
	backend := -1
	err = b.waitFor(ctx, "delete", timeoutFor(len(names)), func() (bool, string) {
		snaps, contents := b.tracker.counts()
		if left > 0 {
			_, gone := b.tracker.times(names, true)
			if gone == len(names) && contents <= left {
				allGone = time.Now()
				return true, ""
			}
			return false, fmt.Sprintf("%d/%d gone, %d contents left", gone, len(names), contents)
		}
		if snaps == 0 && contents == 0 && time.Since(lastList) > 250*time.Millisecond {
			lastList = time.Now()
			list, err := b.stack.CSI.ListSnapshots(ctx)
			if err != nil {
				return false, err.Error()
			}
			if backend = len(list); backend == 0 {
				allGone = time.Now()
			}
		}
		return backend == 0, fmt.Sprintf("%d snapshots, %d contents, %d backend snapshots left", snaps, contents, backend)
	})
	if err != nil {
		return nil, err
	}
	gone, _ := b.tracker.times(names, true)
	w.latencies, _ = latencies(sent, gone)
	w.last = allGone
	return b.finish(ctx, "delete", w)
}

// restartPhase stops the controller gracefully (it hands its Lease back), starts it again with
// every snapshot present, creates one new snapshot and times it to readyToUse.
func (b *bench) restartPhase(ctx context.Context, run int) (map[string]float64, error) {
	ctrl := b.stack.Controllers[0]
	out := map[string]float64{"controller_rss_before_mib": memoryMiB(ctrl.Pid(), "VmRSS"), "load": loadAverage()}
	ctrl.Stop(10 * time.Second)
	start := time.Now()
	if err := ctrl.Start(); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("after-restart-r%d", run+1)
	if err := b.timeNewSnapshot(ctx, name, claimName(b.opts.n+run), start, out); err != nil {
		return nil, err
	}
	out["controller_rss_after_mib"] = memoryMiB(ctrl.Pid(), "VmRSS")
	b.progress("  new snapshot ready %.2fs after the restart", out["ready_after_restart_s"])
	// Out of the measured phases: the extra snapshot goes before the delete phase starts.
	if err := b.snaps.SnapshotV1().VolumeSnapshots(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return nil, err
	}
	return out, b.waitFor(ctx, "restart cleanup", 5*time.Minute, func() (bool, string) {
		_, n := b.tracker.times([]string{name}, true)
		return n == 1, "extra snapshot not gone yet"
	})
}

// timeNewSnapshot creates snapshot name of claim and waits until it is readyToUse, recording
// in out how long that took from start (a restart) and from its creation.
func (b *bench) timeNewSnapshot(ctx context.Context, name, claim string, start time.Time, out map[string]float64) error {
	client := b.snaps.SnapshotV1().VolumeSnapshots(namespace)
	if _, err := client.Create(ctx, stack.NewSnapshot(namespace, name, claim, ""), metav1.CreateOptions{}); err != nil {
		return err
	}
	created := time.Now()
	err := b.waitFor(ctx, "restart", 10*time.Minute, func() (bool, string) {
		_, n := b.tracker.times([]string{name}, false)
		return n == 1, "new snapshot not ready yet"
	})
	if err != nil {
		return err
	}
	ready, _ := b.tracker.times([]string{name}, false)
	out["ready_after_restart_s"] = ready[0].Sub(start).Seconds()
	out["ready_after_create_s"] = ready[0].Sub(created).Seconds()
	return nil
}

// latencies are done-sent per snapshot, and the last done.
func latencies(sent, done []time.Time) ([]time.Duration, time.Time) {
	out := make([]time.Duration, len(sent))
	var last time.Time
	for i := range sent {
		out[i] = done[i].Sub(sent[i])
		if done[i].After(last) {
			last = done[i]
		}
	}
	return out, last
}

// timeoutFor bounds a phase: generous, since at 5 QPS a thousand snapshots take minutes.
func timeoutFor(n int) time.Duration {
	return 5*time.Minute + time.Duration(n)*time.Second
}
