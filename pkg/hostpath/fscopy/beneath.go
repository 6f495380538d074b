//go:build linux

package fscopy

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Reading trees that a workload may change while they are read.
//
// A volume's files belong to a possibly hostile workload, which can rename,
// delete or replace any entry at any moment, also between the driver listing
// a directory and opening an entry of it: a file swapped for a symlink to
// another volume, a pod's token or /etc would otherwise be read, and a FIFO
// swapped in would block the reader forever. So every walk of volume data
// (copies, usage, flushes of restored data):
//
//   - holds the directory it lists open and names entries relative to that
//     descriptor, one path component at a time, never by a joined path;
//   - opens an entry with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
//     RESOLVE_NO_XDEV and O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC, so no symlink is
//     followed, no mount crossed and no open blocks;
//   - opens regular files as O_PATH first, which never opens a device or a
//     FIFO, checks with fstat that it is still the regular file of the
//     listing (type, device, inode), and only then reopens that same inode
//     for reading through /proc/self/fd;
//   - skips an entry that vanished or changed between the listing and the
//     open: the tree is copied as the workload left it at some instant
//     during the walk, entry by entry;
//   - never opens FIFOs, sockets and device nodes: copies leave them out.

// resolveBeneath are the openat2 resolve flags of every open of volume data.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV

// maxTreeDepth bounds how deep a walk goes: each level holds descriptors.
const maxTreeDepth = 1024

// errChanged says an entry vanished, or is no longer what the listing
// showed; walks skip such entries.
var errChanged = errors.New("entry changed while it was read")

// openBeneath opens name, one component, relative to the directory dirfd
// without following symlinks or crossing mounts.
func openBeneath(dirfd int, name string, flags int) (int, error) {
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if flags&unix.O_PATH == 0 {
		// openat2 refuses O_PATH with any flag but these three.
		flags |= unix.O_NONBLOCK
	}
	how := unix.OpenHow{Flags: uint64(flags), Resolve: resolveBeneath}
	for {
		fd, err := unix.Openat2(dirfd, name, &how)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.ENOSYS:
			// Before Linux 5.6. name is a single component from a
			// listing, so O_NOFOLLOW alone keeps the open beneath dirfd;
			// the caller's fstat check catches a crossed mount.
			fd, err = unix.Openat(dirfd, name, int(how.Flags), 0)
		}
		if err != nil {
			return -1, openError(name, err)
		}
		return fd, nil
	}
}

// openError marks the errors of an entry that vanished or was replaced
// (by a symlink, another type, a mount) as errChanged.
func openError(name string, err error) error {
	switch err {
	case unix.ENOENT, unix.ELOOP, unix.ENOTDIR, unix.EXDEV, unix.ENXIO, unix.EAGAIN:
		return fmt.Errorf("%w: open %s: %w", errChanged, name, err)
	}
	return fmt.Errorf("open %s: %w", name, err)
}

// listed is an entry as its directory's listing showed it.
type listed struct {
	name string
	st   unix.Stat_t
}

func (l listed) kind() uint32 { return l.st.Mode & unix.S_IFMT }

// listDir returns the entries of the open directory fd, sorted by name,
// with their lstat. Entries that vanish before their lstat are left out.
func listDir(fd int) ([]listed, error) {
	names, err := readNames(fd)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	out := make([]listed, 0, len(names))
	for _, name := range names {
		l := listed{name: name}
		err := unix.Fstatat(fd, name, &l.st, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.ENOENT {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("stat %s: %w", name, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// readNames reads every name of the open directory fd but "." and "..".
func readNames(fd int) ([]string, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, fmt.Errorf("rewind directory: %w", err)
	}
	buf := make([]byte, 8<<10)
	var names []string
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read directory: %w", err)
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// openListed opens the entry l of directory dirfd with flags and checks
// that it is still what the listing showed: the same type on the same
// device with the same inode. It returns errChanged when it is not.
func openListed(dirfd int, l listed, flags int) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := openBeneath(dirfd, l.name, flags)
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return -1, st, fmt.Errorf("stat %s: %w", l.name, err)
	}
	if st.Mode&unix.S_IFMT != l.kind() || st.Dev != l.st.Dev || st.Ino != l.st.Ino {
		_ = unix.Close(fd)
		return -1, st, fmt.Errorf("%w: %s was replaced", errChanged, l.name)
	}
	return fd, st, nil
}

// openListedDir opens the directory entry l of dirfd (see openListed).
func openListedDir(dirfd int, l listed) (*os.File, unix.Stat_t, error) {
	fd, st, err := openListed(dirfd, l, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, st, err
	}
	return os.NewFile(uintptr(fd), l.name), st, nil
}

// openListedFile opens the regular file entry l of dirfd for reading: as
// O_PATH first, which opens no device and blocks on no FIFO, then, once
// fstat showed the listed regular file, that same inode for reading.
func openListedFile(dirfd int, l listed, flags int) (*os.File, unix.Stat_t, error) {
	pfd, st, err := openListed(dirfd, l, unix.O_PATH)
	if err != nil {
		return nil, st, err
	}
	defer func() { _ = unix.Close(pfd) }()
	fd, err := reopen(pfd, flags)
	if err != nil {
		return nil, st, fmt.Errorf("open %s: %w", l.name, err)
	}
	f := os.NewFile(uintptr(fd), l.name)
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil || now.Ino != st.Ino || now.Dev != st.Dev {
		_ = f.Close()
		return nil, st, fmt.Errorf("%w: reopen of %s", errChanged, l.name)
	}
	return f, now, nil
}

// reopen opens the inode the descriptor fd (possibly O_PATH) refers to
// again, with flags: through its /proc/self/fd link, which names that
// inode whatever happened to its path since.
func reopen(fd, flags int) (int, error) {
	path := "/proc/self/fd/" + strconv.Itoa(fd)
	for {
		nfd, err := unix.Open(path, flags|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("reopen through %s: %w", path, err)
		}
		return nfd, nil
	}
}

// openRoot opens the top directory or file of volume or snapshot data at
// path, which the driver made, without following a symlink.
func openRoot(path string, flags int) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Open(path, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, st, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	if err := unix.Fstat(fd, &st); err != nil {
		_ = f.Close()
		return nil, st, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return f, st, nil
}

// devIno names a file by device and inode.
type devIno struct{ dev, ino uint64 }

// isDirMode and isRegMode test a stat mode's type.
func isDirMode(m uint32) bool { return m&unix.S_IFMT == unix.S_IFDIR }
func isRegMode(m uint32) bool { return m&unix.S_IFMT == unix.S_IFREG }

// DiskUsage sums the allocated bytes of every entry below root, a volume
// whose workload may change it meanwhile (see above): entries that vanish
// are not counted, and nothing outside root is ever looked at.
func DiskUsage(root string) (int64, error) {
	f, st, err := openRoot(root, unix.O_RDONLY)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if !isDirMode(st.Mode) {
		return st.Blocks * 512, nil
	}
	used, err := dirUsage(int(f.Fd()), st.Dev, 0)
	return used + st.Blocks*512, err
}

// dirUsage sums the allocated bytes of the entries below directory fd.
func dirUsage(fd int, dev uint64, depth int) (int64, error) {
	if depth >= maxTreeDepth {
		return 0, fmt.Errorf("the tree is more than %d levels deep", maxTreeDepth)
	}
	entries, err := listDir(fd)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, l := range entries {
		if l.st.Dev != dev {
			continue // a mount: not the volume's
		}
		total += l.st.Blocks * 512
		if l.kind() != unix.S_IFDIR {
			continue
		}
		sub, _, err := openListedDir(fd, l)
		if errors.Is(err, errChanged) {
			continue
		}
		if err != nil {
			return 0, err
		}
		n, err := dirUsage(int(sub.Fd()), dev, depth+1)
		_ = sub.Close()
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}
