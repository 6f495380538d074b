//go:build linux

package hostpath

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// TestSnapshotsCountAgainstCapacity: a snapshot that holds data takes as
// much of --capacity as its volume's size, so snapshots cannot fill the
// node's disk past it; an empty snapshot, a record only, takes nothing.
func TestSnapshotsCountAgainstCapacity(t *testing.T) {
	const mib = 1 << 20
	e := newTestEnv(t, func(o *Options) { o.Capacity = 10 * mib })
	full := e.createVolume(t, "full", 4*mib, mountCap()).GetVolumeId()
	mustDo(t, os.WriteFile(filepath.Join(e.d.volumePath(full), "data"), randomBytes(t, 4096), 0o644))
	first := e.createSnapshot(t, "first", full)
	free := func() int64 {
		resp, err := e.ctrl.GetCapacity(context.Background(), &csi.GetCapacityRequest{})
		mustDo(t, err)
		return resp.GetAvailableCapacity()
	}
	if got := free(); got != 2*mib {
		t.Fatalf("free capacity %d after a 4 MiB volume and its snapshot, want %d", got, 2*mib)
	}
	_, err := e.ctrl.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "second", SourceVolumeId: full})
	wantCode(t, err, codes.ResourceExhausted)
	empty := e.createVolume(t, "empty", 2*mib, mountCap()).GetVolumeId()
	e.createSnapshot(t, "of-empty", empty)
	if got := free(); got != 0 {
		t.Fatalf("free capacity %d, want 0: an empty snapshot takes nothing", got)
	}
	if _, err := e.ctrl.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: first.GetSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	e.createSnapshot(t, "second", full)
}

// TestSmallImageVolumesCountTheirImage: a filesystem volume under 16 MiB
// gets an image of 16 MiB, and that is what it takes of --capacity (what
// GetCapacity reports free and what CreateVolume checks); a snapshot of it
// takes what its data takes when that is more than the volume's size. (With
// the snapshot-metadata service on, a snapshot takes its image copy's size
// too: TestImageSnapshotCapacity.)
func TestSmallImageVolumesCountTheirImage(t *testing.T) {
	e := newImageEnv(t, func(o *Options) { o.Capacity, o.EnableSnapshotMetadata = 40*mib, false })
	free := func() int64 {
		resp, err := e.ctrl.GetCapacity(context.Background(), &csi.GetCapacityRequest{})
		mustDo(t, err)
		return resp.GetAvailableCapacity()
	}
	small := e.createVolume(t, "small", 1*mib, mountCap()).GetVolumeId()
	if got := free(); got != 24*mib {
		t.Errorf("free capacity %d after a 1 MiB image volume, want %d (its image takes 16 MiB)", got, 24*mib)
	}
	second := e.createVolume(t, "second", 1*mib, mountCap()).GetVolumeId()
	_, err := e.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "third", CapacityRange: &csi.CapacityRange{RequiredBytes: 1 * mib}, VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
	})
	wantCode(t, err, codes.ResourceExhausted)
	e.deleteVolume(t, second)
	// The image offers more than the volume's 1 MiB.
	mustDo(t, os.WriteFile(filepath.Join(e.d.volumePath(small), "data"), randomBytes(t, int(6*mib)), 0o644))
	snap := e.createSnapshot(t, "snap", small).GetSnapshotId()
	if got := free(); got != 18*mib {
		t.Errorf("free capacity %d after a snapshot of 6 MiB of data, want %d", got, 18*mib)
	}
	_, err = e.ctrl.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: snap})
	mustDo(t, err)
	e.deleteVolume(t, small)
}
