package hostpath

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// copyChunk is the unit in which data ranges are read and scanned for
// zeros.
const copyChunk = 4 << 20

// copier makes point-in-time copies of volume data, in-process: a reflink
// (FICLONE) where the filesystem shares blocks, otherwise a sparse-aware copy
// that skips holes and all-zero chunks and moves data with copy_file_range.
type copier struct {
	// sync makes copies durable (fsync) before they are reported done.
	sync bool
	// noReflink disables FICLONE, for tests of the fallback path.
	noReflink bool
	// holesKnown says the source's zero blocks are holes already (it is a
	// snapshot), so data extents are copied without reading them first.
	holesKnown bool
	// direct writes the data extents of files with direct I/O where the
	// filesystem allows it, leaving the page cache alone (directcopy.go).
	// It applies with holesKnown only.
	direct bool
}

// copied describes what a copy made.
type copied struct {
	// dirs are the directories created, relative to the copy's root ("."
	// is the root). The copier does not flush them: flushTree does, when
	// the caller has renamed the copy into place.
	dirs []string
	// manifest summarises the copy for verification after a crash.
	manifest state.Manifest
}

// copyPath copies src to dst; src is a regular file (block volume) or a
// directory tree (mount volume). dst must not exist: if it does, the error
// matches fs.ErrExist. With sync, regular files are flushed before
// copyPath returns.
func (c copier) copyPath(dst, src string) (copied, error) {
	info, err := os.Lstat(src)
	if err != nil {
		return copied{}, fmt.Errorf("stat copy source: %w", err)
	}
	if info.IsDir() {
		return c.copyTree(dst, src)
	}
	if err := c.copyFile(dst, src, info); err != nil {
		return copied{}, err
	}
	return copied{manifest: state.Manifest{Entries: 1, Bytes: info.Size()}}, nil
}

// copyTree copies a directory tree: directories, regular files, symlinks.
// Other file types (devices, sockets, fifos) are skipped.
func (c copier) copyTree(dst, src string) (copied, error) {
	var out copied
	var times []dirTimes
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := "."
		if path != src {
			rel = path[len(src)+1:]
		}
		target := filepath.Join(dst, rel)
		if !d.IsDir() && d.Type()&fs.ModeSymlink == 0 && !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out.manifest.Entries++
		switch {
		case d.IsDir():
			st, err := statOf(info)
			if err != nil {
				return err
			}
			out.dirs = append(out.dirs, rel)
			times = append(times, dirTimes{rel: rel, times: timesOf(st)})
			if err := os.Mkdir(target, 0o700); err != nil {
				return err
			}
			return keepDirAttrs(target, info)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
			return keepLinkAttrs(target, info)
		default:
			out.manifest.Bytes += info.Size()
			return c.copyFile(target, path, info)
		}
	})
	if err == nil {
		err = keepDirTimes(dst, times)
	}
	return out, err
}

// flushTree makes a copy renamed into place at root durable: it flushes
// the copy's directories and, concurrently, the directory holding root.
// Regular files were flushed by the copy.
func flushTree(root string, c copied) error {
	var parentErr error
	var wg sync.WaitGroup
	wg.Go(func() { parentErr = state.SyncDir(filepath.Dir(root)) })
	err := flushDirs(root, c.dirs)
	wg.Wait()
	return errors.Join(err, parentErr)
}

// flushDirs flushes the directories dirs, relative to root.
func flushDirs(root string, dirs []string) error {
	var errs []error
	for _, d := range dirs {
		errs = append(errs, fsyncPath(filepath.Join(root, d)))
	}
	return errors.Join(errs...)
}

// fsyncPath opens a file or directory and flushes it.
func fsyncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open for sync: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", filepath.Base(path), err)
	}
	return nil
}

// manifestOf summarises the data at path as copyPath does.
func manifestOf(path string) (state.Manifest, error) {
	var m state.Manifest
	err := filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir(), d.Type()&fs.ModeSymlink != 0:
			m.Entries++
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			m.Entries++
			m.Bytes += info.Size()
		}
		return nil
	})
	return m, err
}

// copyFile copies one regular file, keeping its size and holes, and the
// owner, mode and times of info, the source's (keepFileAttrs).
func (c copier) copyFile(dst, src string, info fs.FileInfo) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open copy source: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create copy target: %w", err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close copy target: %w", cerr)
		}
	}()
	if !c.noReflink && unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) == nil {
		return c.finish(out, info)
	}
	size, err := in.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("size copy source: %w", err)
	}
	if err := c.copyData(out, dst, in, size); err != nil {
		return err
	}
	if err := out.Truncate(size); err != nil {
		return fmt.Errorf("size copy target: %w", err)
	}
	return c.finish(out, info)
}

// copyData copies the data of in (size bytes) to out, the new file dst.
func (c copier) copyData(out *os.File, dst string, in *os.File, size int64) error {
	if !c.holesKnown {
		return copySparse(out, in, size, c.sync)
	}
	if !c.direct {
		return copyExtents(out, in, size, c.sync)
	}
	err := copyExtentsDirect(out, dst, in, size)
	if !errors.Is(err, errDirectUnsupported) {
		return err
	}
	if err := out.Truncate(0); err != nil {
		return fmt.Errorf("clear copy target: %w", err)
	}
	return copyExtents(out, in, size, c.sync)
}

// finish gives the copy out its source's owner, mode and times (info) and,
// with sync, flushes it.
func (c copier) finish(out *os.File, info fs.FileInfo) error {
	if err := keepFileAttrs(out, info); err != nil {
		return err
	}
	if !c.sync {
		return nil
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("sync copy target: %w", err)
	}
	return nil
}

// copySparse copies the data extents of in to out at the same offsets.
// Extents are read in copyChunk pieces; within a piece, runs of non-zero
// zeroBlock blocks are copied and all-zero blocks stay holes. With
// writeback, each copied piece is handed to the disk at once
// (sync_file_range), so the final fsync finds little left to write and the
// copy does not stall on dirty-page throttling. The read buffer is no
// larger than the file: clearing a whole chunk for a small file costs more
// than copying it.
func copySparse(out, in *os.File, size int64, writeback bool) error {
	buf := make([]byte, min(copyChunk, size))
	return forEachExtent(in, 0, size, func(start, end int64) error {
		for off := start; off < end; {
			n := min(int64(copyChunk), end-off)
			if _, err := in.ReadAt(buf[:n], off); err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("read copy source: %w", err)
			}
			for _, r := range dataRuns(buf[:n]) {
				if err := copyRange(out, in, off+r[0], r[1]-r[0]); err != nil {
					return err
				}
				if writeback {
					_ = unix.SyncFileRange(int(out.Fd()), off+r[0], r[1]-r[0], unix.SYNC_FILE_RANGE_WRITE)
				}
			}
			off += n
		}
		return nil
	})
}

// copyExtents copies the data extents of in to out at the same offsets
// without looking at the data, in copyChunk pieces when writeback is asked
// for (see copySparse) and in one copy_file_range per extent otherwise.
func copyExtents(out, in *os.File, size int64, writeback bool) error {
	return forEachExtent(in, 0, size, func(start, end int64) error {
		if !writeback {
			return copyRange(out, in, start, end-start)
		}
		for off := start; off < end; off += copyChunk {
			n := min(int64(copyChunk), end-off)
			if err := copyRange(out, in, off, n); err != nil {
				return err
			}
			_ = unix.SyncFileRange(int(out.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
		}
		return nil
	})
}

// zeroBlock is the granularity at which zeros are turned into holes.
const zeroBlock = 64 << 10

// dataRuns returns the [start, end) runs of buf made of blocks that are not
// all zeros.
func dataRuns(buf []byte) [][2]int64 {
	var runs [][2]int64
	for off := 0; off < len(buf); off += zeroBlock {
		end := min(off+zeroBlock, len(buf))
		if isZero(buf[off:end]) {
			continue
		}
		if n := len(runs); n > 0 && runs[n-1][1] == int64(off) {
			runs[n-1][1] = int64(end)
			continue
		}
		runs = append(runs, [2]int64{int64(off), int64(end)})
	}
	return runs
}

// copyRange moves n bytes at off from in to out with copy_file_range, which
// stays in the kernel (and shares blocks on filesystems that can).
func copyRange(out, in *os.File, off, n int64) error {
	src, dst := off, off
	for n > 0 {
		done, err := unix.CopyFileRange(int(in.Fd()), &src, int(out.Fd()), &dst, int(n), 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("copy_file_range: %w", err)
		}
		if done == 0 {
			return fmt.Errorf("copy_file_range: source ended early at %d", src)
		}
		n -= int64(done)
	}
	return nil
}

// forEachExtent calls fn for every data range [start, end) of f between from
// and size, found with SEEK_DATA/SEEK_HOLE. Filesystems without hole
// reporting yield one range covering everything.
func forEachExtent(f *os.File, from, size int64, fn func(start, end int64) error) error {
	fd := int(f.Fd())
	for off := from; off < size; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		end = min(end, size)
		if start >= end {
			return nil
		}
		if err := fn(start, end); err != nil {
			return err
		}
		off = end
	}
	return nil
}

// isZero reports whether b holds only zero bytes, eight at a time.
func isZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
