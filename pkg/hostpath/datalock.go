//go:build linux

package hostpath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockFileName is the file below the data directory whose flock marks the
// directory as owned by one driver. Two drivers on one directory would
// append to the same record log and remove each other's data as orphans.
//
// flock rather than a PID file or fcntl locks: the kernel drops a flock
// when its holder dies, however it dies, so a killed driver never leaves a
// stale lock for its successor; and a flock belongs to an open file
// description, so a second New in the same process conflicts too, while
// fcntl locks belong to the process and would be granted again.
const lockFileName = "lock"

// dataDirLockedError says another driver holds the data directory.
type dataDirLockedError struct {
	dir string
	// pid is the holder's PID as it wrote it into the lock file, in the
	// holder's PID namespace, or 0 when it could not be read.
	pid int
}

func (e *dataDirLockedError) Error() string {
	holder := "another driver"
	if e.pid > 0 {
		holder = fmt.Sprintf("another driver (pid %d)", e.pid)
	}
	return fmt.Sprintf("data directory %s is in use by %s; two drivers on one directory would corrupt its record log", e.dir, holder)
}

// dataDirLock is the held flock on a data directory's lock file.
type dataDirLock struct{ f *os.File }

// lockDataDir takes the exclusive lock on dir without waiting, failing
// with a *dataDirLockedError when another driver holds it, and writes the
// caller's PID into the lock file for that error.
func lockDataDir(dir string) (*dataDirLock, error) {
	path := filepath.Join(dir, lockFileName)
	// os.OpenFile sets O_CLOEXEC anyway; it is spelled out because a child
	// that inherited the descriptor would keep the directory locked after
	// the driver died.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open data directory lock: %w", err)
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		pid := readLockPID(f)
		_ = f.Close()
		return nil, &dataDirLockedError{dir: dir, pid: pid}
	}
	if err == nil {
		err = writeLockPID(f)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock data directory %s: %w", dir, err)
	}
	return &dataDirLock{f: f}, nil
}

// writeLockPID replaces the lock file's content with the caller's PID. It
// is not flushed: it only names the holder in the error of a driver that
// finds the directory locked, and the lock itself does not outlive a crash.
func writeLockPID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// readLockPID returns the PID the holder wrote, or 0. It is best effort:
// the holder may not have written it yet.
func readLockPID(f *os.File) int {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		return 0
	}
	return pid
}

// release drops the lock; closing the only descriptor of the open file
// description is what releases a flock. A nil lock is a no-op.
func (l *dataDirLock) release() error {
	if l == nil {
		return nil
	}
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("release data directory lock: %w", err)
	}
	return nil
}
