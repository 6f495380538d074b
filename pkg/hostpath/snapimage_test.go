//go:build linux

package hostpath

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
)

// TestImageSnapshotMetadata: snapshots of an image volume keep a copy of its image; the
// allocated ranges are that copy's data (applied onto zeros they rebuild it), the delta is
// exactly the 4 KiB blocks in which the two copies differ (compared here byte for byte), and a
// restore gives the files as they were at the snapshot. The filesystem is thawed after each
// snapshot; deleting a snapshot removes its copy.
func TestImageSnapshotMetadata(t *testing.T) {
	e := newImageEnv(t)
	vol := e.createVolume(t, "fs", 32<<20, mountCap()).GetVolumeId()
	root := e.d.volumePath(vol)
	one, two := randomBytes(t, 200<<10), randomBytes(t, 64<<10)
	writeFileWithin(t, filepath.Join(root, "one"), one)
	writeFileWithin(t, filepath.Join(root, "two"), two)
	a := e.createSnapshot(t, "a", vol).GetSnapshotId()

	// Changes after A: 4 KiB rewritten inside one, a new file, two removed.
	f, err := os.OpenFile(filepath.Join(root, "one"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(randomBytes(t, 4096), 100<<10); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	writeFileWithin(t, filepath.Join(root, "three"), randomBytes(t, 40<<10))
	if err := os.Remove(filepath.Join(root, "two")); err != nil {
		t.Fatal(err)
	}
	b := e.createSnapshot(t, "b", vol).GetSnapshotId()

	imgA, imgB := readAll(t, e.d.snapshotImagePath(a)), readAll(t, e.d.snapshotImagePath(b))
	if rec, _ := e.d.snapshots.Get(a); rec.ImageBytes != int64(len(imgA)) || len(imgA) != 32<<20 {
		t.Fatalf("record of A: image %d bytes, the copy %d, want 32 MiB", rec.ImageBytes, len(imgA))
	}
	alloc, err := e.meta.GetMetadataAllocated(context.Background(), &csi.GetMetadataAllocatedRequest{SnapshotId: a})
	if err != nil {
		t.Fatal(err)
	}
	allocated := collectTyped(t, alloc.Recv, csi.BlockMetadataType_VARIABLE_LENGTH)
	rebuilt := make([]byte, len(imgA))
	for _, r := range checkRanges(t, allocated, int64(len(imgA))) {
		copy(rebuilt[r[0]:r[0]+r[1]], imgA[r[0]:r[0]+r[1]])
	}
	if !bytes.Equal(rebuilt, imgA) {
		t.Error("the allocated ranges of A applied onto zeros do not rebuild A's image")
	}
	delta, err := e.meta.GetMetadataDelta(context.Background(), &csi.GetMetadataDeltaRequest{BaseSnapshotId: a, TargetSnapshotId: b})
	if err != nil {
		t.Fatal(err)
	}
	got := collectTyped(t, delta.Recv, csi.BlockMetadataType_VARIABLE_LENGTH)
	if want := differingBlocks(imgA, imgB); len(want) == 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("delta A→B = %v, want the differing blocks %v", got, want)
	}

	restored := e.restoreVolume(t, "restored", a, 32<<20, mountCap())
	for name, want := range map[string][]byte{"one": one, "two": two} {
		if data := readAll(t, filepath.Join(e.d.volumePath(restored), name)); !bytes.Equal(data, want) {
			t.Errorf("restore of A: %s differs from what A had", name)
		}
	}
	if _, err := e.ctrl.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: a}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(e.d.snapshotImagePath(a)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the image copy of a deleted snapshot: %v", err)
	}
	e.deleteVolume(t, restored)
	e.deleteVolume(t, vol)
}

// TestImageSnapshotWithoutMetadata: without the snapshot-metadata service a snapshot of an
// image volume keeps no image copy.
func TestImageSnapshotWithoutMetadata(t *testing.T) {
	e := newImageEnv(t, func(o *Options) { o.EnableSnapshotMetadata = false })
	vol := e.createVolume(t, "fs", 16<<20, mountCap()).GetVolumeId()
	writeFileWithin(t, filepath.Join(e.d.volumePath(vol), "f"), randomBytes(t, 8192))
	snap := e.createSnapshot(t, "s", vol).GetSnapshotId()
	if rec, _ := e.d.snapshots.Get(snap); rec.ImageBytes != 0 {
		t.Errorf("record keeps an image of %d bytes", rec.ImageBytes)
	}
	if entries, _ := os.ReadDir(snapshotImagesDir(e.d.opts.DataDir)); len(entries) != 0 {
		t.Errorf("snapshot-images holds %d entries", len(entries))
	}
	e.deleteVolume(t, vol)
}

// TestImageSnapshotCapacity: a snapshot of an image volume counts its data and its image copy
// against --capacity, also when it holds no file (an empty snapshot's copy).
func TestImageSnapshotCapacity(t *testing.T) {
	e := newImageEnv(t)
	vol := e.createVolume(t, "fs", 16<<20, mountCap()).GetVolumeId()
	before := e.d.freeCapacity()
	empty := e.createSnapshot(t, "empty", vol).GetSnapshotId()
	if rec, _ := e.d.snapshots.Get(empty); !rec.Empty || rec.ImageBytes != 16<<20 {
		t.Fatalf("snapshot of an empty image volume: empty %v, image %d bytes", rec.Empty, rec.ImageBytes)
	}
	if used := before - e.d.freeCapacity(); used != 16<<20 {
		t.Errorf("the empty snapshot takes %d bytes of the capacity, want its image copy's 16 MiB", used)
	}
	writeFileWithin(t, filepath.Join(e.d.volumePath(vol), "f"), randomBytes(t, 8192))
	e.createSnapshot(t, "full", vol)
	if used := before - e.d.freeCapacity(); used != 16<<20+2*(16<<20) {
		t.Errorf("the two snapshots take %d bytes of the capacity, want 48 MiB (two copies, one tree)", used)
	}
	e.deleteVolume(t, vol)
}

// TestImageSnapshotRecovery: at start, a copy mounted by a snapshot cut short is unmounted and
// removed, a copy without a record goes to quarantine, a record whose copy is missing is
// dropped, and a volume's filesystem that a killed driver left frozen is thawed (a pod's mount
// kept it alive meanwhile).
func TestImageSnapshotRecovery(t *testing.T) {
	e := newImageEnv(t)
	vol := e.createVolume(t, "fs", 16<<20, mountCap()).GetVolumeId()
	target := e.publish(t, vol, "pod")
	writeFileWithin(t, filepath.Join(target, "f"), randomBytes(t, 8192))
	kept := e.createSnapshot(t, "kept", vol).GetSnapshotId()
	lost := e.createSnapshot(t, "lost", vol).GetSnapshotId()
	dir := snapshotImagesDir(e.d.opts.DataDir)
	if err := os.Remove(e.d.snapshotImagePath(lost)); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, "snap-orphan")
	copyFile(t, e.d.snapshotImagePath(kept), orphan)
	cutShort := filepath.Join(dir, tempPrefix+"snap-cut")
	copyFile(t, e.d.snapshotImagePath(kept), cutShort)
	if _, err := mountReadOnly(cutShort, e.d.snapshotImageMount("snap-cut")); err != nil {
		t.Fatal(err)
	}
	freeze(t, e.d.volumePath(vol))

	d := e.restart(t)
	if _, ok := d.snapshots.Get(lost); ok {
		t.Error("the record whose image copy is missing is still there")
	}
	if _, ok := d.snapshots.Get(kept); !ok {
		t.Error("the complete snapshot was dropped")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != kept {
		t.Errorf("snapshot-images holds %v, want only %s", entries, kept)
	}
	if q, _ := filepath.Glob(filepath.Join(d.opts.DataDir, quarantineDirName, "*", snapshotImagesDirName, "snap-orphan")); len(q) != 1 {
		t.Errorf("the orphan copy is not in quarantine: %v", q)
	}
	if was, err := thawFS(target); was || err != nil {
		t.Errorf("the volume's filesystem was still frozen after the start (%v)", err)
	}
	writeFileWithin(t, filepath.Join(target, "after"), randomBytes(t, 4096))
	e.unpublish(t, vol, target)
	e.deleteVolume(t, vol)
}

// freeze freezes the filesystem mounted at mnt, as a driver killed while copying its image
// would leave it; it is thawed when the test ends in any case.
func freeze(t *testing.T, mnt string) {
	t.Helper()
	f, err := os.Open(mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), ioctlFreeze, 0); err != nil {
		t.Fatalf("freeze: %v", err)
	}
	t.Cleanup(func() { _, _ = thawFS(mnt) })
}

// TestImageSnapshotFreezeIsExclusive: while one snapshot of an image volume holds the volume's
// freeze, another gets Aborted, and the filesystem is never left frozen.
func TestImageSnapshotFreezeIsExclusive(t *testing.T) {
	e := newImageEnv(t)
	vol := e.createVolume(t, "fs", 16<<20, mountCap()).GetVolumeId()
	release, err := e.d.locks.acquire(freezeKey(vol))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.ctrl.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: vol})
	wantCode(t, err, codes.Aborted)
	release()
	e.createSnapshot(t, "s", vol)
	writeFileWithin(t, filepath.Join(e.d.volumePath(vol), "f"), randomBytes(t, 4096))
	e.deleteVolume(t, vol)
}

// writeFileWithin writes a file and fails the test when that takes more than 30 seconds: a
// filesystem left frozen blocks writers.
func writeFileWithin(t *testing.T, path string, data []byte) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(path, data, 0o644) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("writing %s blocks: is the filesystem frozen?", path)
	}
}

func readAll(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	if err := os.WriteFile(to, readAll(t, from), 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkRanges fails the test unless ranges are sorted, apart, 4 KiB aligned and inside size.
func checkRanges(t *testing.T, ranges [][2]int64, size int64) [][2]int64 {
	t.Helper()
	end := int64(-1)
	for _, r := range ranges {
		if r[0] <= end || r[0]%4096 != 0 || r[1]%4096 != 0 || r[1] <= 0 || r[0]+r[1] > size {
			t.Fatalf("range %v of %v: not sorted, apart, 4 KiB aligned and inside %d bytes", r, ranges, size)
		}
		end = r[0] + r[1]
	}
	return ranges
}

// differingBlocks lists, merged, the 4 KiB blocks in which a and b (of one length) differ.
func differingBlocks(a, b []byte) [][2]int64 {
	var out [][2]int64
	for off := 0; off < len(a); off += 4096 {
		if bytes.Equal(a[off:off+4096], b[off:off+4096]) {
			continue
		}
		if n := len(out); n > 0 && out[n-1][0]+out[n-1][1] == int64(off) {
			out[n-1][1] += 4096
			continue
		}
		out = append(out, [2]int64{int64(off), 4096})
	}
	return out
}
