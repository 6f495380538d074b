//go:build linux

package hostpath

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/shutter-csi/shutter/pkg/hostpath/state"
	"github.com/shutter-csi/shutter/test/testenv"
)

// restoreEnv starts a driver with fsync and background restore sync on and
// returns a restored block volume's ID with the data it must hold.
func restoreEnv(t *testing.T) (e *testEnv, volID string, want []byte) {
	t.Helper()
	e = newTestEnv(t, func(o *Options) { o.Sync = true; o.BackgroundRestoreSync = true })
	src := e.createVolume(t, "restore-src", 4<<20, blockCap())
	fillVolume(t, e.d.volumePath(src.GetVolumeId()), 4<<20)
	want, err := os.ReadFile(e.d.volumePath(src.GetVolumeId()))
	if err != nil {
		t.Fatal(err)
	}
	snap := e.createSnapshot(t, "restore-snap", src.GetVolumeId())
	return e, e.restoreVolume(t, "restored", snap.GetSnapshotId(), 4<<20, blockCap()), want
}

// hasMarker reports whether the record log below dataDir holds a
// pending-restore marker for volID. It reads the log from outside, so it
// also works on a driver running in another process.
func hasMarker(t *testing.T, dataDir, volID string) bool {
	t.Helper()
	return slices.Contains(liveIDs(t, dataDir, "restores"), volID)
}

// waitMarkerGone polls until the driver, in this process or another, has
// flushed the restored volume volID and dropped its marker.
func waitMarkerGone(t *testing.T, dataDir, volID string) {
	t.Helper()
	testenv.WaitUntil(t, "the driver flushes the restored volume", time.Minute, func(context.Context) bool {
		return !hasMarker(t, dataDir, volID)
	})
}

// liveIDs returns the IDs of table's records in the record log below
// dataDir. It opens a copy of the log, so that a driver using the log
// meanwhile, in this process or another, is not disturbed.
func liveIDs(t *testing.T, dataDir, table string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dataDir, "state", "records.log"))
	mustDo(t, err)
	dir, err := os.MkdirTemp("", "records-")
	mustDo(t, err)
	defer os.RemoveAll(dir)
	mustDo(t, os.WriteFile(filepath.Join(dir, "records.log"), data, 0o600))
	l, err := state.OpenLog(dir, false)
	mustDo(t, err)
	defer l.Close()
	tab, err := state.OpenTable[json.RawMessage](l, table)
	mustDo(t, err)
	return tab.IDs()
}

func TestBackgroundRestoreSyncRemovesMarker(t *testing.T) {
	e, volID, want := restoreEnv(t)
	if err := e.d.restores.wait(context.Background(), volID); err != nil {
		t.Fatal(err)
	}
	if hasMarker(t, e.d.opts.DataDir, volID) {
		t.Fatal("marker left after the flush")
	}
	got, err := os.ReadFile(e.d.volumePath(volID))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("restored data differs from the snapshot (err %v)", err)
	}
}

// TestRecoverRestoreAfterReboot simulates a power failure before a
// restored volume was flushed: the marker names another boot and the data
// is torn. Recovery must copy the snapshot again before serving.
func TestRecoverRestoreAfterReboot(t *testing.T) {
	e, volID, want := restoreEnv(t)
	e.d.restores.drain()
	snapID := deriveID(snapshotPrefix, "restore-snap")
	torn := state.PendingRestore{VolumeID: volID, SnapshotID: snapID, BootID: "an-earlier-boot"}
	orphan := state.PendingRestore{VolumeID: "vol-never-recorded", SnapshotID: snapID, BootID: "an-earlier-boot"}
	for _, m := range []state.PendingRestore{torn, orphan} {
		if err := e.d.restores.markers.Put(m.VolumeID, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.d.volumePath(volID), []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}

	d := e.restart(t)
	d.restores.drain()
	got, err := os.ReadFile(d.volumePath(volID))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("volume not restored again after the reboot (%d bytes, err %v)", len(got), err)
	}
	for _, id := range []string{volID, orphan.VolumeID} {
		if hasMarker(t, d.opts.DataDir, id) {
			t.Fatalf("marker of %s left after recovery", id)
		}
	}
	if _, ok := d.volumes.Get(volID); !ok {
		t.Fatal("restored volume lost in recovery")
	}
}

// TestRecoverRestoreAfterProcessRestart: same boot, so the page cache holds
// the complete copy; recovery flushes it in the background and keeps it.
func TestRecoverRestoreAfterProcessRestart(t *testing.T) {
	e, volID, want := restoreEnv(t)
	e.d.restores.drain()
	m := state.PendingRestore{VolumeID: volID, SnapshotID: deriveID(snapshotPrefix, "restore-snap"), BootID: readBootID(), Copied: true}
	if m.BootID == "" {
		t.Skip("no boot ID on this system")
	}
	if err := e.d.restores.markers.Put(volID, m); err != nil {
		t.Fatal(err)
	}
	d := e.restart(t)
	if err := d.restores.wait(context.Background(), volID); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.restores.markers.Get(volID); ok {
		t.Fatal("marker left after the background flush")
	}
	got, err := os.ReadFile(d.volumePath(volID))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("restored data changed (err %v)", err)
	}
}

// TestRecoverRestoreCutShort: same boot, but the driver died before the
// copy finished (the marker is not marked copied) and left torn data.
// Recovery must copy the snapshot again.
func TestRecoverRestoreCutShort(t *testing.T) {
	e, volID, want := restoreEnv(t)
	e.d.restores.drain()
	m := state.PendingRestore{VolumeID: volID, SnapshotID: deriveID(snapshotPrefix, "restore-snap"), BootID: readBootID()}
	if err := e.d.restores.markers.Put(volID, m); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(e.d.volumePath(volID), 1<<20); err != nil {
		t.Fatal(err)
	}
	d := e.restart(t)
	got, err := os.ReadFile(d.volumePath(volID))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("volume not restored again after an unfinished copy (%d bytes, err %v)", len(got), err)
	}
	if _, ok := d.restores.markers.Get(volID); ok {
		t.Fatal("marker left after recovery")
	}
}

// TestDeleteSnapshotWaitsForRestoreFlush: a snapshot must outlive every
// marker naming it, or a reboot could leave nothing to restore from.
func TestDeleteSnapshotWaitsForRestoreFlush(t *testing.T) {
	e, volID, _ := restoreEnv(t)
	snapID := deriveID(snapshotPrefix, "restore-snap")
	// A flush of the restored volume that has not finished (the real one
	// may have).
	e.d.restores.drain()
	p := &pendingFlush{snapshotID: snapID, done: make(chan struct{})}
	e.d.restores.mu.Lock()
	e.d.restores.pending[volID] = p
	e.d.restores.mu.Unlock()
	// DeleteSnapshot waits for it: here until its request is cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := (&controllerServer{d: e.d}).DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snapID})
	wantCode(t, err, codes.Canceled)
	if !hasSnapshot(e.d, snapID) {
		t.Fatal("DeleteSnapshot removed the snapshot before the restored volume was flushed")
	}
	close(p.done)
	if _, err := e.ctrl.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: snapID}); err != nil {
		t.Fatal(err)
	}
	if hasSnapshot(e.d, snapID) {
		t.Fatal("the snapshot outlived the flush")
	}
}

func TestDeleteVolumeDropsRestoreMarker(t *testing.T) {
	e, volID, _ := restoreEnv(t)
	if _, err := e.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: volID}); err != nil {
		t.Fatal(err)
	}
	e.d.restores.drain()
	if hasMarker(t, e.d.opts.DataDir, volID) {
		t.Fatal("marker of a deleted volume left")
	}
}

// TestSIGKILLBeforeRestoreFlush kills the driver right after CreateVolume
// from a snapshot returned, while the background flush still runs, and
// checks that the restarted driver keeps the volume, flushes it and leaves
// its data equal to the snapshot.
func TestSIGKILLBeforeRestoreFlush(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the driver and copies 256 MiB")
	}
	bin, dir, p, srcID := startWithFilledVolume(t, "kill-src", 256<<20)
	ctx := context.Background()
	dataDir := filepath.Join(dir, "data")
	snap, err := p.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "kill-snap", SourceVolumeId: srcID})
	if err != nil {
		t.Fatal(err)
	}
	restored, err := p.ctrl.CreateVolume(ctx, restoreRequest("kill-restored", snap.GetSnapshot().GetSnapshotId(), 256<<20, blockCap()))
	if err != nil {
		t.Fatal(err)
	}
	p.kill(t)
	volID := restored.GetVolume().GetVolumeId()
	if !hasMarker(t, dataDir, volID) {
		t.Skip("the flush finished before the kill, nothing was interrupted")
	}

	p = startDriver(t, bin, dir)
	if _, err := p.ctrl.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: volID}); err != nil {
		t.Fatalf("restored volume lost: %v", err)
	}
	waitMarkerGone(t, dataDir, volID)
	if !sameFile(t, filepath.Join(dataDir, "snapshots", snap.GetSnapshot().GetSnapshotId()), filepath.Join(dataDir, "volumes", volID)) {
		t.Fatal("restored data differs from the snapshot")
	}
}

// TestRestoreMountVolumeTree restores a tree of files (written with direct
// I/O where they fill whole blocks, through the page cache at their
// unaligned ends) and compares it with the source, file by file.
func TestRestoreMountVolumeTree(t *testing.T) {
	e := newTestEnv(t, func(o *Options) { o.Sync = true; o.BackgroundRestoreSync = true })
	src := e.createVolume(t, "tree-src", 16<<20, mountCap())
	writeTree(t, e.d.volumePath(src.GetVolumeId()))
	snap := e.createSnapshot(t, "tree-snap", src.GetVolumeId())
	restoredID := e.restoreVolume(t, "tree-restored", snap.GetSnapshotId(), 16<<20, mountCap())
	restored := e.d.volumePath(restoredID)
	for _, name := range []string{"top", "a/one", "a/b/two", "c/empty"} {
		if !sameFile(t, filepath.Join(e.d.volumePath(src.GetVolumeId()), name), filepath.Join(restored, name)) {
			t.Fatalf("restored %s differs from the source", name)
		}
	}
	if link, err := os.Readlink(filepath.Join(restored, "link")); err != nil || link != "a/one" {
		t.Fatalf("restored symlink = %q, %v", link, err)
	}
	if err := e.d.restores.wait(context.Background(), restoredID); err != nil {
		t.Fatal(err)
	}
}

// TestSIGKILLDuringRestoreCopy kills the driver while it copies a restored
// volume's data, after the volume's record was committed, and checks that
// the restarted driver keeps the volume and copies its data again.
func TestSIGKILLDuringRestoreCopy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the driver and copies 512 MiB")
	}
	const size = 512 << 20
	bin, dir, p, srcID := startWithFilledVolume(t, "copy-src", size)
	ctx := context.Background()
	dataDir := filepath.Join(dir, "data")
	snap, err := p.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "copy-snap", SourceVolumeId: srcID})
	if err != nil {
		t.Fatal(err)
	}
	volID := deriveID(volumePrefix, "copy-restored")
	volPath := filepath.Join(dataDir, "volumes", volID)
	go func() {
		_, _ = p.ctrl.CreateVolume(ctx, restoreRequest("copy-restored", snap.GetSnapshot().GetSnapshotId(), size, blockCap()))
	}()
	if !waitForPath(volPath, 10*time.Second) {
		t.Fatal("restore copy never started")
	}
	p.kill(t)

	p = startDriver(t, bin, dir)
	if _, err := p.ctrl.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: volID}); err != nil {
		t.Fatalf("volume recorded before its copy was lost: %v", err)
	}
	// Only a finished copy is flushed in the background; one cut short is
	// copied again before the driver serves, and has no marker any more.
	waitMarkerGone(t, dataDir, volID)
	if !sameFile(t, filepath.Join(dataDir, "snapshots", snap.GetSnapshot().GetSnapshotId()), volPath) {
		t.Fatal("restored data differs from the snapshot after the restart")
	}
}
