package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	snapinformers "github.com/shutter-csi/shutter/client/informers/externalversions"
	"github.com/shutter-csi/shutter/test/stack"
)

// tracker watches the benchmark's VolumeSnapshots and all contents, and remembers when each
// snapshot was first seen readyToUse and when it disappeared.
type tracker struct {
	mu       sync.Mutex
	ready    map[string]time.Time
	gone     map[string]time.Time
	snaps    cache.Store
	contents cache.Store
}

func newTracker(ctx context.Context, client clientset.Interface, namespace string) (*tracker, error) {
	t := &tracker{ready: map[string]time.Time{}, gone: map[string]time.Time{}}
	factory := snapinformers.NewSharedInformerFactoryWithOptions(client, 0, snapinformers.WithNamespace(namespace),
		snapinformers.WithTransform(trackedFields))
	snaps := factory.Snapshot().V1().VolumeSnapshots().Informer()
	contents := snapinformers.NewSharedInformerFactoryWithOptions(client, 0, snapinformers.WithTransform(trackedFields)).
		Snapshot().V1().VolumeSnapshotContents().Informer()
	_, err := snaps.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.seen,
		UpdateFunc: func(_, obj any) { t.seen(obj) },
		DeleteFunc: t.deleted,
	})
	if err != nil {
		return nil, err
	}
	t.snaps, t.contents = snaps.GetStore(), contents.GetStore()
	go snaps.RunWithContext(ctx)
	go contents.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), snaps.HasSynced, contents.HasSynced) {
		return nil, errors.New("snapshot informers did not sync")
	}
	return t, nil
}

// trackedFields keeps of each object only what the tracker reads (identity and readiness), so
// that the benchmark's own caches stay small with 50,000 snapshots and contents.
func trackedFields(obj any) (any, error) {
	switch o := obj.(type) {
	case *snapshotv1.VolumeSnapshot:
		out := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name,
			UID: o.UID, ResourceVersion: o.ResourceVersion}}
		if stack.Ready(o) {
			out.Status = &snapshotv1.VolumeSnapshotStatus{ReadyToUse: o.Status.ReadyToUse}
		}
		return out, nil
	case *snapshotv1.VolumeSnapshotContent:
		return &snapshotv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: o.Name, UID: o.UID,
			ResourceVersion: o.ResourceVersion}}, nil
	}
	return obj, nil
}

func (t *tracker) seen(obj any) {
	vs, ok := obj.(*snapshotv1.VolumeSnapshot)
	if !ok || !stack.Ready(vs) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, done := t.ready[vs.Name]; !done {
		t.ready[vs.Name] = time.Now()
	}
}

func (t *tracker) deleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if vs, ok := obj.(*snapshotv1.VolumeSnapshot); ok {
		t.mu.Lock()
		t.gone[vs.Name] = time.Now()
		t.mu.Unlock()
	}
}

// times returns when each named snapshot became ready (or gone), and how many did.
func (t *tracker) times(names []string, gone bool) ([]time.Time, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.ready
	if gone {
		m = t.gone
	}
	out := make([]time.Time, len(names))
	n := 0
	for i, name := range names {
		if at, ok := m[name]; ok {
			out[i] = at
			n++
		}
	}
	return out, n
}

// counts are the snapshots and contents that exist now.
func (t *tracker) counts() (snapshots, contents int) {
	return len(t.snaps.ListKeys()), len(t.contents.ListKeys())
}

// waitFor polls done every 100 ms, printing status every 5 s, until done says so, a component
// dies, or timeout passes.
func (b *bench) waitFor(ctx context.Context, what string, timeout time.Duration, done func() (bool, string)) error {
	start := time.Now()
	lastPrint := start
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, status := done()
		if ok {
			return nil
		}
		if err := b.stack.Check(); err != nil {
			return err
		}
		if time.Since(start) > timeout {
			return fmt.Errorf("%s: not done after %s: %s", what, timeout, status)
		}
		if time.Since(lastPrint) >= 5*time.Second {
			lastPrint = time.Now()
			fmt.Fprintf(os.Stderr, "bench-e2e:   %s: %s (%.0fs, load %.2f)\n", what, status, time.Since(start).Seconds(), loadAverage())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
