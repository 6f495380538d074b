//go:build linux

package hostpath

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	crashKills = flag.Int("crash-kills", 30, "SIGKILLs TestCrashLoop deals the driver (make crash: 200)")
	crashSeed  = flag.Uint64("crash-seed", 0, "seed of TestCrashLoop's choices; 0 draws one (the test prints it)")
)

// crashState is what the test knows of one volume or snapshot.
type crashState int

const (
	// acked: the create was acknowledged (or found after a crash).
	acked crashState = iota + 1
	// creating and deleting: the call was cut short by a kill.
	creating
	deleting
	// gone: the delete was acknowledged.
	gone
)

// crashObj is one volume or snapshot the test made.
type crashObj struct {
	snapshot bool
	block    bool
	state    crashState
	// sum is the checksum its data must have; see treeSum.
	sum  [32]byte
	busy bool
}

// crashWorld is every object and what the test knows of it.
type crashWorld struct {
	mu      sync.Mutex
	objs    map[string]*crashObj
	next    int
	dataDir string
	// acks counts acknowledged calls.
	acks int
}

// treeSum is a checksum of the data at path: a file's contents, or every
// regular file's path and contents below a folder.
func treeSum(t *testing.T, path string) [32]byte {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(path, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(path, p)
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(data))
		h.Write(data)
		return nil
	})
	if err != nil {
		t.Fatalf("read data of %s: %v", filepath.Base(path), err)
	}
	return [32]byte(h.Sum(nil))
}

// pick marks a random idle object of the kind that is acked as busy and
// returns its ID, or "".
func (w *crashWorld) pick(rng *rand.Rand, snapshot bool) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []string
	for id, o := range w.objs {
		if o.snapshot == snapshot && o.state == acked && !o.busy {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return ""
	}
	slices.Sort(ids)
	id := ids[rng.IntN(len(ids))]
	w.objs[id].busy = true
	return id
}

// add records a new object whose create is about to be sent.
func (w *crashWorld) add(id string, o *crashObj) {
	w.mu.Lock()
	defer w.mu.Unlock()
	o.state, o.busy = creating, true
	w.objs[id] = o
}

// settle records the outcome of a call on id and frees it; sum, when
// given, is the data the object holds now.
func (w *crashWorld) settle(id string, err error, done crashState, sum *[32]byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	o := w.objs[id]
	o.busy = false
	if err == nil {
		o.state = done
		w.acks++
	}
	if sum != nil {
		o.sum = *sum
	}
}

// free frees id, used as a source.
func (w *crashWorld) free(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.objs[id].busy = false
}

// crashCycle issues random creates, snapshots, restores and deletes until
// a call fails, which it must only once the driver is killed.
func (w *crashWorld) crashCycle(ctx context.Context, t *testing.T, ctrl csi.ControllerClient, rng *rand.Rand, started chan<- struct{}, killed *atomic.Bool) {
	for {
		select {
		case started <- struct{}{}:
		default:
		}
		var err error
		switch n := rng.IntN(100); {
		case n < 30:
			err = w.createVolume(ctx, t, ctrl, rng)
		case n < 55:
			err = w.snapshot(ctx, ctrl, rng)
		case n < 75:
			err = w.restore(ctx, ctrl, rng)
		default:
			err = w.delete(ctx, ctrl, rng, n < 88)
		}
		if err != nil {
			if !killed.Load() {
				t.Errorf("call failed before the kill: %v", err)
			}
			return
		}
	}
}

func capFor(block bool) *csi.VolumeCapability {
	if block {
		return blockCap()
	}
	return mountCap()
}

// createVolume creates a volume and, once acknowledged, writes data into
// it; the data's checksum is what the volume must hold from then on.
func (w *crashWorld) createVolume(ctx context.Context, t *testing.T, ctrl csi.ControllerClient, rng *rand.Rand) error {
	w.mu.Lock()
	name := fmt.Sprintf("v%d", w.next)
	w.next++
	w.mu.Unlock()
	block := rng.IntN(3) == 0
	id := deriveID(volumePrefix, name)
	path := filepath.Join(w.dataDir, "volumes", id)
	w.add(id, &crashObj{block: block})
	_, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}, VolumeCapabilities: []*csi.VolumeCapability{capFor(block)},
	})
	var sum *[32]byte
	if err == nil {
		data := make([]byte, 1+rng.IntN(64<<10))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		var werr error
		if block {
			werr = writeAtFile(path, data, int64(rng.IntN(1<<19)))
		} else {
			werr = os.WriteFile(filepath.Join(path, "f"), data, 0o644)
		}
		if werr != nil {
			t.Errorf("write into acknowledged volume %s: %v", id, werr)
		}
		s := treeSum(t, path)
		sum = &s
	}
	w.settle(id, err, acked, sum)
	return err
}

func writeAtFile(path string, data []byte, off int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteAt(data, off)
	return err
}

// copyOf picks a random idle volume to snapshot (a snapshot to restore,
// when snapshot is false) and records the object about to be made from it,
// which must hold the source's data. It returns the source's ID, or "",
// and the new object's name, ID and whether it is a block volume's.
func (w *crashWorld) copyOf(rng *rand.Rand, snapshot bool) (src, name, id string, block bool) {
	src = w.pick(rng, !snapshot)
	if src == "" {
		return "", "", "", false
	}
	letter, prefix := "r", volumePrefix
	if snapshot {
		letter, prefix = "s", snapshotPrefix
	}
	w.mu.Lock()
	name = fmt.Sprintf("%s%d", letter, w.next)
	w.next++
	from := w.objs[src]
	w.mu.Unlock()
	id = deriveID(prefix, name)
	w.add(id, &crashObj{snapshot: snapshot, block: from.block, sum: from.sum})
	return src, name, id, from.block
}

// snapshot snapshots a random volume; the snapshot must hold its data.
func (w *crashWorld) snapshot(ctx context.Context, ctrl csi.ControllerClient, rng *rand.Rand) error {
	src, name, id, _ := w.copyOf(rng, true)
	if src == "" {
		return nil
	}
	_, err := ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: src})
	w.free(src)
	w.settle(id, err, acked, nil)
	return err
}

// restore creates a volume from a random snapshot; it must hold the
// snapshot's data.
func (w *crashWorld) restore(ctx context.Context, ctrl csi.ControllerClient, rng *rand.Rand) error {
	src, name, id, block := w.copyOf(rng, false)
	if src == "" {
		return nil
	}
	_, err := ctrl.CreateVolume(ctx, restoreRequest(name, src, 1<<20, capFor(block)))
	w.free(src)
	w.settle(id, err, acked, nil)
	return err
}

// delete deletes a random volume or snapshot.
func (w *crashWorld) delete(ctx context.Context, ctrl csi.ControllerClient, rng *rand.Rand, snapshot bool) error {
	id := w.pick(rng, snapshot)
	if id == "" {
		return nil
	}
	w.mu.Lock()
	w.objs[id].state = deleting
	w.mu.Unlock()
	var err error
	if snapshot {
		_, err = ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id})
	} else {
		_, err = ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	}
	w.settle(id, err, gone, nil)
	return err
}

// check compares the restarted driver with what the test knows: every
// acknowledged object is there with its data intact, every acknowledged
// delete is gone, and an object whose call was cut short is either gone
// or intact. It resolves those to acked or gone.
func (w *crashWorld) check(t *testing.T, ctrl csi.ControllerClient, empty map[bool][32]byte) {
	t.Helper()
	ctx := context.Background()
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, o := range w.objs {
		var err error
		kind, dir := "volume", "volumes"
		if o.snapshot {
			kind, dir = "snapshot", "snapshots"
			_, err = ctrl.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: id})
		} else {
			_, err = ctrl.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: id})
		}
		present := err == nil
		if !present && status.Code(err) != codes.NotFound {
			t.Fatalf("get %s %s: %v", kind, id, err)
		}
		switch {
		case o.state == acked && !present:
			t.Fatalf("acknowledged %s %s is missing", kind, id)
		case o.state == gone && present:
			t.Fatalf("deleted %s %s is back", kind, id)
		case !present:
			delete(w.objs, id)
			continue
		case o.state == gone:
			continue
		}
		want := o.sum
		if o.state == creating && !o.snapshot && o.sum == [32]byte{} {
			// A new volume cut short: the test wrote nothing into it.
			want = empty[o.block]
		}
		path := filepath.Join(w.dataDir, dir, id)
		got := empty[o.block]
		if _, err := os.Lstat(path); err == nil || !o.snapshot {
			// A snapshot of a volume without data has no data.
			got = treeSum(t, path)
		}
		if got != want {
			t.Fatalf("%s %s (state %d) holds other data than acknowledged", kind, id, o.state)
		}
		o.state, o.sum = acked, want
	}
}

// TestCrashLoop kills the real driver process with SIGKILL at random
// points while clients create volumes (and write into them), snapshot
// them, restore snapshots and delete both, -crash-kills times (30 here,
// 200 by `make crash`). After each restart every acknowledged volume and
// snapshot must be there with the data it was acknowledged with
// (checksums), every acknowledged delete must be gone, and whatever a
// kill cut short must be gone or intact. The seed is printed; -crash-seed
// repeats its choices (not the timing).
func TestCrashLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the driver and kills it repeatedly")
	}
	seed := *crashSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (repeat with -args -crash-seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	bin, dir := buildDriver(t), t.TempDir()
	w := &crashWorld{objs: map[string]*crashObj{}, dataDir: filepath.Join(dir, "data")}
	emptyBlock := filepath.Join(t.TempDir(), "block")
	if err := os.WriteFile(emptyBlock, nil, 0o600); err != nil || os.Truncate(emptyBlock, 1<<20) != nil {
		t.Fatal(err)
	}
	empty := map[bool][32]byte{false: treeSum(t, t.TempDir()), true: treeSum(t, emptyBlock)}
	begin := time.Now()
	p := startDriver(t, bin, dir)
	for kill := range *crashKills {
		ctx, cancel := context.WithCancel(context.Background())
		started := make(chan struct{})
		var killed atomic.Bool
		var wg sync.WaitGroup
		for i := range 3 {
			wrng := rand.New(rand.NewPCG(seed, uint64(kill*3+i+1)))
			wg.Go(func() { w.crashCycle(ctx, t, p.ctrl, wrng, started, &killed) })
		}
		stopped := make(chan struct{})
		go func() { wg.Wait(); close(stopped) }()
		// The kill lands right after a random number of calls began, while
		// they and the other clients' calls are in flight.
		for range 1 + rng.IntN(12) {
			select {
			case <-started:
			case <-stopped:
				t.Fatal("every client stopped before the kill")
			}
		}
		killed.Store(true)
		p.kill(t)
		cancel()
		<-stopped
		p = startDriver(t, bin, dir)
		w.check(t, p.ctrl, empty)
	}
	p.kill(t)
	t.Logf("%d kills in %v; %d calls acknowledged, %d objects at the end", *crashKills, time.Since(begin).Round(time.Millisecond), w.acks, len(w.objs))
}
