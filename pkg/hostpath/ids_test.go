//go:build linux

package hostpath

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCheckID(t *testing.T) {
	tests := []struct {
		id string
		ok bool
	}{
		{id: "vol-0123abcd", ok: true},
		{id: "fake-vol-id", ok: true},
		{id: "a.b_c-d", ok: true},
		{id: strings.Repeat("a", maxIDLength), ok: true},
		{id: ""},
		{id: "."},
		{id: ".."},
		{id: "../x"},
		{id: "/etc/passwd"},
		{id: "a/b"},
		{id: "a\x00b"},
		{id: ".hidden"},
		{id: "white space"},
		{id: "ünïcode"},
		{id: strings.Repeat("a", maxIDLength+1)},
	}
	for _, tt := range tests {
		err := checkID("id", tt.id)
		if (err == nil) != tt.ok {
			t.Errorf("checkID(%q) = %v, want ok=%t", tt.id, err, tt.ok)
		}
		if err != nil && status.Code(err) != codes.InvalidArgument {
			t.Errorf("checkID(%q) code = %s, want InvalidArgument", tt.id, status.Code(err))
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, bad := range []string{"", "a\x00b", "bell\x07", string([]byte{0xff, 0xfe}), strings.Repeat("n", maxNameLength+1)} {
		if checkName(bad) == nil {
			t.Errorf("checkName(%q) accepted", bad)
		}
	}
	for _, good := range []string{"pvc-1", "../../etc/passwd", "tab\tok", strings.Repeat("n", maxNameLength)} {
		if err := checkName(good); err != nil {
			t.Errorf("checkName(%q) = %v", good, err)
		}
	}
}

// snapshotTree lists every path below root, for before/after comparisons.
func snapshotTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, _ os.DirEntry, err error) error {
		if err == nil {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// idCalls runs every RPC that takes an ID with id and returns the codes.
func idCalls(ctx context.Context, d *Driver, id, scratch string) map[string]error {
	c, n, g := &controllerServer{d: d}, &nodeServer{d: d}, &groupControllerServer{d: d}
	res := map[string]error{}
	_, res["DeleteVolume"] = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	_, res["ControllerGetVolume"] = c.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: id})
	_, res["ValidateVolumeCapabilities"] = c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{blockCap()}})
	_, res["ControllerExpandVolume"] = c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
	_, res["ControllerModifyVolume"] = c.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id})
	_, res["ControllerPublishVolume"] = c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: d.opts.NodeID, VolumeCapability: blockCap()})
	_, res["CreateSnapshot"] = c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "fuzz", SourceVolumeId: id})
	_, res["DeleteSnapshot"] = c.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id})
	_, res["GetSnapshot"] = c.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: id})
	_, res["CreateVolumeFromSnapshot"] = c.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: "fuzz", VolumeCapabilities: []*csi.VolumeCapability{blockCap()},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}},
	})
	_, res["NodePublishVolume"] = n.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, TargetPath: filepath.Join(scratch, "target"), VolumeCapability: blockCap()})
	_, res["NodeUnpublishVolume"] = n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: filepath.Join(scratch, "target")})
	_, res["NodeGetVolumeStats"] = n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: scratch})
	_, res["GetVolumeGroupSnapshot"] = g.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: id})
	_, res["DeleteVolumeGroupSnapshot"] = g.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: id})
	return res
}

// FuzzRequestIDs sends arbitrary IDs to every RPC that takes one. Malformed
// IDs must be InvalidArgument; well-formed unknown IDs NotFound or success;
// and no call may create, change or remove anything outside the driver's
// data directory, nor anything inside it.
func FuzzRequestIDs(f *testing.F) {
	for _, seed := range []string{
		"../x", "/etc/passwd", "..", ".", "a\x00b", "vol-../../x", "fake-vol-id", "snap-1",
		strings.Repeat("x", 129), "%2e%2e%2fetc", "a/../../b", "\\..\\x", "ok-id", "",
	} {
		f.Add(seed)
	}
	e := newTestEnv(f, func(o *Options) { o.EnableAttach = true })
	scratch := filepath.Join(e.dir, "scratch")
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "sentinel"), []byte("keep"), 0o644); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id string) {
		before := snapshotTree(t, e.dir)
		for rpc, err := range idCalls(context.Background(), e.d, id, scratch) {
			code := status.Code(err)
			if checkID("id", id) != nil {
				if code != codes.InvalidArgument {
					t.Errorf("%s(%q) = %s, want InvalidArgument", rpc, id, code)
				}
				continue
			}
			if !slices.Contains([]codes.Code{codes.OK, codes.NotFound}, code) {
				t.Errorf("%s(%q) = %v, want OK or NotFound", rpc, id, err)
			}
		}
		if after := snapshotTree(t, e.dir); !slices.Equal(before, after) {
			t.Fatalf("calls with %q changed the tree:\nbefore %v\nafter  %v", id, before, after)
		}
	})
}
