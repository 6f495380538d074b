//go:build linux

// Package fscopy is the hostpath driver's copy engine: it makes the
// point-in-time copies that snapshots, restores and clones are made of, reads
// volume data that a possibly hostile workload may be changing meanwhile
// without following its links (beneath.go), and makes copies durable
// (flush.go). It is Linux-only: it relies on openat2, copy_file_range,
// FICLONE, SEEK_DATA/SEEK_HOLE, sync_file_range and native AIO.
package fscopy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// copyChunk is the unit in which data ranges are read and scanned for
// zeros.
const copyChunk = 4 << 20

// Copier makes point-in-time copies of volume data, in-process: a reflink
// (FICLONE) where the filesystem shares blocks, otherwise a sparse-aware copy
// that skips holes and all-zero chunks and moves data with copy_file_range.
type Copier struct {
	// Sync makes copies durable (fsync) before they are reported done.
	Sync bool
	// NoReflink disables FICLONE, for tests of the fallback path.
	NoReflink bool
	// HolesKnown says the source's zero blocks are holes already (it is a
	// snapshot), so data extents are copied without reading them first.
	HolesKnown bool
	// Direct writes the data extents of files with direct I/O where the
	// filesystem allows it, leaving the page cache alone (directcopy.go).
	// It applies with HolesKnown only.
	Direct bool
	// Hooks, when set, let tests act during a copy.
	Hooks *Hooks
}

// Copied describes what a copy made.
type Copied struct {
	// Dirs are the directories created, relative to the copy's root ("."
	// is the root). The Copier does not flush them: FlushTree does, when
	// the caller has renamed the copy into place.
	Dirs []string
	// Manifest summarises the copy for verification after a crash: it
	// counts what was copied, with each file's size as the copy has it.
	Manifest state.Manifest
	// Changed counts the source entries left out because they vanished or
	// were replaced between the listing of their directory and their open.
	Changed int
}

// Hooks let tests act at fixed points of a copy.
type Hooks struct {
	// Listed runs after an entry (relative path) was listed in its
	// directory and before it is opened.
	Listed func(rel string)
}

// CopyPath copies src to dst; src is a regular file (block volume) or a
// directory tree (mount volume), which a workload may be changing: it is
// read as beneath.go describes. dst must not exist: if it does, the error
// matches fs.ErrExist. With sync, regular files are flushed before
// CopyPath returns.
func (c Copier) CopyPath(dst, src string) (Copied, error) {
	in, st, err := openRoot(src, unix.O_RDONLY)
	if err != nil {
		return Copied{}, fmt.Errorf("open copy source: %w", err)
	}
	defer in.Close()
	switch {
	case isDirMode(st.Mode):
		return c.copyTree(dst, in, &st)
	case isRegMode(st.Mode):
		size, err := c.copyFile(unix.AT_FDCWD, dst, in, &st)
		return Copied{Manifest: state.Manifest{Entries: 1, Bytes: size}}, err
	}
	return Copied{}, fmt.Errorf("copy source %s is neither a directory nor a regular file", src)
}

// treeCopy is one copy of a directory tree in progress.
type treeCopy struct {
	c Copier
	// root is the copy's top directory; dev the source's device.
	root int
	dev  uint64
	// links maps the source files with more than one link to their first
	// copy, so that the others become links to it.
	links map[devIno]linkedCopy
	made  Copied
}

// linkedCopy is the first copy of a file with several links.
type linkedCopy struct {
	rel  string
	size int64
}

// copyTree copies the directory tree in (lstat st) to the new directory
// dst: directories, regular files (hard links stay hard links) and
// symlinks. FIFOs, sockets and devices are left out, never opened.
func (c Copier) copyTree(dst string, in *os.File, st *unix.Stat_t) (Copied, error) {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return Copied{}, err
	}
	out, _, err := openRoot(dst, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return Copied{}, err
	}
	defer out.Close()
	w := &treeCopy{c: c, root: int(out.Fd()), dev: st.Dev, links: map[devIno]linkedCopy{}}
	w.made.Dirs, w.made.Manifest.Entries = []string{"."}, 1
	if err := w.copyDir(int(in.Fd()), w.root, ".", 0); err != nil {
		return w.made, err
	}
	return w.made, KeepAttrs(w.root, unix.AT_FDCWD, dst, st)
}

// copyDir copies the entries of the source directory src into the copy's
// directory dst, rel below the root.
func (w *treeCopy) copyDir(src, dst int, rel string, depth int) error {
	if depth >= maxTreeDepth {
		return fmt.Errorf("%s: the tree is more than %d levels deep", rel, maxTreeDepth)
	}
	entries, err := listDir(src)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	for _, l := range entries {
		child := path.Join(rel, l.name)
		if w.c.Hooks != nil && w.c.Hooks.Listed != nil {
			w.c.Hooks.Listed(child)
		}
		switch {
		case l.st.Dev != w.dev:
			err = fmt.Errorf("%w: %s is another filesystem", errChanged, l.name)
		case l.kind() == unix.S_IFDIR:
			err = w.copySubdir(src, dst, l, child, depth)
		case l.kind() == unix.S_IFREG:
			err = w.copyRegular(src, dst, l, child)
		case l.kind() == unix.S_IFLNK:
			err = w.copySymlink(src, dst, l)
		default:
			continue // FIFO, socket or device: not copied
		}
		if errors.Is(err, errChanged) {
			w.made.Changed++
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", child, err)
		}
	}
	return nil
}

// copySubdir copies the directory entry l of src, and what it holds.
func (w *treeCopy) copySubdir(src, dst int, l listed, rel string, depth int) error {
	in, st, err := openListedDir(src, l)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := unix.Mkdirat(dst, l.name, 0o700); err != nil {
		return fmt.Errorf("create copy directory: %w", err)
	}
	fd, err := openBeneath(dst, l.name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("open copy directory: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	w.made.Manifest.Entries++
	w.made.Dirs = append(w.made.Dirs, rel)
	if err := w.copyDir(int(in.Fd()), fd, rel, depth+1); err != nil {
		return err
	}
	// Last: creating the entries changed the directory's times.
	return KeepAttrs(fd, dst, l.name, &st)
}

// copyRegular copies the regular file entry l of src, or links it to the
// copy of another of its links.
func (w *treeCopy) copyRegular(src, dst int, l listed, rel string) error {
	key := devIno{l.st.Dev, l.st.Ino}
	if first, ok := w.links[key]; ok && l.st.Nlink > 1 {
		if err := unix.Linkat(w.root, first.rel, dst, l.name, 0); err != nil {
			return fmt.Errorf("link copy to %s: %w", first.rel, err)
		}
		w.made.Manifest.Entries++
		w.made.Manifest.Bytes += first.size
		return nil
	}
	in, st, err := openListedFile(src, l, unix.O_RDONLY)
	if err != nil {
		return err
	}
	defer in.Close()
	size, err := w.c.copyFile(dst, l.name, in, &st)
	if err != nil {
		return err
	}
	if st.Nlink > 1 {
		w.links[key] = linkedCopy{rel: rel, size: size}
	}
	w.made.Manifest.Entries++
	w.made.Manifest.Bytes += size
	return nil
}

// copySymlink copies the symlink entry l of src: its target, as text.
func (w *treeCopy) copySymlink(src, dst int, l listed) error {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(src, l.name, buf)
	if err == unix.ENOENT || err == unix.EINVAL {
		return fmt.Errorf("%w: readlink %s: %w", errChanged, l.name, err)
	}
	if err != nil {
		return fmt.Errorf("readlink: %w", err)
	}
	if err := unix.Symlinkat(string(buf[:n]), dst, l.name); err != nil {
		return fmt.Errorf("create copy symlink: %w", err)
	}
	w.made.Manifest.Entries++
	return keepLinkAttrs(dst, l.name, &l.st)
}

// ManifestOf summarises the data at path as CopyPath does: every
// directory, symlink and regular file name, and the regular files' sizes.
func ManifestOf(path string) (state.Manifest, error) {
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

// copyFile copies the open regular file in (fstat st) to the new file
// name in directory dirfd, keeping its size and holes and its owner, mode
// and times, and returns the copy's size.
func (c Copier) copyFile(dirfd int, name string, in *os.File, st *unix.Stat_t) (size int64, err error) {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, &os.PathError{Op: "create copy target", Path: name, Err: err}
	}
	out := os.NewFile(uintptr(fd), name)
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close copy target: %w", cerr)
		}
	}()
	if c.NoReflink || unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) != nil {
		if err := c.copyContent(out, in); err != nil {
			return 0, err
		}
	}
	if err := c.finish(out, dirfd, name, st); err != nil {
		return 0, err
	}
	var now unix.Stat_t
	if err := unix.Fstat(int(out.Fd()), &now); err != nil {
		return 0, fmt.Errorf("stat copy target: %w", err)
	}
	return now.Size, nil
}

// copyContent copies the data of in, as long as in is now, to out.
func (c Copier) copyContent(out, in *os.File) error {
	size, err := in.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("size copy source: %w", err)
	}
	if err := c.copyData(out, in, size); err != nil {
		return err
	}
	if err := out.Truncate(size); err != nil {
		return fmt.Errorf("size copy target: %w", err)
	}
	return nil
}

// copyData copies the data of in (size bytes) to out, a new file.
func (c Copier) copyData(out *os.File, in *os.File, size int64) error {
	if !c.HolesKnown {
		return copySparse(out, in, size, c.Sync)
	}
	if !c.Direct {
		return copyExtents(out, in, size, c.Sync)
	}
	err := copyExtentsDirect(out, in, size)
	if !errors.Is(err, errDirectUnsupported) {
		return err
	}
	if err := out.Truncate(0); err != nil {
		return fmt.Errorf("clear copy target: %w", err)
	}
	return copyExtents(out, in, size, c.Sync)
}

// finish gives the copy out, name in dirfd, the owner, mode and times of
// its source (st) and, with sync, flushes it.
func (c Copier) finish(out *os.File, dirfd int, name string, st *unix.Stat_t) error {
	if err := keepFileAttrs(out, dirfd, name, st); err != nil {
		return err
	}
	if !c.Sync {
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
	return ForEachExtent(in, 0, size, func(start, end int64) error {
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
	return ForEachExtent(in, 0, size, func(start, end int64) error {
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
		if errors.Is(err, unix.EXDEV) {
			return copyAcross(out, in, src, n)
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

// ForEachExtent calls fn for every data range [start, end) of f between from
// and size, found with SEEK_DATA/SEEK_HOLE. Filesystems without hole
// reporting yield one range covering everything.
func ForEachExtent(f *os.File, from, size int64, fn func(start, end int64) error) error {
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

// copyAcross copies n bytes at off from in to out, at the same offset,
// through a buffer: copy_file_range refuses to copy between filesystems of
// different types, as between an image volume and the data folder.
func copyAcross(out, in *os.File, off, n int64) error {
	buf := make([]byte, min(n, copyAcrossChunk))
	for n > 0 {
		m := min(n, int64(len(buf)))
		if _, err := in.ReadAt(buf[:m], off); err != nil {
			return fmt.Errorf("read copy source: %w", err)
		}
		if _, err := out.WriteAt(buf[:m], off); err != nil {
			return fmt.Errorf("write copy target: %w", err)
		}
		off, n = off+m, n-m
	}
	return nil
}

const copyAcrossChunk = 1 << 20
