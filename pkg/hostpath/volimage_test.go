//go:build linux

package hostpath

import (
	"bytes"
	"context"
	"errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/shutter-csi/shutter/internal/fstest"
	"github.com/shutter-csi/shutter/pkg/mountinfo"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
)

// newImageEnv starts a driver whose filesystem volumes are images, or
// skips the test where loop devices cannot be used. Whatever the test
// leaves mounted or attached below its folder is detached when it ends, and
// fails it: the driver must not leave any.
func newImageEnv(t *testing.T, opts ...func(*Options)) *testEnv {
	t.Helper()
	if err := checkLoopSupport(); err != nil {
		t.Skipf("image volumes cannot be tested here: %v", err)
	}
	dir := t.TempDir()
	t.Cleanup(func() { checkNothingLeft(t, dir) })
	o := testOptions(dir)
	o.VolumeBacking = BackingImage
	for _, f := range opts {
		f(&o)
	}
	e := &testEnv{dir: dir}
	e.start(t, o)
	return e
}

// checkNothingLeft fails the test for every mount and loop device left
// below dir, and removes them.
func checkNothingLeft(t *testing.T, dir string) {
	t.Helper()
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if p := mounts[i].MountPoint; p == dir || strings.HasPrefix(p, dir+"/") {
			t.Errorf("%s is still mounted", p)
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	}
	// The kernel detaches an autoclear device once its last user is gone;
	// give it a moment.
	_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return len(loopsBelow(t, dir)) == 0, nil })
	for _, dev := range loopsBelow(t, dir) {
		t.Errorf("%s is still attached to an image below the test's folder", dev)
		if f, err := os.OpenFile(dev, os.O_RDWR, 0); err == nil {
			_ = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
			_ = f.Close()
		}
	}
}

// loopsBelow lists the loop devices backed by files below dir, from sysfs.
func loopsBelow(t *testing.T, dir string) []string {
	t.Helper()
	paths, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), dir+"/") {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(p))))
		}
	}
	return out
}

// publish publishes a filesystem volume at a target below the env's folder
// and returns the target; it is unpublished when the test ends.
func (e *testEnv) publish(t *testing.T, volID, name string) string {
	t.Helper()
	target := filepath.Join(e.dir, "pods", name)
	_, err := e.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: volID, TargetPath: target, VolumeCapability: mountCap(),
	})
	if err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	t.Cleanup(func() {
		// Unpublished by the test already, or by the driver if it still
		// serves; or else directly.
		_, _ = e.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: volID, TargetPath: target})
		_ = unmountAll(target)
	})
	return target
}

func (e *testEnv) unpublish(t *testing.T, volID, target string) {
	t.Helper()
	_, err := e.node.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: volID, TargetPath: target})
	if err != nil {
		t.Errorf("NodeUnpublishVolume: %v", err)
	}
}

func (e *testEnv) deleteVolume(t *testing.T, volID string) {
	t.Helper()
	if _, err := e.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: volID}); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
}

// writeUntilFull writes n bytes to path in 1 MiB steps, flushed, and
// returns how many it wrote and the error that stopped it.
func writeUntilFull(path string, n int64) (int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	block := bytes.Repeat([]byte{0x5a}, 1<<20)
	written := int64(0)
	for written < n {
		m, err := f.Write(block[:min(int64(len(block)), n-written)])
		written += int64(m)
		if err != nil {
			return written, err
		}
	}
	return written, f.Sync()
}

func TestImageVolumeCannotOutgrowItsSize(t *testing.T) {
	e := newImageEnv(t)
	const size = 32 << 20
	full := e.createVolume(t, "pvc-full", size, mountCap()).GetVolumeId()
	other := e.createVolume(t, "pvc-other", size, mountCap()).GetVolumeId()
	fullTarget, otherTarget := e.publish(t, full, "full"), e.publish(t, other, "other")

	before := fstest.AllocatedUnder(t, e.d.opts.DataDir)
	written, err := writeUntilFull(filepath.Join(fullTarget, "fill"), size+1<<20)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("writing %d bytes into a %d-byte volume: wrote %d, error %v; want ENOSPC", size+1<<20, size, written, err)
	}
	t.Logf("a %d-byte volume took %d bytes before ENOSPC", size, written)
	if got := fstest.Allocated(t, e.d.imagePath(full)); got > size {
		t.Errorf("the full volume's image takes %d bytes of the node's disk, more than its %d", got, size)
	}
	// What the driver's files took, both volumes together: other tests share the disk.
	if used := fstest.AllocatedUnder(t, e.d.opts.DataDir) - before; used > size {
		t.Errorf("the node's disk lost %d bytes to a %d-byte volume", used, size)
	}

	// The other volume is untouched and still takes writes.
	if n, err := writeUntilFull(filepath.Join(otherTarget, "data"), 4<<20); err != nil {
		t.Fatalf("writing into the other volume after the first filled up: wrote %d, %v", n, err)
	}
	stats, err := e.node.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: full, VolumePath: fullTarget})
	if err != nil {
		t.Fatal(err)
	}
	if u := stats.GetUsage()[0]; u.GetAvailable() >= 1<<20 || u.GetTotal() > size || u.GetUsed() < size/2 {
		t.Errorf("stats of the full volume: %v; want less than 1 MiB available, at most %d in total", u, size)
	}
	e.unpublish(t, full, fullTarget)
	e.unpublish(t, other, otherTarget)
	e.deleteVolume(t, full)
	e.deleteVolume(t, other)
	for _, path := range []string{e.d.imagePath(full), e.d.volumePath(full)} {
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after DeleteVolume (%v)", path, err)
		}
	}
	if left := loopsBelow(t, e.dir); len(left) > 0 {
		t.Errorf("loop devices still attached after DeleteVolume: %v", left)
	}
}

func TestImageVolumeKeepsDataAcrossRestart(t *testing.T) {
	e := newImageEnv(t)
	idle := e.createVolume(t, "pvc-idle", 32<<20, mountCap()).GetVolumeId()
	busy := e.createVolume(t, "pvc-busy", 32<<20, mountCap()).GetVolumeId()
	if err := os.WriteFile(filepath.Join(e.d.volumePath(idle), "kept"), []byte("idle data"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A pod's mount outlives the driver's: the restarted driver must
	// mount the same loop device again, never attach a second one to the
	// image (two filesystems over the same blocks).
	target := e.publish(t, busy, "busy")
	if err := os.WriteFile(filepath.Join(target, "kept"), []byte("busy data"), 0o644); err != nil {
		t.Fatal(err)
	}
	loopsBefore := loopsBelow(t, e.dir)
	d := e.restart(t)
	if got := loopsBelow(t, e.dir); len(got) != len(loopsBefore) {
		t.Fatalf("loop devices after restart %v, before %v: an image was attached twice", got, loopsBefore)
	}
	for id, want := range map[string]string{idle: "idle data", busy: "busy data"} {
		got, err := os.ReadFile(filepath.Join(d.volumePath(id), "kept"))
		if err != nil || string(got) != want {
			t.Errorf("volume %s after restart: %q, %v; want %q", id, got, err, want)
		}
	}
	// Writes through the pod's mount and the driver's land in one
	// filesystem.
	if err := os.WriteFile(filepath.Join(target, "later"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.volumePath(busy), "later")); err != nil {
		t.Errorf("a write through the pod's mount is not seen at the driver's: %v", err)
	}
	e.unpublish(t, busy, target)
}

func TestImageVolumeSnapshotRestoreAndClone(t *testing.T) {
	e := newImageEnv(t, func(o *Options) { o.Sync = true })
	src := e.createVolume(t, "pvc-src", 32<<20, mountCap()).GetVolumeId()
	empty := e.createSnapshot(t, "snap-empty", src)
	if s, _ := e.d.snapshots.Get(empty.GetSnapshotId()); !s.Empty {
		t.Errorf("a snapshot of a new image volume holds data (lost+found?)")
	}
	root := e.d.volumePath(src)
	mustDo(t, os.MkdirAll(filepath.Join(root, "dir/sub"), 0o750))
	mustDo(t, os.WriteFile(filepath.Join(root, "dir/sub/file"), randomBytes(t, 3<<20), 0o640))
	mustDo(t, os.Link(filepath.Join(root, "dir/sub/file"), filepath.Join(root, "hardlink")))
	mustDo(t, os.Symlink("dir/sub/file", filepath.Join(root, "symlink")))
	mustDo(t, os.WriteFile(filepath.Join(root, tempPrefix+"copy"), []byte("named like the copy's folder"), 0o600))
	mustDo(t, os.Chmod(root, 0o1770))
	want := treeAttrs(t, root)
	snap := e.createSnapshot(t, "snap-1", src)

	restored := e.restoreVolume(t, "pvc-restored", snap.GetSnapshotId(), 32<<20, mountCap())
	clone := e.createVolumeFrom(t, "pvc-clone", 32<<20, mountCap(), volumeSource(src)).GetVolumeId()
	fromEmpty := e.restoreVolume(t, "pvc-from-empty", empty.GetSnapshotId(), 32<<20, mountCap())
	for name, id := range map[string]string{"restored": restored, "clone": clone} {
		v, _ := e.d.volumes.Get(id)
		if !v.Image {
			t.Errorf("%s volume is not an image volume", name)
		}
		sameAttrs(t, name, treeAttrs(t, e.d.volumePath(id)), want)
		if treeSum(t, e.d.volumePath(id)) != treeSum(t, root) {
			t.Errorf("%s volume's data differs from its source's", name)
		}
	}
	if entries, err := os.ReadDir(e.d.volumePath(fromEmpty)); err != nil || len(entries) != 0 {
		t.Errorf("volume restored from an empty snapshot holds %v (%v)", entries, err)
	}
	for _, id := range []string{restored, clone, fromEmpty, src} {
		e.deleteVolume(t, id)
	}
}

func TestImageVolumeExpand(t *testing.T) {
	e := newImageEnv(t, func(o *Options) { o.Sync = true })
	id := e.createVolume(t, "pvc-grow", 32<<20, mountCap()).GetVolumeId()
	root := e.d.volumePath(id)
	mustDo(t, os.MkdirAll(filepath.Join(root, "dir"), 0o750))
	mustDo(t, os.WriteFile(filepath.Join(root, "dir/file"), randomBytes(t, 20<<20), 0o640))
	mustDo(t, os.Link(filepath.Join(root, "dir/file"), filepath.Join(root, "link")))
	want, wantSum := treeAttrs(t, root), treeSum(t, root)
	var before unix.Statfs_t
	mustDo(t, unix.Statfs(root, &before))

	// Unused: grown online where the kernel lets the driver, else by a
	// copy into a new image.
	expand := func(size int64) error {
		_, err := e.ctrl.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
			VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		})
		return err
	}
	if err := expand(64 << 20); err != nil {
		t.Fatalf("ControllerExpandVolume of an unused volume: %v", err)
	}
	var after unix.Statfs_t
	mustDo(t, unix.Statfs(root, &after))
	fi, err := os.Stat(e.d.imagePath(id))
	mustDo(t, err)
	v, _ := e.d.volumes.Get(id)
	if v.CapacityBytes != 64<<20 || fi.Size() != 64<<20 || after.Blocks*uint64(after.Bsize) < 56<<20 {
		t.Errorf("after expansion: recorded %d bytes, image %d, filesystem %d blocks (before %d)", v.CapacityBytes, fi.Size(), after.Blocks, before.Blocks)
	}
	sameAttrs(t, "grown", treeAttrs(t, root), want)
	if treeSum(t, root) != wantSum {
		t.Errorf("the grown volume's data differs")
	}
	if n, err := writeUntilFull(filepath.Join(root, "more"), 30<<20); err != nil {
		t.Errorf("the grown volume takes %d more bytes (%v), want 30 MiB", n, err)
	}

	// In use: online only.
	target := e.publish(t, id, "grow")
	err = expand(128 << 20)
	v, _ = e.d.volumes.Get(id)
	if canGrowFilesystems() {
		if err != nil || v.CapacityBytes != 128<<20 {
			t.Errorf("online expansion: %v, recorded %d bytes", err, v.CapacityBytes)
		}
	} else {
		wantCode(t, err, codes.FailedPrecondition)
		if fi, _ := os.Stat(e.d.imagePath(id)); v.CapacityBytes != 64<<20 || fi.Size() != 64<<20 {
			t.Errorf("a refused expansion changed the volume: recorded %d bytes, image %d", v.CapacityBytes, fi.Size())
		}
	}
	e.unpublish(t, id, target)
	if left := loopsBelow(t, e.dir); len(left) != 1 {
		t.Errorf("loop devices after expansions: %v, want the volume's only", left)
	}
	e.deleteVolume(t, id)
}

func TestImageVolumeSizes(t *testing.T) {
	e := newImageEnv(t)
	// Too small for a filesystem with a journal: the image is larger, the
	// volume keeps its size, so that a claim of that size can be restored
	// from its snapshot (the provisioner refuses a snapshot larger than
	// the claim), and it holds at least what was asked for.
	small := e.createVolume(t, "pvc-small", 10<<20, mountCap())
	if small.GetCapacityBytes() != 10<<20 {
		t.Errorf("a 10 MiB filesystem volume reports %d bytes", small.GetCapacityBytes())
	}
	id := small.GetVolumeId()
	if fi, err := os.Stat(e.d.imagePath(id)); err != nil || fi.Size() != minImageSize {
		t.Errorf("the 10 MiB volume's image: %v, %v; want %d bytes", fi, err, minImageSize)
	}
	if n, err := writeUntilFull(filepath.Join(e.d.volumePath(id), "data"), 10<<20); err != nil {
		t.Errorf("a 10 MiB volume took %d bytes: %v", n, err)
	}
	snap := e.createSnapshot(t, "snap-small", id)
	if snap.GetSizeBytes() != 10<<20 {
		t.Errorf("the small volume's snapshot has size %d, want the volume's", snap.GetSizeBytes())
	}
	// Growing within the image's room changes the record only; the image
	// is never shrunk.
	if _, err := e.ctrl.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
		VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 12 << 20},
	}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(e.d.imagePath(id)); err != nil || fi.Size() != minImageSize {
		t.Errorf("the image after growing the volume to 12 MiB: %v, %v; want %d bytes", fi, err, minImageSize)
	}
	// A size whose last block group is too short for its metadata: the
	// formatter alone made a filesystem the kernel refused to mount
	// ("structure needs cleaning"), and CreateVolume failed for good.
	odd := e.createVolume(t, "pvc-1025mi", 1025<<20, mountCap()).GetVolumeId()
	if n, err := writeUntilFull(filepath.Join(e.d.volumePath(odd), "data"), 8<<20); err != nil {
		t.Errorf("a 1025 MiB volume took %d bytes: %v", n, err)
	}
	e.deleteVolume(t, odd)
	// Block volumes stay files.
	block := e.createVolume(t, "pvc-block", 1<<20, blockCap()).GetVolumeId()
	if v, _ := e.d.volumes.Get(block); v.Image {
		t.Errorf("a block volume got an image")
	}
	if _, err := e.ctrl.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	e.deleteVolume(t, id)
	e.deleteVolume(t, block)
}

func TestImageBackingNeedsLoopDevices(t *testing.T) {
	saved := loopControl
	loopControl = filepath.Join(t.TempDir(), "no-loop-control")
	t.Cleanup(func() { loopControl = saved })
	o := testOptions(t.TempDir())
	o.VolumeBacking = BackingImage
	d, err := New(context.Background(), o)
	if err == nil {
		_ = d.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "--volume-backing=image cannot work here") {
		t.Fatalf("New in image mode without loop devices: %v, want a start-up error naming --volume-backing", err)
	}
}

func TestImageVolumeUnmountableIsNeverServed(t *testing.T) {
	e := newImageEnv(t)
	id := e.createVolume(t, "pvc-lost", 32<<20, mountCap()).GetVolumeId()
	mustDo(t, os.WriteFile(filepath.Join(e.d.volumePath(id), "kept"), []byte("data"), 0o644))
	e.stop()
	img := e.d.imagePath(id)
	aside := filepath.Join(e.dir, "aside")
	mustDo(t, os.Rename(img, aside))
	e.start(t, e.d.opts)
	// The mount point is an empty folder of the node's disk, not the
	// volume: nothing may write or copy it.
	_, err := e.node.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: id, TargetPath: filepath.Join(e.dir, "pods", "lost"), VolumeCapability: mountCap(),
	})
	wantCode(t, err, codes.Unavailable)
	_, err = e.ctrl.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "snap-lost", SourceVolumeId: id})
	wantCode(t, err, codes.Unavailable)
	h, err := e.ctrl.ControllerGetVolumeHealth(context.Background(), &csi.ControllerGetVolumeHealthRequest{VolumeId: id})
	if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) == 0 {
		t.Errorf("health of an unmounted image volume: %v, %v; want a problem", h, err)
	}
	e.stop()
	mustDo(t, os.Rename(aside, img))
	e.start(t, e.d.opts)
	if got, err := os.ReadFile(filepath.Join(e.d.volumePath(id), "kept")); err != nil || string(got) != "data" {
		t.Fatalf("volume after its image came back: %q, %v", got, err)
	}
	e.deleteVolume(t, id)
}

func TestImageVolumeRecoveryAfterCrash(t *testing.T) {
	e := newImageEnv(t)
	kept := e.createVolume(t, "pvc-kept", 32<<20, mountCap()).GetVolumeId()
	e.stop()
	d := e.d
	// What a crash leaves: a create cut short while its image was
	// mounted at the temporary mount point, and one cut short after the
	// image was in place and mounted, before its record was written.
	const cut, unrecorded = "vol-cut", "vol-unrecorded"
	mountNewImage(t, tempPath(d.imagePath(cut)), tempPath(d.volumePath(cut)))
	mountNewImage(t, d.imagePath(unrecorded), d.volumePath(unrecorded))
	mustDo(t, os.WriteFile(filepath.Join(d.volumePath(unrecorded), "unaccounted"), []byte("keep me"), 0o644))
	e.start(t, d.opts)
	d = e.d
	for _, p := range []string{tempPath(d.imagePath(cut)), tempPath(d.volumePath(cut)), d.imagePath(unrecorded), d.volumePath(unrecorded)} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after the restart (%v)", p, err)
		}
	}
	quarantined, _ := filepath.Glob(filepath.Join(d.opts.DataDir, quarantineDirName, "*", "volumes", unrecorded+"*"))
	if len(quarantined) != 2 {
		t.Fatalf("quarantined for the unrecorded volume: %v; want its image and its folder", quarantined)
	}
	if n := len(loopsBelow(t, e.dir)); n != 1 {
		t.Errorf("%d loop devices attached after the restart; want 1, the kept volume's", n)
	}
	if m, err := mountAt(d.volumePath(kept)); err != nil || m == nil {
		t.Errorf("the recorded volume is not mounted after the restart (%v)", err)
	}
	e.deleteVolume(t, kept)
	// The quarantined image still holds the data.
	for _, q := range quarantined {
		if fi, err := os.Stat(q); err == nil && fi.Mode().IsRegular() {
			mnt := filepath.Join(e.dir, "inspect")
			mountNewImage(t, "", mnt, q)
			if got, err := os.ReadFile(filepath.Join(mnt, "unaccounted")); err != nil || string(got) != "keep me" {
				t.Errorf("quarantined image lost its data: %q, %v", got, err)
			}
			mustDo(t, unmountAll(mnt))
		}
	}
}

// mountNewImage mounts an image at mnt: a new one made at img, or, with
// img "", the existing one existing[0]. It is unmounted when the test ends
// if it still is.
func mountNewImage(t *testing.T, img, mnt string, existing ...string) {
	t.Helper()
	if img == "" {
		img = existing[0]
	} else {
		mustDo(t, makeImage(img, 32<<20, false))
	}
	mustDo(t, os.MkdirAll(mnt, 0o700))
	dev, f, err := attachLoop(img)
	mustDo(t, err)
	defer f.Close()
	mustDo(t, unix.Mount(dev.path, mnt, "ext4", 0, ""))
	t.Cleanup(func() { _ = unmountAll(mnt) })
}

// TestImageVolumeMountsNosuidNodev checks the flags of an image volume's
// mounts, made new, after a restart and at a pod's target: a set-user-ID
// file or a device node a workload puts into its volume has no effect.
func TestImageVolumeMountsNosuidNodev(t *testing.T) {
	e := newImageEnv(t)
	id := e.createVolume(t, "pvc-flags", 32<<20, mountCap()).GetVolumeId()
	check := func(when, path string) {
		t.Helper()
		if flags, err := statfsFlags(path); err != nil || flags&(unix.MS_NOSUID|unix.MS_NODEV) != unix.MS_NOSUID|unix.MS_NODEV {
			t.Errorf("flags of the mount at %s %s: %#x, %v; want nosuid,nodev", path, when, flags, err)
		}
	}
	check("after CreateVolume", e.d.volumePath(id))
	e.restart(t)
	check("after a restart", e.d.volumePath(id))
	target := e.publish(t, id, "flags")
	check("at a pod's target", target)
	e.unpublish(t, id, target)
	e.deleteVolume(t, id)
}
