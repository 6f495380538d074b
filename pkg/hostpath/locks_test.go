//go:build linux

package hostpath

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

func TestIDLocksSharedAndExclusive(t *testing.T) {
	l := newIDLocks()
	r1, err := l.acquireShared([]string{"v"}, "s1")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.acquireShared([]string{"v"}, "s2")
	if err != nil {
		t.Fatalf("a second reader of v was refused: %v", err)
	}
	if _, err := l.acquire("v"); err == nil {
		t.Fatal("v taken exclusively while read")
	}
	if _, err := l.acquireShared([]string{"v"}, "s1"); err == nil {
		t.Fatal("s1 taken twice")
	}
	if _, err := l.acquireShared([]string{"w"}, "s2"); err == nil {
		t.Fatal("a refused acquire must take nothing, and s2 is busy")
	}
	if release, err := l.acquire("w"); err != nil {
		t.Fatalf("w was left held by a refused acquire: %v", err)
	} else {
		release()
	}
	r1()
	if _, err := l.acquire("v"); err == nil {
		t.Fatal("v taken exclusively while one reader is left")
	}
	r2()
	release, err := l.acquire("v")
	if err != nil {
		t.Fatalf("v still held after both readers left: %v", err)
	}
	if _, err := l.acquireShared([]string{"v"}, "s3"); err == nil {
		t.Fatal("v read while held exclusively")
	}
	release()
	if len(l.held) != 0 {
		t.Errorf("locks left held: %v", l.held)
	}
}

// TestSnapshotsOfOneVolumeProceedTogether: a snapshot of a volume is taken while another snapshot
// of it is in flight, while operations that change the volume are refused as busy.
func TestSnapshotsOfOneVolumeProceedTogether(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "shared", 1<<20, blockCap())
	id := vol.GetVolumeId()
	inFlight, err := e.d.locks.acquireShared([]string{volumeKey(id)}, snapshotKey("snapshot-in-flight"))
	if err != nil {
		t.Fatal(err)
	}
	e.createSnapshot(t, "alongside", id)
	_, err = e.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, err, codes.Aborted)
	_, err = e.ctrl.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
		VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20},
	})
	wantCode(t, err, codes.Aborted)
	inFlight()
	if _, err := e.ctrl.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
		VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20},
	}); err != nil {
		t.Fatalf("expand once no snapshot is in flight: %v", err)
	}
}
