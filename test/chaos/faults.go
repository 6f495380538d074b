package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/shutter-csi/shutter/test/stack"
)

// faultKinds are every fault the schedule injects, each in a lane: faults of one lane run one
// after the other, lanes at the same time.
var faultKinds = []struct{ kind, lane string }{
	{"kill-sidecar", "process"}, {"kill-driver", "process"}, {"kill-controller", "process"},
	{"kill-after-create", "process"}, {"stop-leader", "process"},
	{"restart-apiserver", "process"}, {"restart-etcd", "process"},
	{"api-429", "api"}, {"api-500", "api"}, {"api-slow", "api"},
	{"csi-delay", "csi"}, {"csi-timeout", "csi"}, {"csi-transient", "csi"}, {"csi-final", "csi"}, {"csi-drop", "csi"},
	{"disk-full", "disk"},
}

// fault is one scheduled injection: what, when (from the run's start) and for how long.
type fault struct {
	Kind     string        `json:"kind"`
	At       time.Duration `json:"at"`
	For      time.Duration `json:"for"`
	Victim   int           `json:"victim,omitempty"`
	Started  time.Time     `json:"started"`
	Ended    time.Time     `json:"ended"`
	Note     string        `json:"note,omitempty"`
	Injected bool          `json:"injected"`
}

// schedule places per injections of every kind at random moments of [5%, 85%] of duration.
func schedule(seed uint64, duration time.Duration, per int, skip map[string]bool) map[string][]*fault {
	rng := rand.New(rand.NewPCG(seed, seed^0xfa017))
	lanes := map[string][]*fault{}
	for _, k := range faultKinds {
		for range per {
			f := &fault{Kind: k.kind, At: duration/20 + time.Duration(rng.Int64N(int64(duration*8/10))),
				For: 2*time.Second + time.Duration(rng.Int64N(int64(4*time.Second))), Victim: rng.IntN(2)}
			if skip[k.kind] {
				continue
			}
			lanes[k.lane] = append(lanes[k.lane], f)
		}
	}
	for _, fs := range lanes {
		sort.Slice(fs, func(i, j int) bool { return fs[i].At < fs[j].At })
	}
	return lanes
}

// inject runs every lane's faults at their moments and returns when all are done.
func (e *env) inject(ctx context.Context, lanes map[string][]*fault) {
	start := time.Now()
	var wg sync.WaitGroup
	for _, fs := range lanes {
		wg.Go(func() {
			for _, f := range fs {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(start.Add(f.At))):
				}
				f.Started = time.Now()
				err := e.injectOne(ctx, f)
				f.Ended = time.Now()
				f.Injected = err == nil
				if err != nil {
					f.Note = err.Error()
				}
				e.log("fault %-18s %5.1fs %s", f.Kind, f.Ended.Sub(f.Started).Seconds(), f.Note)
			}
		})
	}
	wg.Wait()
}

func (e *env) injectOne(ctx context.Context, f *fault) error {
	switch f.Kind {
	case "kill-sidecar":
		return e.kill(ctx, e.stack.Snapshotter)
	case "kill-driver":
		return e.kill(ctx, e.stack.Driver)
	case "kill-controller":
		return e.kill(ctx, e.stack.Controllers[f.Victim%len(e.stack.Controllers)])
	case "kill-after-create":
		return e.killAfterCreate(ctx, f)
	case "stop-leader":
		return e.stopLeader(ctx, f)
	case "restart-apiserver":
		return e.cluster.Restart(ctx, "kube-apiserver")
	case "restart-etcd":
		return e.cluster.Restart(ctx, "etcd")
	case "api-429", "api-500", "api-slow":
		mode := map[string]apiMode{"api-429": apiThrottle, "api-500": apiFail, "api-slow": apiSlow}[f.Kind]
		e.api.set(mode, f.For/4)
		defer e.api.set(apiPass, 0)
		return pause(ctx, f.For)
	case "csi-delay", "csi-timeout", "csi-transient", "csi-final":
		mode := map[string]csiMode{"csi-delay": csiDelay, "csi-timeout": csiTimeout, "csi-transient": csiTransient, "csi-final": csiFinal}[f.Kind]
		e.csi.set(mode, f.For/3)
		defer e.csi.set(csiPass, 0)
		return pause(ctx, f.For)
	case "csi-drop":
		return e.csi.drop()
	case "disk-full":
		return e.diskFull(ctx, f.For)
	}
	return fmt.Errorf("unknown fault %s", f.Kind)
}

// pause waits d unless ctx ends first: a fault's duration, not a synchronisation.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// kill SIGKILLs p; the supervisor starts it again. It waits until p runs again.
func (e *env) kill(ctx context.Context, p *stack.Process) error {
	p.Kill()
	return e.waitRunning(ctx, p)
}

func (e *env) waitRunning(ctx context.Context, p *stack.Process) error {
	deadline := time.Now().Add(time.Minute)
	for !p.Running() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not restarted", p.Name)
		}
		if err := pause(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// killAfterCreate arms the CSI proxy to SIGKILL the sidecar when the next CreateSnapshot
// succeeds, before the sidecar sees the answer and writes the content's status.
func (e *env) killAfterCreate(ctx context.Context, f *fault) error {
	fired := make(chan struct{})
	kill := func() {
		e.stack.Snapshotter.Kill()
		close(fired)
	}
	e.csi.killAfterCreate.Store(&kill)
	select {
	case <-fired:
		return e.waitRunning(ctx, e.stack.Snapshotter)
	case <-time.After(time.Minute):
		if e.csi.killAfterCreate.CompareAndSwap(&kill, nil) {
			return errors.New("no CreateSnapshot within a minute")
		}
		<-fired
		return e.waitRunning(ctx, e.stack.Snapshotter)
	case <-ctx.Done():
		e.csi.killAfterCreate.CompareAndSwap(&kill, nil)
		return ctx.Err()
	}
}

// stopLeader SIGSTOPs the leading controller past its Lease, then SIGCONTs it.
func (e *env) stopLeader(ctx context.Context, f *fault) error {
	leader, err := e.stack.WaitLeader(ctx, nil, time.Minute)
	if err != nil || leader == nil {
		return fmt.Errorf("no leader to stop: %v", err)
	}
	pid := leader.Pid()
	e.hold(leader, true)
	defer e.hold(leader, false)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	f.Note = leader.Name
	stopped := leaseDuration + f.For
	err = pause(ctx, stopped)
	_ = syscall.Kill(pid, syscall.SIGCONT)
	return err
}

// diskFull fills the driver's tmpfs for d, then frees it.
func (e *env) diskFull(ctx context.Context, d time.Duration) error {
	path := filepath.Join(e.disk, "fill")
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer file.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := file.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			return err
		}
	}
	return pause(ctx, d)
}
