//go:build linux

package hostpath

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/shutter-csi/shutter/test/testenv"
)

// TestSnapshotMetadataExactRanges: the delta of two snapshots is exactly the 4 KiB blocks written
// in between (not the 64 KiB chunks they are compared in), in both block types; FIXED_LENGTH
// answers every range as the 4 KiB blocks covering it.
func TestSnapshotMetadataExactRanges(t *testing.T) {
	for _, tt := range []struct {
		blockType     string
		wantType      csi.BlockMetadataType
		alloc, change [][2]int64
	}{
		{BlockTypeVariable, csi.BlockMetadataType_VARIABLE_LENGTH,
			[][2]int64{{0, 8192}, {3 << 20, 4096}, {(9 << 20) + 4096, 12288}},
			[][2]int64{{4096, 4096}, {(5 << 20) + 8192, 4096}, {(9 << 20) + 8192, 4096}}},
		{BlockTypeFixed, csi.BlockMetadataType_FIXED_LENGTH,
			[][2]int64{{0, 4096}, {4096, 4096}, {3 << 20, 4096}, {(9 << 20) + 4096, 4096}, {(9 << 20) + 8192, 4096}, {(9 << 20) + 12288, 4096}},
			[][2]int64{{4096, 4096}, {(5 << 20) + 8192, 4096}, {(9 << 20) + 8192, 4096}}},
	} {
		t.Run(tt.blockType, func(t *testing.T) {
			e := newTestEnv(t, func(o *Options) { o.SnapshotMetadataBlockType = tt.blockType })
			vol := e.createVolume(t, "blk", 16<<20, blockCap()).GetVolumeId()
			for _, r := range [][2]int64{{0, 8192}, {3 << 20, 4096}, {(9 << 20) + 4096, 12288}} {
				e.writeAt(t, vol, r[0], randomBytes(t, int(r[1])))
			}
			a := e.createSnapshot(t, "a", vol).GetSnapshotId()
			for _, r := range [][2]int64{{4096, 4096}, {(5 << 20) + 8192, 4096}, {(9 << 20) + 8192, 4096}} {
				e.writeAt(t, vol, r[0], randomBytes(t, int(r[1])))
			}
			b := e.createSnapshot(t, "b", vol).GetSnapshotId()
			alloc, err := e.meta.GetMetadataAllocated(context.Background(), &csi.GetMetadataAllocatedRequest{SnapshotId: a})
			if err != nil {
				t.Fatal(err)
			}
			if got := collectTyped(t, alloc.Recv, tt.wantType); !reflect.DeepEqual(got, tt.alloc) {
				t.Errorf("allocated = %v, want %v", got, tt.alloc)
			}
			delta, err := e.meta.GetMetadataDelta(context.Background(), &csi.GetMetadataDeltaRequest{BaseSnapshotId: a, TargetSnapshotId: b})
			if err != nil {
				t.Fatal(err)
			}
			if got := collectTyped(t, delta.Recv, tt.wantType); !reflect.DeepEqual(got, tt.change) {
				t.Errorf("delta = %v, want %v", got, tt.change)
			}
		})
	}
}

// collectTyped is collect, checking every message's block type.
func collectTyped[R interface {
	GetBlockMetadata() []*csi.BlockMetadata
	GetBlockMetadataType() csi.BlockMetadataType
}](t *testing.T, recv func() (R, error), want csi.BlockMetadataType) [][2]int64 {
	t.Helper()
	return collect(t, func() (R, error) {
		r, err := recv()
		if err == nil && r.GetBlockMetadataType() != want {
			t.Errorf("block type %v, want %v", r.GetBlockMetadataType(), want)
		}
		return r, err
	})
}

// TestSnapshotMetadataRefusals: bad requests get the CSI spec's codes.
func TestSnapshotMetadataRefusals(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "blk", 16<<20, blockCap()).GetVolumeId()
	other := e.createVolume(t, "other", 16<<20, blockCap()).GetVolumeId()
	e.writeAt(t, vol, 0, randomBytes(t, 4096))
	a := e.createSnapshot(t, "a", vol).GetSnapshotId()
	o := e.createSnapshot(t, "o", other).GetSnapshotId()
	for _, tt := range []struct {
		name string
		req  *csi.GetMetadataDeltaRequest
		code codes.Code
	}{
		{"unknown base", &csi.GetMetadataDeltaRequest{BaseSnapshotId: "snap-gone", TargetSnapshotId: a}, codes.NotFound},
		{"different volumes", &csi.GetMetadataDeltaRequest{BaseSnapshotId: o, TargetSnapshotId: a}, codes.InvalidArgument},
		{"huge offset", &csi.GetMetadataDeltaRequest{BaseSnapshotId: a, TargetSnapshotId: a, StartingOffset: 1 << 62}, codes.OutOfRange},
		{"negative offset", &csi.GetMetadataDeltaRequest{BaseSnapshotId: a, TargetSnapshotId: a, StartingOffset: -1}, codes.OutOfRange},
		{"negative max_results", &csi.GetMetadataDeltaRequest{BaseSnapshotId: a, TargetSnapshotId: a, MaxResults: -1}, codes.InvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := e.meta.GetMetadataDelta(context.Background(), tt.req)
			if err == nil {
				_, err = s.Recv()
			}
			wantCode(t, err, tt.code)
		})
	}
}

// TestSnapshotMetadataAllocatedRefusals: bad GetMetadataAllocated requests get the CSI spec's
// codes; a snapshot of a folder volume has no block image.
func TestSnapshotMetadataAllocatedRefusals(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "blk", 16<<20, blockCap()).GetVolumeId()
	e.writeAt(t, vol, 0, randomBytes(t, 4096))
	a := e.createSnapshot(t, "a", vol).GetSnapshotId()
	folder := e.createVolume(t, "folder", 16<<20, mountCap()).GetVolumeId()
	fs := e.createSnapshot(t, "fs", folder).GetSnapshotId()
	for _, tt := range []struct {
		name string
		req  *csi.GetMetadataAllocatedRequest
		code codes.Code
	}{
		{"unknown snapshot", &csi.GetMetadataAllocatedRequest{SnapshotId: "snap-gone"}, codes.NotFound},
		{"no snapshot", &csi.GetMetadataAllocatedRequest{}, codes.InvalidArgument},
		{"malformed ID", &csi.GetMetadataAllocatedRequest{SnapshotId: "../a"}, codes.InvalidArgument},
		{"folder volume's snapshot", &csi.GetMetadataAllocatedRequest{SnapshotId: fs}, codes.InvalidArgument},
		{"offset past the end", &csi.GetMetadataAllocatedRequest{SnapshotId: a, StartingOffset: (16 << 20) + 1}, codes.OutOfRange},
		{"huge offset", &csi.GetMetadataAllocatedRequest{SnapshotId: a, StartingOffset: 1 << 62}, codes.OutOfRange},
		{"negative offset", &csi.GetMetadataAllocatedRequest{SnapshotId: a, StartingOffset: -1}, codes.OutOfRange},
		{"negative max_results", &csi.GetMetadataAllocatedRequest{SnapshotId: a, MaxResults: -1}, codes.InvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := e.meta.GetMetadataAllocated(context.Background(), tt.req)
			if err == nil {
				_, err = s.Recv()
			}
			wantCode(t, err, tt.code)
		})
	}
}

// TestSnapshotMetadataMaxResults: max_results 0 lets the driver choose (256 ranges a message),
// n gives at most n a message; the offset at the very end gives nothing.
func TestSnapshotMetadataMaxResults(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "blk", 16<<20, blockCap()).GetVolumeId()
	for off := int64(0); off < 600*8192; off += 8192 { // 600 ranges of 4 KiB, apart
		e.writeAt(t, vol, off, randomBytes(t, 4096))
	}
	snap := e.createSnapshot(t, "a", vol).GetSnapshotId()
	for _, tt := range []struct {
		max  int32
		want []int
	}{{0, []int{256, 256, 88}}, {100, []int{100, 100, 100, 100, 100, 100}}, {1000, []int{600}}} {
		s, err := e.meta.GetMetadataAllocated(context.Background(), &csi.GetMetadataAllocatedRequest{SnapshotId: snap, MaxResults: tt.max})
		if err != nil {
			t.Fatal(err)
		}
		var sizes []int
		for {
			r, err := s.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, len(r.GetBlockMetadata()))
		}
		if !reflect.DeepEqual(sizes, tt.want) {
			t.Errorf("max_results %d: messages of %v ranges, want %v", tt.max, sizes, tt.want)
		}
	}
	s, err := e.meta.GetMetadataAllocated(context.Background(), &csi.GetMetadataAllocatedRequest{SnapshotId: snap, StartingOffset: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("from the end: got %v, %v; want the stream's end", r, err)
	}
}

// TestSnapshotMetadataStalledReader: a client that stops reading holds nothing the driver
// needs: meanwhile another client reads the same snapshots to the end and the snapshot is
// deleted; the stalled stream still reads to the end (its data stays open); a stalled stream the
// client cancels ends, and no goroutine of it is left.
func TestSnapshotMetadataStalledReader(t *testing.T) {
	e := newTestEnv(t, func(o *Options) { o.SnapshotMetadataBlockType = BlockTypeFixed })
	const size = 64 << 20
	vol := e.createVolume(t, "blk", size, blockCap()).GetVolumeId()
	e.writeAt(t, vol, 0, bytes.Repeat([]byte{0x5a}, size)) // FIXED_LENGTH: 16,384 blocks
	a := e.createSnapshot(t, "a", vol).GetSnapshotId()
	e.writeAt(t, vol, 0, randomBytes(t, size))
	b := e.createSnapshot(t, "b", vol).GetSnapshotId()
	want := size / MetadataBlockSize
	count := func(recv func() (*csi.GetMetadataDeltaResponse, error)) int {
		n := 0
		for {
			r, err := recv()
			if errors.Is(err, io.EOF) {
				return n
			}
			if err != nil {
				t.Fatal(err)
			}
			n += len(r.GetBlockMetadata())
		}
	}
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stalled, err := e.meta.GetMetadataDelta(ctx, &csi.GetMetadataDeltaRequest{BaseSnapshotId: a, TargetSnapshotId: b, MaxResults: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stalled.Recv(); err != nil { // the driver has opened both snapshots
		t.Fatal(err)
	}
	other, err := e.meta.GetMetadataDelta(context.Background(), &csi.GetMetadataDeltaRequest{BaseSnapshotId: a, TargetSnapshotId: b})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(other.Recv); n != want {
		t.Errorf("a second reader got %d blocks while the first stalled, want %d", n, want)
	}
	if _, err := e.ctrl.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: b}); err != nil {
		t.Fatalf("DeleteSnapshot while a reader stalls: %v", err)
	}
	if n := 1 + count(stalled.Recv); n != want {
		t.Errorf("the stalled reader got %d blocks of the deleted snapshot, want %d", n, want)
	}

	again, err := e.meta.GetMetadataAllocated(ctx, &csi.GetMetadataAllocatedRequest{SnapshotId: a, MaxResults: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	testenv.WaitGoroutines(t, base, 20*time.Second)
}
