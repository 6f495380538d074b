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
