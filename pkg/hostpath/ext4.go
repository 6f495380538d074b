//go:build linux

package hostpath

import (
	"bytes"
	"errors"
	"fmt"
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
// empty ext4 filesystem, flushed with sync. The formatter zeroes the inode
// tables and the journal; writes of zeros to parts of the new file never
// written are skipped (they read as zeros anyway), so an image of any size
// takes a few hundred KiB of disk until data is written.
func makeImage(path string, size int64, sync bool) error {
	if size < minImageSize {
		return fmt.Errorf("a filesystem image needs at least %d bytes, not %d", minImageSize, size)
	}
	return createSparse(path, os.O_RDWR|unix.O_CLOEXEC, 0o600, size, sync, func(f *os.File) error {
		b := file.New(f, false)
		w, err := b.Writable()
		if err != nil {
			return err
		}
		params := &ext4.Params{
			SectorsPerBlock: ext4BlockSize / 512,
			VolumeName:      "hostpath",
			// The formatter lays out a resize inode only for 1 KiB blocks;
			// the kernel grows the filesystem without one (meta_bg).
			Features: []ext4.FeatureOpt{ext4.WithFeatureReservedGDTBlocksForExpansion(false)},
		}
		if _, err := ext4.Create(&sparseStorage{Storage: b, w: w}, size, 0, 512, params); err != nil {
			return fmt.Errorf("format ext4: %w", err)
		}
		return nil
	})
}

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
