//go:build linux

package hostpath

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
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
	for target, want := range map[string]uintptr{rw: unix.MS_NOSUID | unix.MS_NODEV, ro: unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV} {
		if got, err := statfsFlags(target); err != nil || got&(unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV) != want {
			t.Errorf("flags of the mount at %s: %#x, %v; want %#x", target, got, err, want)
		}
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

// TestNodePublishBlockVolume publishes a block volume as the kernel does
// it: the target is the node of a loop device of the volume's file (a
// container runtime refuses anything else), writes through it reach the
// file, a read-only target refuses writes, and unpublishing detaches the
// devices; one a crash left attached is detached at start.
func TestNodePublishBlockVolume(t *testing.T) {
	requireRoot(t)
	if err := checkLoopSupport(); err != nil {
		t.Skipf("loop devices cannot be used here: %v", err)
	}
	e := newTestEnv(t)
	t.Cleanup(func() { checkNothingLeft(t, e.dir) })
	id := e.createVolume(t, "blk", 4<<20, blockCap()).GetVolumeId()
	rw, ro := filepath.Join(e.dir, "dev", "blk"), filepath.Join(e.dir, "dev", "blk-ro")
	mustDo(t, e.publishAt(t, id, rw, blockCap(), false))
	mustDo(t, e.publishAt(t, id, ro, blockCap(), true))
	for _, target := range []string{rw, ro} {
		var st unix.Stat_t
		mustDo(t, unix.Stat(target, &st))
		if st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != loopMajor {
			t.Errorf("%s has mode %#o, device %d:%d; want a loop device's node", target, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		if flags, err := statfsFlags(target); err != nil || flags&unix.MS_NOSUID == 0 || flags&unix.MS_NODEV != 0 {
			t.Errorf("flags of the mount at %s: %#x, %v; want nosuid and not nodev", target, flags, err)
		}
	}
	f, err := os.OpenFile(rw, os.O_WRONLY, 0)
	mustDo(t, err)
	_, err = f.WriteAt([]byte("block"), 1<<20)
	mustDo(t, err)
	mustDo(t, f.Close())
	got := make([]byte, 5)
	src, err := os.Open(e.d.volumePath(id))
	mustDo(t, err)
	defer src.Close()
	if _, err := src.ReadAt(got, 1<<20); err != nil || string(got) != "block" {
		t.Fatalf("backing file = %q, %v", got, err)
	}
	// Written through the device and not flushed yet (a pod's writes in the
	// device's cache): a snapshot has them.
	dev, err := os.OpenFile(rw, os.O_WRONLY, 0)
	mustDo(t, err)
	_, err = dev.WriteAt([]byte("cached"), 2<<20)
	mustDo(t, err)
	snap := e.createSnapshot(t, "snap-cached", id)
	mustDo(t, dev.Close())
	got = make([]byte, 6)
	copied, err := os.Open(e.d.snapshotPath(snap.GetSnapshotId()))
	mustDo(t, err)
	defer copied.Close()
	if _, err := copied.ReadAt(got, 2<<20); err != nil || string(got) != "cached" {
		t.Errorf("snapshot of a published block volume = %q, %v; want what was written to its device", got, err)
	}
	if f, err := os.OpenFile(ro, os.O_WRONLY, 0); err == nil {
		_, err = f.WriteAt([]byte("x"), 0)
		_ = f.Close()
		if err == nil {
			t.Error("a write through the read-only target succeeded")
		}
	}
	e.unpublishAt(t, id, rw)
	e.unpublishAt(t, id, ro)
	if left := loopsBelow(t, e.dir); len(left) != 0 {
		t.Errorf("loop devices after unpublishing: %v", left)
	}
	// A publish cut short by a crash after attaching.
	e.stop()
	_, err = kernelMounter{}.AttachLoop(e.d.volumePath(id), false)
	mustDo(t, err)
	e.start(t, e.d.opts)
	if left := loopsBelow(t, e.dir); len(left) != 0 {
		t.Errorf("loop devices after a restart: %v", left)
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
