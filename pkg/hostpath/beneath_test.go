//go:build linux

package hostpath

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/shutter-csi/shutter/pkg/hostpath/fscopy"
)

// snapshotWithHook takes a snapshot of vol in process, with listed run by
// the copy between the listing of each entry and its open. The call is
// made directly, not over gRPC, so the hook is set without a race.
func snapshotWithHook(t *testing.T, e *testEnv, name, vol string, listed func(rel string)) (*csi.Snapshot, error) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	e.d.copier.Hooks = &fscopy.Hooks{Listed: listed}
	defer func() { e.d.copier.Hooks = nil }()
	resp, err := (&controllerServer{d: e.d}).CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: vol})
	return resp.GetSnapshot(), err
}

// once returns a hook that runs f the first time rel is listed.
func once(rel string, f func()) func(string) {
	var done atomic.Bool
	return func(r string) {
		if r == rel && !done.Swap(true) {
			f()
		}
	}
}

// TestSnapshotOfGrowingFileSurvivesRestart: a file that grows between the
// listing and the copy must not make the start-up check drop the snapshot
// (the manifest took the size at listing while the copy read more).
func TestSnapshotOfGrowingFileSurvivesRestart(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "busy", 64<<20, mountCap()).GetVolumeId()
	root := e.d.volumePath(vol)
	mustDo(t, os.WriteFile(filepath.Join(root, "log"), randomBytes(t, 4096), 0o644))
	grow := once("log", func() {
		f, err := os.OpenFile(filepath.Join(root, "log"), os.O_APPEND|os.O_WRONLY, 0)
		mustDo(t, err)
		_, err = f.Write(randomBytes(t, 10000))
		mustDo(t, err)
		mustDo(t, f.Close())
	})
	snap, err := snapshotWithHook(t, e, "busy-snap", vol, grow)
	if err != nil {
		t.Fatal(err)
	}
	d := e.restart(t)
	if _, ok := d.snapshots.Get(snap.GetSnapshotId()); !ok {
		t.Fatal("the start-up check dropped a snapshot of a file that grew during the copy")
	}
	if got, _ := os.ReadFile(filepath.Join(d.snapshotPath(snap.GetSnapshotId()), "log")); len(got) != 14096 {
		t.Fatalf("copied %d bytes of log, want the 14096 it held when it was opened", len(got))
	}
}

// TestSnapshotSkipsEntriesThatVanish: entries deleted after their
// directory was listed are left out; the snapshot succeeds and survives a
// restart.
func TestSnapshotSkipsEntriesThatVanish(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "churn", 64<<20, mountCap()).GetVolumeId()
	root := e.d.volumePath(vol)
	mustDo(t, os.WriteFile(filepath.Join(root, "a"), []byte("a"), 0o644))
	mustDo(t, os.WriteFile(filepath.Join(root, "b"), []byte("b"), 0o644))
	mustDo(t, os.MkdirAll(filepath.Join(root, "c", "d"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(root, "c", "d", "e"), []byte("e"), 0o644))
	mustDo(t, os.Symlink("a", filepath.Join(root, "l")))
	remove := once("a", func() {
		for _, p := range []string{"b", "c", "l"} {
			mustDo(t, os.RemoveAll(filepath.Join(root, p)))
		}
	})
	snap, err := snapshotWithHook(t, e, "churn-snap", vol, remove)
	if err != nil {
		t.Fatalf("a file deleted during the copy failed the snapshot: %v", err)
	}
	path := e.d.snapshotPath(snap.GetSnapshotId())
	if got, want := snapshotTree(t, path), []string{path, filepath.Join(path, "a")}; !slices.Equal(got, want) {
		t.Fatalf("snapshot holds %v, want %v", got, want)
	}
	if d := e.restart(t); !hasSnapshot(d, snap.GetSnapshotId()) {
		t.Fatal("the start-up check dropped the snapshot")
	}
}

func hasSnapshot(d *Driver, id string) bool { _, ok := d.snapshots.Get(id); return ok }

// attack is a driver with a volume of a hostile workload, and a secret file
// and a folder holding one outside the data folder, as another volume or a
// pod's token would be.
type attack struct {
	e *testEnv
	// vol is the volume's ID, root its folder.
	vol, root             string
	secretFile, secretDir string
	secret                []byte
}

// newAttack starts a driver with an empty filesystem volume named name and
// writes the secret.
func newAttack(t *testing.T, name string) *attack {
	t.Helper()
	a := &attack{e: newTestEnv(t)}
	a.vol = a.e.createVolume(t, name, 64<<20, mountCap()).GetVolumeId()
	a.root = a.e.d.volumePath(a.vol)
	a.secret = []byte("SECRET-" + fmt.Sprint(time.Now().UnixNano()) + "-do-not-copy")
	a.secretDir = filepath.Join(a.e.dir, "other-volume")
	mustDo(t, os.Mkdir(a.secretDir, 0o700))
	a.secretFile = filepath.Join(a.secretDir, "token")
	mustDo(t, os.WriteFile(a.secretFile, a.secret, 0o600))
	return a
}

// treeHolds reports whether any regular file below root contains b.
func treeHolds(t *testing.T, root string, b []byte) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		found = found || bytes.Contains(data, b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestSnapshotNeverFollowsSwappedSymlinks replaces, between the listing and
// the open, a file with a symlink to a secret outside the volume, a folder
// with a symlink to a folder outside it and a file with a FIFO: no secret
// byte reaches the snapshot or a volume restored from it, and the FIFO
// does not block the copy.
func TestSnapshotNeverFollowsSwappedSymlinks(t *testing.T) {
	a := newAttack(t, "attacker")
	e, vol, root, secret := a.e, a.vol, a.root, a.secret
	mustDo(t, os.WriteFile(filepath.Join(root, "0first"), []byte("x"), 0o644))
	mustDo(t, os.WriteFile(filepath.Join(root, "file"), []byte("mine"), 0o644))
	mustDo(t, os.Mkdir(filepath.Join(root, "folder"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(root, "pipe"), []byte("mine"), 0o644))
	swap := once("0first", func() {
		for name, target := range map[string]string{"file": a.secretFile, "folder": a.secretDir} {
			mustDo(t, os.RemoveAll(filepath.Join(root, name)))
			mustDo(t, os.Symlink(target, filepath.Join(root, name)))
		}
		mustDo(t, os.Remove(filepath.Join(root, "pipe")))
		mustDo(t, unix.Mkfifo(filepath.Join(root, "pipe"), 0o644))
	})
	done := make(chan struct{})
	var snap *csi.Snapshot
	var err error
	go func() { defer close(done); snap, err = snapshotWithHook(t, e, "attack-snap", vol, swap) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the copy blocked on a FIFO swapped in for a file")
	}
	if err != nil {
		t.Fatal(err)
	}
	path := e.d.snapshotPath(snap.GetSnapshotId())
	if treeHolds(t, path, secret) {
		t.Fatal("the snapshot holds bytes of a file outside the volume")
	}
	restored := e.restoreVolume(t, "attack-restored", snap.GetSnapshotId(), 64<<20, mountCap())
	if treeHolds(t, e.d.volumePath(restored), secret) {
		t.Fatal("the restored volume holds bytes of a file outside the volume")
	}
	if d := e.restart(t); !hasSnapshot(d, snap.GetSnapshotId()) {
		t.Fatal("the start-up check dropped the snapshot")
	}
}

// TestSnapshotExchangeAttack runs the attack of issue 15: a workload
// exchanges a file of its volume with a symlink to a secret outside it
// (renameat2 RENAME_EXCHANGE) in a tight loop, and the same for a folder,
// while snapshots are taken. Before openat2 a good share of the snapshots
// carried the secret.
func TestSnapshotExchangeAttack(t *testing.T) {
	a := newAttack(t, "loop")
	e, vol, root, secret := a.e, a.vol, a.root, a.secret
	mustDo(t, os.WriteFile(filepath.Join(root, "victim"), []byte("mine"), 0o644))
	mustDo(t, os.Symlink(a.secretFile, filepath.Join(root, "swap")))
	mustDo(t, os.Mkdir(filepath.Join(root, "vdir"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(root, "vdir", "token"), []byte("mine"), 0o644))
	mustDo(t, os.Symlink(a.secretDir, filepath.Join(root, "swapdir")))
	stop := make(chan struct{})
	exchanged := make(chan int)
	go func() {
		n := 0
		defer func() { exchanged <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, pair := range [][2]string{{"victim", "swap"}, {"vdir", "swapdir"}} {
				if unix.Renameat2(unix.AT_FDCWD, filepath.Join(root, pair[0]), unix.AT_FDCWD, filepath.Join(root, pair[1]), unix.RENAME_EXCHANGE) == nil {
					n++
				}
			}
		}
	}()
	const snaps = 60
	leaks, failed := 0, 0
	for i := range snaps {
		resp, err := e.ctrl.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: fmt.Sprintf("s%d", i), SourceVolumeId: vol})
		if err != nil {
			failed++
			t.Errorf("snapshot %d: %v", i, err)
			continue
		}
		if treeHolds(t, e.d.snapshotPath(resp.GetSnapshot().GetSnapshotId()), secret) {
			leaks++
		}
	}
	close(stop)
	n := <-exchanged
	t.Logf("%d snapshots during %d exchanges: %d carry the secret, %d failed", snaps, n, leaks, failed)
	if leaks > 0 {
		t.Fatalf("%d of %d snapshots carry bytes from outside the volume", leaks, snaps)
	}
}

// TestCopiesKeepHardLinks: names of one file stay one file in a snapshot
// and in a volume restored from it, and the start-up check accepts it.
func TestCopiesKeepHardLinks(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "links", 64<<20, mountCap()).GetVolumeId()
	root := e.d.volumePath(vol)
	mustDo(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(root, "a"), randomBytes(t, 5000), 0o644))
	mustDo(t, os.Link(filepath.Join(root, "a"), filepath.Join(root, "b")))
	mustDo(t, os.Link(filepath.Join(root, "a"), filepath.Join(root, "sub", "c")))
	mustDo(t, os.WriteFile(filepath.Join(root, "single"), []byte("x"), 0o644))
	snap := e.createSnapshot(t, "links-snap", vol)
	restored := e.restoreVolume(t, "links-restored", snap.GetSnapshotId(), 64<<20, mountCap())
	for what, dir := range map[string]string{"snapshot": e.d.snapshotPath(snap.GetSnapshotId()), "restored volume": e.d.volumePath(restored)} {
		a := inode(t, filepath.Join(dir, "a"))
		if inode(t, filepath.Join(dir, "b")) != a || inode(t, filepath.Join(dir, "sub", "c")) != a {
			t.Errorf("%s: a, b and sub/c are separate files, want one file with three names", what)
		}
		if !sameFile(t, filepath.Join(root, "a"), filepath.Join(dir, "sub", "c")) {
			t.Errorf("%s: sub/c differs from the source", what)
		}
	}
	if d := e.restart(t); !hasSnapshot(d, snap.GetSnapshotId()) {
		t.Fatal("the start-up check dropped a snapshot with hard links")
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	mustDo(t, unix.Lstat(path, &st))
	return st.Ino
}
