//go:build linux

package hostpath

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"unsafe"

	"github.com/diskfs/go-diskfs/backend"
	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/ext4"
	"golang.org/x/sys/unix"
)

// Filesystem images: a volume's fixed-size ext4 filesystem in a sparse
// file, made without mkfs (the driver's image holds only its binary) by
// go-diskfs, and grown online by the kernel.

// ext4BlockSize is the block size of every image: 4 KiB, the page size.
const ext4BlockSize = 4096

// minImageSize is the smallest image: a journal and a few groups' metadata
// need room. A smaller volume gets an image of this size, which offers
// about what was asked for; the volume keeps the size it was asked for, so
// that a claim of the same size can be restored from its snapshots.
const minImageSize = 16 << 20

// imageSize is the size of a volume's image for a volume of size bytes.
func imageSize(size int64) int64 { return max(size, minImageSize) }

// makeImage creates a new sparse file of size bytes at path holding an
// empty ext4 filesystem (see ext4Layout for its size, which may be a little
// less), checked (checkImageLayout) and flushed with sync. The formatter
// zeroes the inode tables and the journal; writes of zeros to parts of the
// new file never written are skipped (they read as zeros anyway), so an
// image of any size takes a few hundred KiB of disk until data is written.
func makeImage(path string, size int64, sync bool) error {
	if size < minImageSize {
		return fmt.Errorf("a filesystem image needs at least %d bytes, not %d", minImageSize, size)
	}
	l := ext4Layout(size)
	if l.inodes() > math.MaxUint32 {
		return fmt.Errorf("a filesystem image of %d bytes would need %d inodes, more than ext4 has", size, l.inodes())
	}
	return createSparse(path, os.O_RDWR|unix.O_CLOEXEC, 0o600, size, sync, func(f *os.File) error {
		if err := formatExt4(f, l, size); err != nil {
			return fmt.Errorf("format ext4: %w", err)
		}
		return checkNewImage(f, size)
	})
}

// formatExt4 formats the new, all-holes image f of size bytes with layout
// l; tests replace it.
var formatExt4 = func(f *os.File, l imageLayout, _ int64) error {
	b := file.New(f, false)
	w, err := b.Writable()
	if err != nil {
		return err
	}
	params := &ext4.Params{
		SectorsPerBlock: ext4BlockSize / 512,
		BlocksPerGroup:  ext4BlocksPerGroup,
		InodeCount:      uint32(l.inodes()),
		VolumeName:      "hostpath",
		// The formatter lays out a resize inode only for 1 KiB blocks;
		// the kernel grows the filesystem without one (meta_bg).
		Features: []ext4.FeatureOpt{ext4.WithFeatureReservedGDTBlocksForExpansion(false)},
	}
	_, err = ext4.Create(&sparseStorage{Storage: b, w: w}, l.blocks*ext4BlockSize, 0, 512, params)
	return err
}

// Geometry of the images' filesystems: what makeImage asks the formatter
// for, and what it relies on to keep the formatter's layout sound.
const (
	// ext4BlocksPerGroup is the most one block bitmap covers: 128 MiB.
	ext4BlocksPerGroup = 8 * ext4BlockSize
	// ext4InodeSize is the size of the formatter's inodes.
	ext4InodeSize = 256
	// ext4BytesPerInode gives a filesystem one inode per 8 KiB.
	ext4BytesPerInode = 8192
	// ext4DescriptorSize is the size of a group descriptor (64bit).
	ext4DescriptorSize = 64
	// ext4TailMargin is how many blocks a short last block group keeps
	// beyond its metadata, as mke2fs asks.
	ext4TailMargin = 50
)

// imageLayout is a filesystem's size in blocks and its inodes per group.
type imageLayout struct {
	blocks, groups, inodesPerGroup int64
}

func (l imageLayout) inodes() int64 { return l.groups * l.inodesPerGroup }

// ext4Layout is the filesystem makeImage makes in an image of size bytes.
//
// The formatter (go-diskfs v1.9.4) places each block group's metadata
// without checking that a short last group can hold what it puts there:
// when the last group begins a flex group (groups 8, 16, ...: sizes just
// above a multiple of 1 GiB), its bitmaps and inode table run past the end
// of the filesystem and the kernel refuses to mount it; when it is a group
// with a copy of the superblock (1, 3, 5, 7, 9, 25, ...) and holds fewer
// blocks than that copy and the descriptor table, the copy is written past
// the end, beyond the image's size. Like mke2fs, the filesystem leaves out
// a last group too short for its own metadata and a margin: at most a few
// MiB of the image stay unused, a volume grown later uses them.
//
// Inodes per group fill whole inode-table blocks, as mke2fs makes them
// (the kernel counts inode-table blocks rounding down).
func ext4Layout(size int64) imageLayout {
	blocks := size / ext4BlockSize
	for {
		groups := ceilDiv(blocks, ext4BlocksPerGroup)
		perBlock := int64(ext4BlockSize / ext4InodeSize)
		ipg := ceilDiv(ceilDiv(blocks*ext4BlockSize/ext4BytesPerInode, groups), perBlock) * perBlock
		l := imageLayout{blocks: blocks, groups: groups, inodesPerGroup: ipg}
		tail := blocks % ext4BlocksPerGroup
		if groups == 1 || tail == 0 || tail >= l.lastGroupNeeds() {
			return l
		}
		blocks -= tail
	}
}

// lastGroupNeeds is the number of blocks a short last group must hold: a
// copy of the superblock and the descriptor table, its own bitmaps and
// inode table, and the margin.
func (l imageLayout) lastGroupNeeds() int64 {
	gdt := ceilDiv(l.groups*ext4DescriptorSize, ext4BlockSize)
	itb := l.inodesPerGroup * ext4InodeSize / ext4BlockSize
	return 1 + gdt + 2 + itb + ext4TailMargin
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// sparseStorage is a backend over a new, all-holes file that skips writes
// of zeros to ranges nothing was written to yet.
type sparseStorage struct {
	backend.Storage
	w       backend.WritableFile
	written [][2]int64
}

func (s *sparseStorage) Writable() (backend.WritableFile, error) {
	return sparseWriter{WritableFile: s.w, s: s}, nil
}

type sparseWriter struct {
	backend.WritableFile
	s *sparseStorage
}

func (w sparseWriter) WriteAt(b []byte, off int64) (int, error) {
	end := off + int64(len(b))
	if allZero(b) && !w.s.overlaps(off, end) {
		return len(b), nil
	}
	w.s.written = append(w.s.written, [2]int64{off, end})
	return w.WritableFile.WriteAt(b, off)
}

// overlaps reports whether anything was written to [off, end).
func (s *sparseStorage) overlaps(off, end int64) bool {
	for _, r := range s.written {
		if off < r[1] && r[0] < end {
			return true
		}
	}
	return false
}

var zeroChunk = make([]byte, 64<<10)

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroChunk))
		if !bytes.Equal(b[:n], zeroChunk[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// ext4ResizeFS is EXT4_IOC_RESIZE_FS, _IOW('f', 16, __u64): grow the
// mounted filesystem to the given number of blocks.
const ext4ResizeFS = 0x40086610

// capSysResource is CAP_SYS_RESOURCE, which the kernel asks of whoever
// grows an ext4 filesystem.
const capSysResource = 24

// errCannotGrow says the kernel would refuse to grow a filesystem.
var errCannotGrow = errors.New("growing a filesystem volume in use needs CAP_SYS_RESOURCE (online ext4 resize), which the driver does not have")

// canGrowFilesystems reports whether this process may grow ext4
// filesystems online.
func canGrowFilesystems() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[0].Effective&(1<<capSysResource) != 0
}

// growImage grows the image at path, attached to a loop device and mounted
// at mountPoint, and its filesystem to size bytes. Growing the file first
// is harmless when a later step fails: the filesystem does not use the
// new room until it is grown, and a retry grows it again.
func growImage(path, mountPoint string, size int64, sync bool) error {
	if err := resizeFile(path, size, sync); err != nil {
		return fmt.Errorf("grow image file: %w", err)
	}
	_, dev, err := loopOfImage(path)
	if err != nil {
		return err
	}
	defer dev.Close()
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_CAPACITY, 0); err != nil {
		return fmt.Errorf("grow loop device: %w", err)
	}
	dir, err := os.Open(mountPoint)
	if err != nil {
		return fmt.Errorf("open mounted filesystem: %w", err)
	}
	defer dir.Close()
	blocks := uint64(size / ext4BlockSize)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, dir.Fd(), ext4ResizeFS, uintptr(unsafe.Pointer(&blocks))); errno != 0 {
		return fmt.Errorf("grow filesystem: %w", errno)
	}
	return nil
}
