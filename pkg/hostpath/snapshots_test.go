//go:build linux

package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/shutter-csi/shutter/pkg/hostpath/fscopy"
)

// restoreVolume creates a volume of size bytes from a snapshot and returns
// its ID.
func (e *testEnv) restoreVolume(t *testing.T, name, snapID string, size int64, c *csi.VolumeCapability) string {
	t.Helper()
	return e.createVolumeFrom(t, name, size, c, snapshotSource(snapID)).GetVolumeId()
}

// wantNoData fails unless nothing exists at a snapshot's data path, under
// its final or its temporary name.
func wantNoData(t *testing.T, d *Driver, snapID string) {
	t.Helper()
	for _, p := range []string{d.snapshotPath(snapID), tempPath(d.snapshotPath(snapID))} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("snapshot data at %s: %v", p, err)
		}
	}
}

// wantEmptyRecord fails unless the snapshot's record is marked empty with
// the given permission bits.
func wantEmptyRecord(t *testing.T, d *Driver, snapID string, mode fs.FileMode) {
	t.Helper()
	got, ok := d.snapshots.Get(snapID)
	if !ok || !got.Empty || got.Mode != mode || got.Manifest != nil {
		t.Fatalf("snapshot record = %+v, %v; want an empty one with mode %v and no manifest", got, ok, mode)
	}
}

// modeOf returns the permission bits of path, special bits included.
func modeOf(t *testing.T, path string) fs.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

// hasDataExtent reports whether the file at path has any data extent.
func hasDataExtent(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	mustDo(t, err)
	defer f.Close()
	_, err = unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// TestEmptyMountSnapshotIsRecordOnly: a snapshot of a filesystem volume
// whose root has no entries writes no data, survives a restart, restores
// to an empty directory with the source's permission bits (without a
// pending-restore marker, with background sync on) and deletes cleanly.
func TestEmptyMountSnapshotIsRecordOnly(t *testing.T) {
	e := newTestEnv(t, func(o *Options) { o.Sync = true; o.BackgroundRestoreSync = true })
	vol := e.createVolume(t, "empty-fs", 8<<20, mountCap())
	const mode = 0o751 | fs.ModeSetgid
	if fscopy.CanChown {
		mustDo(t, os.Lchown(e.d.volumePath(vol.GetVolumeId()), 999, 998)) // before chmod, which chown undoes
	}
	if err := os.Chmod(e.d.volumePath(vol.GetVolumeId()), mode); err != nil {
		t.Fatal(err)
	}
	snap := e.createSnapshot(t, "empty-fs-snap", vol.GetVolumeId())
	if !snap.GetReadyToUse() || snap.GetSizeBytes() != 8<<20 {
		t.Fatalf("snapshot = %v", snap)
	}
	wantEmptyRecord(t, e.d, snap.GetSnapshotId(), mode)
	wantNoData(t, e.d, snap.GetSnapshotId())
	list, err := e.ctrl.ListSnapshots(context.Background(), &csi.ListSnapshotsRequest{SourceVolumeId: vol.GetVolumeId()})
	if err != nil || len(list.GetEntries()) != 1 || list.GetEntries()[0].GetSnapshot().GetSizeBytes() != 8<<20 {
		t.Fatalf("ListSnapshots = %v, %v", list, err)
	}

	// A restarted driver keeps the snapshot: it needs no data.
	d := e.restart(t)
	wantEmptyRecord(t, d, snap.GetSnapshotId(), mode)

	restored := e.restoreVolume(t, "empty-fs-restored", snap.GetSnapshotId(), 16<<20, mountCap())
	path := e.d.volumePath(restored)
	entries, err := os.ReadDir(path)
	if err != nil || len(entries) != 0 {
		t.Fatalf("restored volume holds %v, %v; want an empty directory", entries, err)
	}
	if got := modeOf(t, path); got != mode {
		t.Fatalf("restored root has mode %v, want %v", got, mode)
	}
	if a := treeAttrs(t, path)["."]; fscopy.CanChown && (a.uid != 999 || a.gid != 998) {
		t.Fatalf("restored root is owned by %d:%d, want 999:998", a.uid, a.gid)
	}
	if hasMarker(t, e.d.opts.DataDir, restored) {
		t.Fatal("a restore from an empty snapshot left a pending-restore marker")
	}
	if _, err := e.ctrl.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.d.snapshots.Get(snap.GetSnapshotId()); ok {
		t.Fatal("deleted snapshot still has a record")
	}
}

// TestEmptyBlockSnapshotRestoresSparseFile: a snapshot of a block volume
// without data extents writes no data and restores to a sparse file of the
// requested size with the source file's permission bits.
func TestEmptyBlockSnapshotRestoresSparseFile(t *testing.T) {
	e := newTestEnv(t, func(o *Options) { o.Sync = true })
	vol := e.createVolume(t, "empty-blk", 8<<20, blockCap())
	if err := os.Chmod(e.d.volumePath(vol.GetVolumeId()), 0o604); err != nil {
		t.Fatal(err)
	}
	snap := e.createSnapshot(t, "empty-blk-snap", vol.GetVolumeId())
	wantEmptyRecord(t, e.d, snap.GetSnapshotId(), 0o604)
	wantNoData(t, e.d, snap.GetSnapshotId())
	for _, size := range []int64{8 << 20, 24 << 20} {
		id := e.restoreVolume(t, fmt.Sprintf("empty-blk-restored-%d", size), snap.GetSnapshotId(), size, blockCap())
		path := e.d.volumePath(id)
		info, err := os.Stat(path)
		if err != nil || info.Size() != size || !info.Mode().IsRegular() {
			t.Fatalf("restored file = %v, %v; want a regular file of %d bytes", info, err, size)
		}
		if hasDataExtent(t, path) {
			t.Fatal("restored file has data extents, want a sparse file")
		}
		if got := modeOf(t, path); got != 0o604 {
			t.Fatalf("restored file has mode %v, want 0604", got)
		}
	}
	// The snapshot is as large as its volume: a smaller restore is refused.
	_, err := e.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "too-small", CapacityRange: &csi.CapacityRange{RequiredBytes: 4 << 20}, VolumeCapabilities: []*csi.VolumeCapability{blockCap()},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshotId()},
		}},
	})
	if err == nil {
		t.Fatal("restored an 8 MiB snapshot into 4 MiB")
	}
}

// TestSnapshotCopiesVolumesWithData: only volumes without any data are
// snapshotted as records; everything else is still copied.
func TestSnapshotCopiesVolumesWithData(t *testing.T) {
	tests := []struct {
		name string
		c    *csi.VolumeCapability
		fill func(t *testing.T, e *testEnv, volID string)
	}{
		{name: "file", c: mountCap(), fill: func(t *testing.T, e *testEnv, volID string) {
			if err := os.WriteFile(filepath.Join(e.d.volumePath(volID), "f"), randomBytes(t, 4096), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "empty file", c: mountCap(), fill: func(t *testing.T, e *testEnv, volID string) {
			if err := os.WriteFile(filepath.Join(e.d.volumePath(volID), "f"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "empty subdirectory", c: mountCap(), fill: func(t *testing.T, e *testEnv, volID string) {
			if err := os.Mkdir(filepath.Join(e.d.volumePath(volID), "d"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "block data", c: blockCap(), fill: func(t *testing.T, e *testEnv, volID string) {
			e.writeAt(t, volID, 1<<20, randomBytes(t, 4096))
		}},
		{name: "block zeros written", c: blockCap(), fill: func(t *testing.T, e *testEnv, volID string) {
			e.writeAt(t, volID, 0, make([]byte, 4096))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t, func(o *Options) { o.Sync = true })
			vol := e.createVolume(t, "full", 4<<20, tt.c)
			tt.fill(t, e, vol.GetVolumeId())
			snap := e.createSnapshot(t, "full-snap", vol.GetVolumeId())
			rec, _ := e.d.snapshots.Get(snap.GetSnapshotId())
			if rec.Empty || rec.Manifest == nil {
				t.Fatalf("record = %+v, want a copy with a manifest", rec)
			}
			m, err := fscopy.ManifestOf(e.d.snapshotPath(snap.GetSnapshotId()))
			if err != nil || m != *rec.Manifest {
				t.Fatalf("snapshot data has manifest %+v, %v; the record %+v", m, err, *rec.Manifest)
			}
		})
	}
}

// TestRecoverRemovesDataOfEmptySnapshot: data found under an empty
// snapshot's name (left by an earlier attempt) is removed at start, the
// record kept; deleting an empty snapshot removes such data too.
func TestRecoverRemovesDataOfEmptySnapshot(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "stray", 1<<20, mountCap())
	kept := e.createSnapshot(t, "kept", vol.GetVolumeId())
	gone := e.createSnapshot(t, "gone", vol.GetVolumeId())
	for _, id := range []string{kept.GetSnapshotId(), gone.GetSnapshotId()} {
		if err := os.MkdirAll(filepath.Join(e.d.snapshotPath(id), "stale"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.ctrl.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: gone.GetSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	wantNoData(t, e.d, gone.GetSnapshotId())
	d := e.restart(t)
	wantEmptyRecord(t, d, kept.GetSnapshotId(), 0o777)
	wantNoData(t, d, kept.GetSnapshotId())
}

// TestGroupSnapshotMixesEmptyAndCopiedMembers: in one group, a member of an
// empty volume is a record only and one of a volume with data a copy; both
// restore, and deleting the group removes both.
func TestGroupSnapshotMixesEmptyAndCopiedMembers(t *testing.T) {
	e := newTestEnv(t, func(o *Options) { o.Sync = true })
	full := e.createVolume(t, "g-full", 4<<20, blockCap())
	empty := e.createVolume(t, "g-empty", 4<<20, mountCap())
	data := randomBytes(t, 64<<10)
	e.writeAt(t, full.GetVolumeId(), 1<<20, data)
	resp, err := e.group.CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{
		Name: "mixed", SourceVolumeIds: []string{full.GetVolumeId(), empty.GetVolumeId()},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := resp.GetGroupSnapshot()
	fullSnap, emptySnap := memberID(g.GetGroupSnapshotId(), full.GetVolumeId()), memberID(g.GetGroupSnapshotId(), empty.GetVolumeId())
	wantEmptyRecord(t, e.d, emptySnap, 0o777)
	wantNoData(t, e.d, emptySnap)
	if !sameFile(t, e.d.volumePath(full.GetVolumeId()), e.d.snapshotPath(fullSnap)) {
		t.Fatal("the member with data was not copied")
	}
	restoredFull := e.restoreVolume(t, "g-full-restored", fullSnap, 4<<20, blockCap())
	restoredEmpty := e.restoreVolume(t, "g-empty-restored", emptySnap, 4<<20, mountCap())
	if !sameFile(t, e.d.volumePath(full.GetVolumeId()), e.d.volumePath(restoredFull)) {
		t.Fatal("restored member differs from its volume")
	}
	if entries, err := os.ReadDir(e.d.volumePath(restoredEmpty)); err != nil || len(entries) != 0 {
		t.Fatalf("restored empty member holds %v, %v", entries, err)
	}
	if _, err := e.group.DeleteVolumeGroupSnapshot(context.Background(), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: g.GetGroupSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{fullSnap, emptySnap} {
		if _, ok := e.d.snapshots.Get(id); ok {
			t.Fatalf("member %s survived its group", id)
		}
		wantNoData(t, e.d, id)
	}
}

// TestSnapshotMetadataWithEmptySnapshots: an empty block snapshot has no
// allocated blocks, and a delta against one treats it as all holes.
func TestSnapshotMetadataWithEmptySnapshots(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "meta", 16<<20, blockCap())
	empty := e.createSnapshot(t, "meta-empty", vol.GetVolumeId())
	e.writeAt(t, vol.GetVolumeId(), 2<<20, randomBytes(t, 128<<10))
	full := e.createSnapshot(t, "meta-full", vol.GetVolumeId())
	if rec, _ := e.d.snapshots.Get(empty.GetSnapshotId()); !rec.Empty {
		t.Fatal("the first snapshot is not empty; the test needs it to be")
	}
	alloc, err := e.meta.GetMetadataAllocated(context.Background(), &csi.GetMetadataAllocatedRequest{SnapshotId: empty.GetSnapshotId()})
	if err != nil {
		t.Fatal(err)
	}
	if got := collect(t, alloc.Recv); len(got) != 0 {
		t.Fatalf("allocated blocks of an empty snapshot = %v, want none", got)
	}
	changed := [][2]int64{{2 << 20, 128 << 10}}
	tests := []struct {
		name         string
		base, target string
		want         [][2]int64
	}{
		{name: "empty base", base: empty.GetSnapshotId(), target: full.GetSnapshotId(), want: changed},
		{name: "empty target", base: full.GetSnapshotId(), target: empty.GetSnapshotId(), want: changed},
		{name: "both empty", base: empty.GetSnapshotId(), target: empty.GetSnapshotId()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			delta, err := e.meta.GetMetadataDelta(context.Background(), &csi.GetMetadataDeltaRequest{
				BaseSnapshotId: tt.base, TargetSnapshotId: tt.target,
			})
			if err != nil {
				t.Fatal(err)
			}
			got := collect(t, delta.Recv)
			if len(got) != len(tt.want) || (len(got) > 0 && got[0] != tt.want[0]) {
				t.Fatalf("delta = %v, want %v", got, tt.want)
			}
		})
	}
}
