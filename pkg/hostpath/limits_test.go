//go:build linux

package hostpath

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// TestOversizedParametersAreRefused: a CreateVolume whose parameters would
// make a record over the record log's frame limit must be InvalidArgument.
// Before the bound it was acknowledged, and the next start dropped that
// record and every one after it, and deleted their data.
func TestOversizedParametersAreRefused(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	before := e.createVolume(t, "before", 1<<20, blockCap())
	e.writeAt(t, before.GetVolumeId(), 0, []byte("before"))
	_, err := e.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: "huge", CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
		Parameters:         map[string]string{"pad": strings.Repeat("x", 1536<<10)},
	})
	wantCode(t, err, codes.InvalidArgument)
	after := e.createVolume(t, "after", 1<<20, blockCap())
	e.writeAt(t, after.GetVolumeId(), 0, []byte("after"))
	d := e.restart(t)
	for _, v := range []*csi.Volume{before, after} {
		if _, ok := d.volumes.Get(v.GetVolumeId()); !ok {
			t.Fatalf("volume %s lost after the restart", v.GetVolumeId())
		}
		if _, err := os.Stat(d.volumePath(v.GetVolumeId())); err != nil {
			t.Fatalf("data of volume %s lost after the restart: %v", v.GetVolumeId(), err)
		}
	}
}

// TestStoredInputsAreBounded sends every input that reaches a record at
// its limit plus one.
func TestStoredInputsAreBounded(t *testing.T) {
	e := newTestEnv(t, func(o *Options) { o.MutableParameters = []string{"iops"} })
	ctx := context.Background()
	manyParams := map[string]string{}
	for i := range maxParameters + 1 {
		manyParams[fmt.Sprint(i)] = ""
	}
	// '<' is stored as \u003c: six bytes each.
	escaped := map[string]string{"k": strings.Repeat("<", maxParametersBytes/6+1)}
	vol := e.createVolume(t, "bounded", 1<<20, mountCap())
	var members []string
	for i := range maxGroupMembers + 1 {
		members = append(members, fmt.Sprintf("vol-%d", i))
	}
	longPath := "/" + strings.Repeat("p", maxPathLength)
	create := func(params, mutable map[string]string) error {
		_, err := e.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
			Name: "v", VolumeCapabilities: []*csi.VolumeCapability{mountCap()}, Parameters: params, MutableParameters: mutable,
		})
		return err
	}
	cases := []struct {
		name string
		call func() error
	}{
		{name: "too many parameters", call: func() error { return create(manyParams, nil) }},
		{name: "parameters too large as stored", call: func() error { return create(escaped, nil) }},
		{name: "mutable parameters too large", call: func() error {
			return create(nil, map[string]string{"iops": strings.Repeat("9", maxParametersBytes)})
		}},
		{name: "modify too large", call: func() error {
			_, err := e.ctrl.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{
				VolumeId: vol.GetVolumeId(), MutableParameters: map[string]string{"iops": strings.Repeat("9", maxParametersBytes)},
			})
			return err
		}},
		{name: "name too long", call: func() error {
			_, err := e.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: strings.Repeat("n", maxNameLength+1), SourceVolumeId: vol.GetVolumeId()})
			return err
		}},
		{name: "too many group members", call: func() error {
			_, err := e.group.CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: members})
			return err
		}},
		{name: "target path too long", call: func() error {
			_, err := e.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: vol.GetVolumeId(), TargetPath: longPath, VolumeCapability: mountCap()})
			return err
		}},
		{name: "staging path too long", call: func() error {
			_, err := e.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol.GetVolumeId(), StagingTargetPath: longPath, VolumeCapability: mountCap()})
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { wantCode(t, tc.call(), codes.InvalidArgument) })
	}
}

// TestVolumeRecordBoundFitsTheLog: the largest volume record the driver
// accepts must fit in a frame of the record log.
func TestVolumeRecordBoundFitsTheLog(t *testing.T) {
	if maxVolumeRecordBytes < 2*maxParametersBytes+64<<10 || maxVolumeRecordBytes > state.MaxValueBytes {
		t.Fatalf("maxVolumeRecordBytes %d must hold both kinds of parameters and fit in %d", maxVolumeRecordBytes, state.MaxValueBytes)
	}
	big := strings.Repeat("9", maxPathLength-20)
	v := state.Volume{ID: "vol-x", Published: map[string]bool{}}
	for i := 0; checkVolumeRecord(v) == nil; i++ {
		v.Published[fmt.Sprintf("/%d/%s", i, big)] = false
	}
	if n := storedSize(v); n > state.MaxValueBytes {
		t.Fatalf("a volume record of %d bytes passed the bound", n)
	}
}
