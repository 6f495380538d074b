//go:build linux

package hostpath

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

func TestGroupSnapshotLifecycle(t *testing.T) {
	e := newTestEnv(t)
	a := e.createVolume(t, "ga", 4<<20, blockCap())
	b := e.createVolume(t, "gb", 4<<20, mountCap())
	// Both hold data, so that both members have data to remove.
	e.writeAt(t, a.GetVolumeId(), 0, randomBytes(t, 4096))
	if err := os.WriteFile(filepath.Join(e.d.volumePath(b.GetVolumeId()), "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	req := &csi.CreateVolumeGroupSnapshotRequest{Name: "g1", SourceVolumeIds: []string{b.GetVolumeId(), a.GetVolumeId()}}
	resp, err := e.group.CreateVolumeGroupSnapshot(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	g := resp.GetGroupSnapshot()
	if !g.GetReadyToUse() || len(g.GetSnapshots()) != 2 {
		t.Fatalf("group = %v", g)
	}
	for _, s := range g.GetSnapshots() {
		if s.GetGroupSnapshotId() != g.GetGroupSnapshotId() || !s.GetCreationTime().AsTime().Equal(g.GetCreationTime().AsTime()) {
			t.Fatalf("member %v does not share the group's ID and time", s)
		}
	}
	again, err := e.group.CreateVolumeGroupSnapshot(context.Background(), req)
	if err != nil || again.GetGroupSnapshot().GetGroupSnapshotId() != g.GetGroupSnapshotId() {
		t.Fatalf("repeat = %v, %v", again, err)
	}
	_, err = e.group.CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{Name: "g1", SourceVolumeIds: []string{a.GetVolumeId()}})
	wantCode(t, err, codes.AlreadyExists)

	member := g.GetSnapshots()[0].GetSnapshotId()
	_, err = e.ctrl.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: member})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = e.group.GetVolumeGroupSnapshot(context.Background(), &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: g.GetGroupSnapshotId(), SnapshotIds: []string{member}})
	wantCode(t, err, codes.InvalidArgument)

	if _, err := e.group.DeleteVolumeGroupSnapshot(context.Background(), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: g.GetGroupSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.d.snapshotPath(member)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("member data still there: %v", err)
	}
	_, err = e.group.GetVolumeGroupSnapshot(context.Background(), &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: g.GetGroupSnapshotId()})
	wantCode(t, err, codes.NotFound)
}

func TestGroupSnapshotMissingVolume(t *testing.T) {
	e := newTestEnv(t)
	a := e.createVolume(t, "ga", 1<<20, blockCap())
	_, err := e.group.CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{
		Name: "g", SourceVolumeIds: []string{a.GetVolumeId(), "vol-nothere"},
	})
	wantCode(t, err, codes.NotFound)
	if snaps := e.d.snapshots.List(); len(snaps) != 0 {
		t.Fatalf("failed group left snapshots %v", snaps)
	}
}

// collect drains a metadata stream into [offset, size] pairs.
func collect[R interface{ GetBlockMetadata() []*csi.BlockMetadata }](t *testing.T, recv func() (R, error)) [][2]int64 {
	t.Helper()
	var out [][2]int64
	for {
		r, err := recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range r.GetBlockMetadata() {
			out = append(out, [2]int64{b.GetByteOffset(), b.GetSizeBytes()})
		}
	}
}

func TestSnapshotMetadataAllocatedAndDelta(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "blk", 16<<20, blockCap())
	e.writeAt(t, vol.GetVolumeId(), 1<<20, randomBytes(t, 1<<20))
	base := e.createSnapshot(t, "base", vol.GetVolumeId())
	e.writeAt(t, vol.GetVolumeId(), 8<<20, randomBytes(t, 128<<10))
	target := e.createSnapshot(t, "target", vol.GetVolumeId())

	alloc, err := e.meta.GetMetadataAllocated(context.Background(), &csi.GetMetadataAllocatedRequest{SnapshotId: target.GetSnapshotId()})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, alloc.Recv)
	want := [][2]int64{{1 << 20, 1 << 20}, {8 << 20, 128 << 10}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("allocated = %v, want %v", got, want)
	}

	delta, err := e.meta.GetMetadataDelta(context.Background(), &csi.GetMetadataDeltaRequest{
		BaseSnapshotId: base.GetSnapshotId(), TargetSnapshotId: target.GetSnapshotId(), MaxResults: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	got = collect(t, delta.Recv)
	if len(got) != 1 || got[0] != [2]int64{8 << 20, 128 << 10} {
		t.Fatalf("delta = %v, want one 128 KiB range at 8 MiB", got)
	}

	bad, err := e.meta.GetMetadataAllocated(context.Background(), &csi.GetMetadataAllocatedRequest{SnapshotId: target.GetSnapshotId(), StartingOffset: 32 << 20})
	if err == nil {
		_, err = bad.Recv()
	}
	wantCode(t, err, codes.OutOfRange)
}
