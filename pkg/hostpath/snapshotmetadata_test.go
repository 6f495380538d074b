//go:build linux

package hostpath

import (
	"context"
	"reflect"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
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
