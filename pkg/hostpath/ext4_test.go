//go:build linux

package hostpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/ext4"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
	// group is the size of a block group: 32768 blocks of 4 KiB.
	group = 128 * mib
)

// imageSize is a size TestImageSizes formats; fsck says e2fsck checks it
// too (the others have the layout check of makeImage only).
type imageSizeCase struct {
	size int64
	fsck bool
}

// imageSizes are the sizes TestImageSizes formats: the 16 MiB floor and
// odd sizes, and sizes around every block-group boundary up to 17 groups,
// and beyond: e2fsck checks those around the groups that begin a flex
// group (8, 16, 128: a short last group then holds its own bitmaps and
// inode table) or hold a superblock copy (1, 3, 7, 9, 25, 81: it then
// holds that copy and the descriptor table, of one block up to 64 groups,
// two beyond). With -short, fewer.
func imageSizes() []imageSizeCase {
	var sizes []imageSizeCase
	for _, s := range []int64{16 * mib, 16*mib + 1, 16*mib + 64*kib, 17*mib - 1, 100*mib + 12345, 1*gib + 4097} {
		sizes = append(sizes, imageSizeCase{size: s, fsck: true})
	}
	checked := map[int64]bool{1: true, 3: true, 7: true, 8: true, 9: true, 16: true, 17: true}
	for n := int64(1); n <= 17; n++ {
		if testing.Short() && n != 1 && n != 8 {
			continue
		}
		m := n * group
		for _, s := range []int64{m - mib, m, m + 4*kib, m + 12345, m + mib, m + 2*mib, m + 3*mib, m + 4*mib, m + 5*mib} {
			sizes = append(sizes, imageSizeCase{size: s, fsck: checked[n]})
		}
	}
	if !testing.Short() {
		for _, s := range []int64{25*group + 4*kib, 25*group + mib, 81*group + 4*kib, 128*group + 4*kib} {
			sizes = append(sizes, imageSizeCase{size: s, fsck: true})
		}
	}
	return sizes
}

// e2fsck finds Debian's e2fsck (package e2fsprogs) or skips the test.
func e2fsck(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("e2fsck"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/e2fsck", "/sbin/e2fsck"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("e2fsck not found: install Debian's e2fsprogs (apt-get install e2fsprogs; make test does as root)")
	return ""
}

// fsck runs e2fsck -fn on img and fails the test with its report when it
// finds anything wrong.
func fsck(t *testing.T, bin, img, when string) {
	t.Helper()
	out, err := exec.Command(bin, "-fn", img).CombinedOutput()
	if err != nil {
		t.Errorf("e2fsck -fn %s: %v\n%s", when, err, out)
	}
}

// TestImageSizes formats images of sizes around every kind of block-group
// boundary (imageSizes); e2fsck checks many of them, new or, as root,
// after they were mounted and a file written: with go-diskfs's layout
// alone, an image of 1 GiB + 1 MiB has group 8's inode table past its end
// (the kernel refuses it) and one of 128 MiB + 4 KiB a superblock copy
// past its end.
func TestImageSizes(t *testing.T) {
	bin := e2fsck(t)
	root := os.Geteuid() == 0 && checkLoopSupport() == nil
	if !root {
		t.Log("e2fsck checks new images only: mounting them needs root and loop devices")
	}
	dir := t.TempDir()
	t.Cleanup(func() { checkNothingLeft(t, dir) })
	for _, c := range imageSizes() {
		img := filepath.Join(dir, fmt.Sprintf("img-%d", c.size))
		if err := makeImage(img, c.size, false); err != nil {
			t.Errorf("image of %d bytes: %v", c.size, err)
			continue
		}
		switch {
		case c.fsck && root:
			mountAndFill(t, img, filepath.Join(dir, "mnt"), c.size)
			fsck(t, bin, img, fmt.Sprintf("of an image of %d bytes after use", c.size))
		case c.fsck:
			fsck(t, bin, img, fmt.Sprintf("of a new image of %d bytes", c.size))
		}
		mustDo(t, os.Remove(img))
	}
}

// mountAndFill mounts img at mnt, writes a file of 1 MiB and unmounts it.
func mountAndFill(t *testing.T, img, mnt string, size int64) {
	t.Helper()
	mustDo(t, os.MkdirAll(mnt, 0o700))
	dev, f, err := attachLoop(img)
	mustDo(t, err)
	err = unix.Mount(dev.path, mnt, "ext4", 0, "")
	_ = f.Close()
	if err != nil {
		t.Errorf("mount an image of %d bytes: %v", size, err)
		return
	}
	defer func() { mustDo(t, unix.Unmount(mnt, 0)) }()
	var st unix.Statfs_t
	mustDo(t, unix.Statfs(mnt, &st))
	if total := int64(st.Blocks) * st.Bsize; total > size || total < size/2 {
		t.Errorf("an image of %d bytes offers %d bytes", size, total)
	}
	mustDo(t, os.WriteFile(filepath.Join(mnt, "data"), randomBytes(t, int(mib)), 0o600))
}

func TestImageLayout(t *testing.T) {
	for _, c := range []struct {
		size           int64
		blocks, groups int64
		inodesPerGroup int64
	}{
		{size: 16 * mib, blocks: 4096, groups: 1, inodesPerGroup: 2048},
		// A first group of 4112 blocks: 2056 inodes rounded up to fill
		// inode-table blocks of 16.
		{size: 16*mib + 64*kib, blocks: 4112, groups: 1, inodesPerGroup: 2064},
		{size: 1 * gib, blocks: 262144, groups: 8, inodesPerGroup: 16384},
		// Group 8 would be 1 MiB, too short for its own inode table:
		// left out.
		{size: 1*gib + mib, blocks: 262144, groups: 8, inodesPerGroup: 16384},
		{size: 1*gib + 3*mib, blocks: 262144, groups: 8, inodesPerGroup: 16384},
		// 4 MiB hold group 8's 914 inode-table blocks and more.
		{size: 1*gib + 4*mib, blocks: 263168, groups: 9, inodesPerGroup: 14624},
		// Group 1 would be one block, with a superblock copy.
		{size: group + 4*kib, blocks: 32768, groups: 1, inodesPerGroup: 16384},
		{size: 3*group + 12345, blocks: 98304, groups: 3, inodesPerGroup: 16384},
	} {
		l := ext4Layout(c.size)
		if l.blocks != c.blocks || l.groups != c.groups || l.inodesPerGroup != c.inodesPerGroup {
			t.Errorf("ext4Layout(%d) = %+v, want %d blocks in %d groups of %d inodes", c.size, l, c.blocks, c.groups, c.inodesPerGroup)
		}
	}
}

// TestImageLayoutCheck has the check find what the formatter did wrong
// before makeImage chose the layouts: an inode table and a superblock copy
// past the end of the filesystem.
func TestImageLayoutCheck(t *testing.T) {
	for _, c := range []struct {
		size int64
		want string
	}{
		{size: 1*gib + mib, want: "the inode table of group 8 (blocks 262146-263057) lies outside blocks 0-262399"},
		{size: group + 4*kib, want: "the superblock and descriptor table of group 1 (blocks 32768-32769) does not fit into the group, which ends at block 32768"},
	} {
		img := filepath.Join(t.TempDir(), "img")
		f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		mustDo(t, err)
		mustDo(t, f.Truncate(c.size))
		params := &ext4.Params{SectorsPerBlock: 8, Features: []ext4.FeatureOpt{ext4.WithFeatureReservedGDTBlocksForExpansion(false)}}
		_, err = ext4.Create(file.New(f, false), c.size, 0, 512, params)
		mustDo(t, err)
		err = checkNewImage(f, c.size)
		_ = f.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("check of the formatter's own image of %d bytes: %v; want %q", c.size, err, c.want)
		}
	}
}

// TestBrokenImageFailsCreateVolume formats with the formatter's own layout
// at a size it gets wrong: CreateVolume fails with Internal, saying why,
// and leaves no image, mount point or loop device behind.
func TestBrokenImageFailsCreateVolume(t *testing.T) {
	e := newImageEnv(t)
	saved := formatExt4
	formatExt4 = func(f *os.File, _ imageLayout, size int64) error {
		params := &ext4.Params{SectorsPerBlock: 8, Features: []ext4.FeatureOpt{ext4.WithFeatureReservedGDTBlocksForExpansion(false)}}
		_, err := ext4.Create(file.New(f, false), size, 0, 512, params)
		return err
	}
	t.Cleanup(func() { formatExt4 = saved })
	_, err := e.ctrl.CreateVolume(t.Context(), &csi.CreateVolumeRequest{
		Name: "pvc-broken", CapacityRange: &csi.CapacityRange{RequiredBytes: 1*gib + mib}, VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
	})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "inode table of group 8") {
		t.Errorf("CreateVolume of a broken image: %v; want Internal with the check's finding", err)
	}
	for _, dir := range []string{imagesDir(e.d.opts.DataDir), volumesDir(e.d.opts.DataDir)} {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		if len(entries) > 0 {
			t.Errorf("%s holds %d entries after a failed create", dir, len(entries))
		}
	}
}
