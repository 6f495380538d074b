//go:build linux

package hostpath

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/shutter-csi/shutter/pkg/hostpath/hostpathtest"
)

// The node service's logic, on hostpathtest.FakeMounter: these tests run
// as any user. node_test.go and the image tests hold the kernel's paths.

// newFakeMountEnv starts a driver whose mounts and loop devices are fake.
func newFakeMountEnv(t *testing.T) (*testEnv, *hostpathtest.FakeMounter) {
	t.Helper()
	m := &hostpathtest.FakeMounter{}
	return newTestEnv(t, func(o *Options) { o.Mounter = m }), m
}

func (e *testEnv) publishAt(t *testing.T, volID, target string, c *csi.VolumeCapability, readOnly bool) error {
	t.Helper()
	_, err := e.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: volID, TargetPath: target, VolumeCapability: c, Readonly: readOnly,
	})
	return err
}

func (e *testEnv) unpublishAt(t *testing.T, volID, target string) {
	t.Helper()
	if _, err := e.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: volID, TargetPath: target}); err != nil {
		t.Fatalf("NodeUnpublishVolume %s: %v", target, err)
	}
}

// wantMounts checks the fake's mounts at target.
func wantMounts(t *testing.T, m *hostpathtest.FakeMounter, target string, want ...hostpathtest.Mount) {
	t.Helper()
	if got := m.Mounted(target); !slices.Equal(got, want) {
		t.Errorf("mounts at %s = %+v, want %+v", target, got, want)
	}
}

func TestPublishMountVolumeBindsNosuidNodev(t *testing.T) {
	e, m := newFakeMountEnv(t)
	id := e.createVolume(t, "fs", 1<<20, mountCap()).GetVolumeId()
	rw, ro, staging := filepath.Join(e.dir, "rw"), filepath.Join(e.dir, "ro"), filepath.Join(e.dir, "staging")
	_, err := e.node.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: mountCap()})
	mustDo(t, err)
	wantMounts(t, m, staging, hostpathtest.Mount{Source: e.d.volumePath(id), Flags: unix.MS_NOSUID | unix.MS_NODEV})
	mustDo(t, e.publishAt(t, id, rw, mountCap(), false))
	mustDo(t, e.publishAt(t, id, rw, mountCap(), false))
	wantCode(t, e.publishAt(t, id, rw, mountCap(), true), codes.AlreadyExists)
	mustDo(t, e.publishAt(t, id, ro, mountCap(), true))
	wantMounts(t, m, rw, hostpathtest.Mount{Source: e.d.volumePath(id), Flags: unix.MS_NOSUID | unix.MS_NODEV})
	wantMounts(t, m, ro, hostpathtest.Mount{Source: e.d.volumePath(id), Flags: unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV})
	for _, target := range []string{rw, ro} {
		e.unpublishAt(t, id, target)
		wantMounts(t, m, target)
		if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("target %s is still there: %v", target, err)
		}
	}
	_, err = e.node.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	mustDo(t, err)
	wantMounts(t, m, staging)
	if v, _ := e.d.volumes.Get(id); len(v.Published) != 0 || v.Staged != "" {
		t.Errorf("record after unpublishing and unstaging: %+v", v)
	}
}

// A block volume is published as the node of a loop device of its file
// (a container runtime takes nothing else): one read-write device for
// its read-write targets, one read-only for its read-only ones, each
// detached with the last target that needs it.
func TestPublishBlockVolumeAsLoopDevice(t *testing.T) {
	e, m := newFakeMountEnv(t)
	id := e.createVolume(t, "blk", 4<<20, blockCap()).GetVolumeId()
	t1, t2, t3 := filepath.Join(e.dir, "dev", "t1"), filepath.Join(e.dir, "dev", "t2"), filepath.Join(e.dir, "dev", "t3")
	mustDo(t, e.publishAt(t, id, t1, blockCap(), false))
	mustDo(t, e.publishAt(t, id, t2, blockCap(), false))
	mustDo(t, e.publishAt(t, id, t3, blockCap(), true))
	loops := m.Loops()
	if len(loops) != 2 {
		t.Fatalf("loop devices of a volume published read-write twice and read-only once: %v, want 2", loops)
	}
	rw := m.Mounted(t1)
	if len(rw) != 1 || !slices.Contains(loops, rw[0].Source) || rw[0].Flags != unix.MS_NOSUID {
		t.Fatalf("mounts at a read-write block target: %+v; want one of the loop devices %v, nosuid only (nodev would make the node unusable)", rw, loops)
	}
	wantMounts(t, m, t2, rw[0])
	ro := m.Mounted(t3)
	if len(ro) != 1 || ro[0].Source == rw[0].Source || ro[0].Flags != unix.MS_RDONLY|unix.MS_NOSUID {
		t.Fatalf("mounts at the read-only block target: %+v; want the other loop device, read-only", ro)
	}
	// A snapshot or clone copies the file: the devices' caches are
	// written to it first.
	e.createSnapshot(t, "snap", id)
	e.createVolumeFrom(t, "clone", 4<<20, blockCap(), volumeSource(id))
	if got := m.Synced(); !slices.Equal(got, []string{e.d.volumePath(id), e.d.volumePath(id)}) {
		t.Errorf("devices flushed for %v, want the volume's file before the snapshot and the clone", got)
	}
	e.unpublishAt(t, id, t1)
	if got := m.Loops(); len(got) != 2 {
		t.Errorf("loop devices with a read-write target left: %v, want 2", got)
	}
	e.unpublishAt(t, id, t2)
	if got := m.Loops(); !slices.Equal(got, []string{ro[0].Source}) {
		t.Errorf("loop devices with only the read-only target left: %v, want %s", got, ro[0].Source)
	}
	e.unpublishAt(t, id, t3)
	if got := m.Loops(); len(got) != 0 {
		t.Errorf("loop devices after the last unpublish: %v", got)
	}
}

// After a node's restart (or a mount lost otherwise) kubelet publishes
// again: the driver mounts again rather than report the recorded
// publication as done over an empty target.
func TestPublishAgainWhenTheMountIsGone(t *testing.T) {
	e, m := newFakeMountEnv(t)
	fsID := e.createVolume(t, "fs", 1<<20, mountCap()).GetVolumeId()
	blkID := e.createVolume(t, "blk", 1<<20, blockCap()).GetVolumeId()
	fsTarget, blkTarget := filepath.Join(e.dir, "fs"), filepath.Join(e.dir, "dev", "blk")
	mustDo(t, e.publishAt(t, fsID, fsTarget, mountCap(), false))
	mustDo(t, e.publishAt(t, blkID, blkTarget, blockCap(), false))
	// The node restarts: mounts and loop devices are gone.
	mustDo(t, m.Unmount(fsTarget))
	mustDo(t, m.Unmount(blkTarget))
	mustDo(t, m.DetachLoop(e.d.volumePath(blkID), false))
	mustDo(t, e.publishAt(t, fsID, fsTarget, mountCap(), false))
	mustDo(t, e.publishAt(t, blkID, blkTarget, blockCap(), false))
	wantMounts(t, m, fsTarget, hostpathtest.Mount{Source: e.d.volumePath(fsID), Flags: unix.MS_NOSUID | unix.MS_NODEV})
	if got := m.Mounted(blkTarget); len(got) != 1 || !slices.Equal(m.Loops(), []string{got[0].Source}) {
		t.Errorf("block target after publishing again: %+v, loop devices %v", got, m.Loops())
	}
}

// A mount at a target that no record accounts for (a publish cut short
// before its record) is replaced; a target recorded for another volume is
// refused.
func TestPublishOverWhatACrashLeft(t *testing.T) {
	e, m := newFakeMountEnv(t)
	a := e.createVolume(t, "a", 1<<20, mountCap()).GetVolumeId()
	b := e.createVolume(t, "b", 1<<20, mountCap()).GetVolumeId()
	target := filepath.Join(e.dir, "target")
	mustDo(t, os.Mkdir(target, 0o750))
	mustDo(t, m.Bind(e.d.volumePath(a), target, 0))
	mustDo(t, e.publishAt(t, a, target, mountCap(), false))
	wantMounts(t, m, target, hostpathtest.Mount{Source: e.d.volumePath(a), Flags: unix.MS_NOSUID | unix.MS_NODEV})
	wantCode(t, e.publishAt(t, b, target, mountCap(), false), codes.FailedPrecondition)
	wantMounts(t, m, target, hostpathtest.Mount{Source: e.d.volumePath(a), Flags: unix.MS_NOSUID | unix.MS_NODEV})
	// Unpublishing a target left mounted without a record unmounts it.
	other := filepath.Join(e.dir, "other")
	mustDo(t, os.Mkdir(other, 0o750))
	mustDo(t, m.Bind(e.d.volumePath(b), other, 0))
	e.unpublishAt(t, b, other)
	wantMounts(t, m, other)
	e.unpublishAt(t, a, target)
}

// Start-up detaches the loop devices no recorded publication needs: those
// a crash left between attaching and recording, or between recording an
// unpublish and detaching, and those of a file without a record.
func TestStartupDetachesLoopDevicesNobodyNeeds(t *testing.T) {
	e, m := newFakeMountEnv(t)
	used := e.createVolume(t, "used", 1<<20, blockCap()).GetVolumeId()
	idle := e.createVolume(t, "idle", 1<<20, blockCap()).GetVolumeId()
	mustDo(t, e.publishAt(t, used, filepath.Join(e.dir, "dev", "used"), blockCap(), false))
	kept := m.Loops()
	e.stop()
	_, err := m.AttachLoop(e.d.volumePath(used), true)
	mustDo(t, err)
	_, err = m.AttachLoop(e.d.volumePath(idle), false)
	mustDo(t, err)
	stray := filepath.Join(volumesDir(e.d.opts.DataDir), "vol-stray")
	mustDo(t, os.WriteFile(stray, make([]byte, 4096), 0o600))
	_, err = m.AttachLoop(stray, false)
	mustDo(t, err)
	e.start(t, e.d.opts)
	if got := m.Loops(); !slices.Equal(got, kept) {
		t.Errorf("loop devices after start-up: %v, want only the published volume's %v", got, kept)
	}
}

// Growing a published block volume tells its loop devices the new size.
func TestExpandPublishedBlockVolumeResizesItsDevices(t *testing.T) {
	e, m := newFakeMountEnv(t)
	id := e.createVolume(t, "blk", 1<<20, blockCap()).GetVolumeId()
	mustDo(t, e.publishAt(t, id, filepath.Join(e.dir, "dev", "blk"), blockCap(), false))
	_, err := e.ctrl.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
		VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20},
	})
	mustDo(t, err)
	if got := m.Resized(); !slices.Equal(got, []string{e.d.volumePath(id)}) {
		t.Errorf("loop devices resized for %v, want the volume's file", got)
	}
}
