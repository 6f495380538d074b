package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// sourceClaims are the claims snapshots are taken of; the first four form two groups.
var sourceClaims = []struct{ name, group string }{
	{"src-0", "a"}, {"src-1", "a"}, {"src-2", "b"}, {"src-3", "b"}, {"src-4", ""}, {"src-5", ""},
}

// item is one object the workload made and what it asked for.
type item struct {
	kind    string // dynamic, retain, preprovisioned, group, claim-deleted
	deleted bool
	// created is closed once the create call is done: a delete waits for it, or it would race
	// its own object's creation (a 404 first, then the object arrives).
	created chan struct{}
}

func newItem(kind string) *item { return &item{kind: kind, created: make(chan struct{})} }

// after runs op once its create call is done.
func (it *item) after(op func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-it.created:
		case <-ctx.Done():
			return ctx.Err()
		}
		return op(ctx)
	}
}

// creating closes it.created when create returns.
func (it *item) creating(create func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		defer close(it.created)
		return create(ctx)
	}
}

// workload creates and deletes snapshots at a steady rate; its choices follow from the seed.
type workload struct {
	e       *env
	rng     *rand.Rand
	n       int
	every   time.Duration
	volumes map[string]string // source claim -> volume ID

	mu       sync.Mutex
	snaps    map[string]*item
	groups   map[string]*item
	claims   map[string]bool // claims the workload deleted, which must go
	ops      map[string]int
	errs     []string
	inflight sync.WaitGroup
}

func newWorkload(e *env, seed uint64, n int, duration time.Duration) *workload {
	return &workload{e: e, rng: rand.New(rand.NewPCG(seed, seed^0xc4a05)), n: n, every: duration / time.Duration(max(n, 1)),
		volumes: map[string]string{}, snaps: map[string]*item{}, groups: map[string]*item{}, claims: map[string]bool{}, ops: map[string]int{}}
}

// prepare creates the classes and the source claims.
func (w *workload) prepare(ctx context.Context) error {
	if err := w.e.setUpObjects(ctx); err != nil {
		return err
	}
	for _, c := range sourceClaims {
		labels := map[string]string{}
		if c.group != "" {
			labels["group"] = c.group
		}
		if err := w.e.newClaim(ctx, c.name, "", "", labels); err != nil {
			return err
		}
		pvc, err := w.e.kube.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pv, err := w.e.kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		w.volumes[c.name] = pv.Spec.CSI.VolumeHandle
	}
	return nil
}

// run issues n creations, one every duration/n, each with a chance of deleting an earlier one,
// and returns when the last has been issued and every call made.
func (w *workload) run(ctx context.Context) {
	start := time.Now()
	sem := make(chan struct{}, 8)
	for i := range w.n {
		if wait := time.Until(start.Add(time.Duration(i) * w.every)); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		ops := w.plan(i)
		for _, op := range ops {
			sem <- struct{}{}
			w.inflight.Add(1)
			go func() {
				defer func() { <-sem; w.inflight.Done() }()
				if err := op(ctx); err != nil {
					w.mu.Lock()
					w.errs = append(w.errs, err.Error())
					w.mu.Unlock()
				}
			}()
		}
	}
	w.inflight.Wait()
}

// plan decides step i's operations; every random choice is made here, in order, so a seed
// repeats the same plan.
func (w *workload) plan(i int) []func(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ops []func(context.Context) error
	claim := sourceClaims[w.rng.IntN(len(sourceClaims))].name
	name := fmt.Sprintf("s%04d", i)
	switch r := w.rng.IntN(100); {
	case r < 40:
		ops = append(ops, w.dynamic(name, claim, classDelete, "dynamic"))
	case r < 55:
		ops = append(ops, w.dynamic(name, claim, classRetain, "retain"))
	case r < 70:
		policy, class := snapshotv1.VolumeSnapshotContentDelete, classDelete
		if w.rng.IntN(2) == 0 {
			policy, class = snapshotv1.VolumeSnapshotContentRetain, classRetain
		}
		ops = append(ops, w.preProvisioned(name, w.volumes[claim], policy, class))
	case r < 80:
		ops = append(ops, w.group("g"+name[1:], []string{"a", "b"}[w.rng.IntN(2)]))
	case r < 90:
		ops = append(ops, w.claimDeleted(name))
	default:
		ops = append(ops, w.restore(name, w.pick(w.snaps, "dynamic", "retain", "preprovisioned")))
	}
	if w.rng.IntN(100) < 55 {
		if victim := w.pick(w.snaps, "dynamic", "retain", "preprovisioned", "claim-deleted"); victim != "" {
			w.snaps[victim].deleted = true
			w.ops["delete"]++
			ops = append(ops, w.snaps[victim].after(func(ctx context.Context) error { return w.e.deleteSnapshot(ctx, victim) }))
		}
	}
	if w.rng.IntN(100) < 10 {
		if victim := w.pick(w.groups, "group"); victim != "" {
			w.groups[victim].deleted = true
			w.ops["delete-group"]++
			ops = append(ops, w.groups[victim].after(func(ctx context.Context) error { return w.e.deleteGroup(ctx, victim) }))
		}
	}
	return ops
}

// pick chooses one live item of the given kinds, or "".
func (w *workload) pick(items map[string]*item, kinds ...string) string {
	var live []string
	for name, it := range items {
		if !it.deleted && slices.Contains(kinds, it.kind) {
			live = append(live, name)
		}
	}
	if len(live) == 0 {
		return ""
	}
	sort.Strings(live)
	return live[w.rng.IntN(len(live))]
}

func (w *workload) dynamic(name, claim, class, kind string) func(context.Context) error {
	it := newItem(kind)
	w.snaps[name] = it
	w.ops[kind]++
	return it.creating(func(ctx context.Context) error { return w.e.createSnapshot(ctx, name, claim, class) })
}

func (w *workload) preProvisioned(name, volume string, policy snapshotv1.DeletionPolicy, class string) func(context.Context) error {
	it := newItem("preprovisioned")
	w.snaps[name] = it
	w.ops["preprovisioned"]++
	return it.creating(func(ctx context.Context) error { return w.e.createPreProvisioned(ctx, name, volume, policy, class) })
}

func (w *workload) group(name, label string) func(context.Context) error {
	it := newItem("group")
	w.groups[name] = it
	w.ops["group"]++
	return it.creating(func(ctx context.Context) error { return w.e.createGroup(ctx, name, label) })
}

// claimDeleted makes a new claim, snapshots it, and deletes the claim while the snapshot is
// being taken (once the controller protects the claim, or the snapshot is ready already).
func (w *workload) claimDeleted(name string) func(context.Context) error {
	claim := "tmp-" + name
	it := newItem("claim-deleted")
	w.snaps[name] = it
	w.claims[claim] = true
	w.ops["claim-deleted"]++
	return func(ctx context.Context) error {
		err := it.creating(func(ctx context.Context) error {
			if err := w.e.newClaim(ctx, claim, "", "", nil); err != nil {
				return err
			}
			return w.e.createSnapshot(ctx, name, claim, classDelete)
		})(ctx)
		if err != nil {
			return err
		}
		w.waitProtected(ctx, claim, name)
		return w.e.deleteClaim(ctx, claim)
	}
}

// waitProtected waits (up to a minute) until claim carries the as-source finalizer or the
// snapshot is ready.
func (w *workload) waitProtected(ctx context.Context, claim, snapshot string) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		pvc, err := w.e.kube.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
		if err == nil && slices.Contains(pvc.Finalizers, protocol.PVCAsSourceFinalizer) {
			return
		}
		vs, err := w.e.snaps.SnapshotV1().VolumeSnapshots(namespace).Get(ctx, snapshot, metav1.GetOptions{})
		if err == nil && protocol.Ready(vs) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// restore waits for snapshot to be ready and restores it into a new volume and claim, then
// deletes that claim again.
func (w *workload) restore(name, snapshot string) func(context.Context) error {
	w.ops["restore"]++
	claim := "restore-" + name
	w.claims[claim] = true
	return func(ctx context.Context) error {
		if snapshot == "" {
			return nil
		}
		handle, err := w.e.readyHandle(ctx, snapshot, time.Minute)
		if err != nil {
			// Deleted meanwhile, or slowed down by faults: nothing to restore.
			w.mu.Lock()
			delete(w.claims, claim)
			w.ops["restore-skipped"]++
			w.mu.Unlock()
			return nil
		}
		if err := w.e.newClaim(ctx, claim, handle, snapshot, nil); err != nil {
			return err
		}
		return w.e.deleteClaim(ctx, claim)
	}
}

// expected returns what the workload asked for: snapshot and group names, live or deleted, and
// the claims it deleted.
func (w *workload) expected() (snaps, groups map[string]item, claims []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	snaps, groups = map[string]item{}, map[string]item{}
	for k, v := range w.snaps {
		snaps[k] = *v
	}
	for k, v := range w.groups {
		groups[k] = *v
	}
	for c := range w.claims {
		claims = append(claims, c)
	}
	sort.Strings(claims)
	return snaps, groups, claims
}

// deleteAll deletes every live snapshot and group, for the final drain.
func (w *workload) deleteAll(ctx context.Context) error {
	w.mu.Lock()
	var snaps, groups []string
	for name, it := range w.snaps {
		if !it.deleted {
			it.deleted = true
			snaps = append(snaps, name)
		}
	}
	for name, it := range w.groups {
		if !it.deleted {
			it.deleted = true
			groups = append(groups, name)
		}
	}
	w.mu.Unlock()
	for _, name := range snaps {
		if err := w.e.deleteSnapshot(ctx, name); err != nil {
			return err
		}
	}
	for _, name := range groups {
		if err := w.e.deleteGroup(ctx, name); err != nil {
			return err
		}
	}
	return nil
}
