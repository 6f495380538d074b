//go:build linux

package hostpath

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("NodePublishVolume bind mounts, which needs root (CAP_SYS_ADMIN); CI runs as root")
	}
}

func TestNodePublishMountVolume(t *testing.T) {
	requireRoot(t)
	e := newTestEnv(t)
	vol := e.createVolume(t, "fs", 1<<20, mountCap())
	id := vol.GetVolumeId()
	rw, ro := filepath.Join(e.dir, "rw"), filepath.Join(e.dir, "ro")
	publish := func(target string, readOnly bool) error {
		_, err := e.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
			VolumeId: id, TargetPath: target, VolumeCapability: mountCap(), Readonly: readOnly,
		})
		return err
	}
	if err := publish(rw, false); err != nil {
		t.Fatal(err)
	}
	if err := publish(rw, false); err != nil {
		t.Fatalf("repeat publish: %v", err)
	}
	wantCode(t, publish(rw, true), codes.AlreadyExists)
	if err := publish(ro, true); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rw, "file"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(ro, "file")); err != nil || string(got) != "data" {
		t.Fatalf("read through read-only target = %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(ro, "other"), nil, 0o644); err == nil {
		t.Fatal("write through read-only target succeeded")
	}
	stats, err := e.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: rw})
	if err != nil || len(stats.GetUsage()) != 2 || stats.GetUsage()[0].GetTotal() != 1<<20 {
		t.Fatalf("stats = %v, %v", stats, err)
	}
	for _, target := range []string{rw, ro} {
		if _, err := e.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("target %s still exists: %v", target, err)
		}
	}
	if _, err := os.Stat(filepath.Join(e.d.volumePath(id), "file")); err != nil {
		t.Fatalf("volume data lost on unpublish: %v", err)
	}
}

func TestNodePublishBlockVolume(t *testing.T) {
	requireRoot(t)
	e := newTestEnv(t)
	vol := e.createVolume(t, "blk", 4<<20, blockCap())
	target := filepath.Join(e.dir, "dev", "blk")
	_, err := e.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: vol.GetVolumeId(), TargetPath: target, VolumeCapability: blockCap(),
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(target, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("block"), 1<<20); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	got := make([]byte, 5)
	src, _ := os.Open(e.d.volumePath(vol.GetVolumeId()))
	defer src.Close()
	if _, err := src.ReadAt(got, 1<<20); err != nil || string(got) != "block" {
		t.Fatalf("backing file = %q, %v", got, err)
	}
	if _, err := e.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: vol.GetVolumeId(), TargetPath: target}); err != nil {
		t.Fatal(err)
	}
}

func TestNodeRejectsTargetsInDataDir(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "fs", 1<<20, mountCap())
	_, err := e.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: vol.GetVolumeId(), TargetPath: filepath.Join(e.d.opts.DataDir, "volumes", "x"), VolumeCapability: mountCap(),
	})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: vol.GetVolumeId(), TargetPath: "relative/path", VolumeCapability: mountCap(),
	})
	wantCode(t, err, codes.InvalidArgument)
}

func TestNodeGetInfoTopology(t *testing.T) {
	e := newTestEnv(t, func(o *Options) { o.EnableTopology = true; o.MaxVolumesPerNode = 7 })
	info, err := e.node.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetNodeId() != "node-1" || info.GetMaxVolumesPerNode() != 7 || info.GetAccessibleTopology().GetSegments()[TopologyKey] != "node-1" {
		t.Fatalf("NodeGetInfo = %v", info)
	}
	_, err = e.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "elsewhere", VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{TopologyKey: "node-2"}}}},
	})
	wantCode(t, err, codes.ResourceExhausted)
}
