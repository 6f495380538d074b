//go:build linux

package state

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// damagedSuffix names the copy Open keeps of a log damaged in its middle:
// records.log.damaged-<UTC time>.
const damagedSuffix = ".damaged-"

// Recovery is what Open found in the record log.
type Recovery struct {
	// Created says there was no log: Open made an empty one.
	Created bool
	// Dropped is the number of bytes of torn or corrupt frames cut from
	// the end of the log, after the last good frame.
	Dropped int64
	// FramesAfterDamage counts the valid frames that followed the first
	// damaged one. A crash tears the end of the log only, so more than
	// zero means the log was damaged in its middle: the records after the
	// damage were written but are not in the state.
	FramesAfterDamage int
	// DamagedCopy is the path of the log as Open found it, kept (a hard
	// link, so it takes no space) when FramesAfterDamage is above zero.
	DamagedCopy string
	// CompactErr says why Open could not write the log afresh (a full
	// disk); it went on with the log as it was, its damaged end cut off
	// in place, or, when that would have changed DamagedCopy, with the
	// log to be rewritten before the next change.
	CompactErr error
}

// Recovery returns what Open found.
func (l *Log) Recovery() Recovery { return l.recovery }

// Dropped returns the number of bytes of torn or corrupt frames that Open
// cut from the end of the log.
func (l *Log) Dropped() int64 { return l.recovery.Dropped }

// OpenLog opens the record log in dir, creating dir and the log if needed.
// It reads every frame up to the first one that is incomplete or fails its
// checksum and drops the rest (see the package documentation for why
// nothing acknowledged can follow such a frame after a crash; when valid
// frames do follow, the log is kept as Recovery().DamagedCopy), and
// compacts the log when it holds outdated frames or a damaged tail. It
// needs no free space when the log exists: a compaction that cannot be
// written is skipped. With flush false nothing is flushed: the log
// survives a process crash but not a power failure.
func OpenLog(dir string, flush bool) (*Log, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	if err := removeTemps(dir, logName); err != nil {
		return nil, err
	}
	l := &Log{dir: dir, sync: flush, live: map[recordKey][]byte{}}
	l.cond = sync.NewCond(&l.mu)
	path := filepath.Join(dir, logName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		l.recovery.Created = true
		if _, err := l.install(l.image()); err != nil {
			return nil, err
		}
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read record log: %w", err)
	}
	if err := l.load(path, data); err != nil {
		return nil, err
	}
	if l.f, err = os.OpenFile(path, os.O_RDWR, 0); err != nil {
		return nil, fmt.Errorf("open record log: %w", err)
	}
	if err := l.settle(); err != nil {
		_ = l.f.Close()
		return nil, err
	}
	return l, nil
}

// load replays the log's contents data and notes what is damaged.
func (l *Log) load(path string, data []byte) error {
	if !bytes.HasPrefix(data, []byte(logMagic)) {
		return fmt.Errorf("%s is not a record log", path)
	}
	good, err := replay(data[len(logMagic):], l.apply)
	if err != nil {
		return fmt.Errorf("read record log %s: %w", path, err)
	}
	l.size = int64(len(logMagic)) + good
	l.alloc = int64(len(data))
	tail := data[l.size:]
	if len(bytes.Trim(tail, "\x00")) == 0 {
		// Zeros are preallocated space.
		return nil
	}
	l.recovery.Dropped = int64(len(tail))
	l.recovery.FramesAfterDamage = framesAfterDamage(tail)
	if l.recovery.FramesAfterDamage == 0 {
		return nil
	}
	keep := path + damagedSuffix + time.Now().UTC().Format("20060102T150405.000000000Z")
	if err := os.Link(path, keep); err != nil {
		return fmt.Errorf("keep a copy of the damaged record log: %w", err)
	}
	l.recovery.DamagedCopy = keep
	if l.sync {
		return SyncDir(l.dir)
	}
	return nil
}

// settle compacts a log that holds outdated frames or a damaged tail, or
// flushes what a killed predecessor may have written without a flush.
func (l *Log) settle() error {
	if l.recovery.Dropped == 0 && l.size <= int64(len(logMagic))+l.liveBytes {
		return l.flushFile()
	}
	installed, err := l.install(l.image())
	switch {
	case err == nil:
		return nil
	case installed:
		// The new log is in place but maybe not durable: write it again
		// before the next change.
		l.broken = err
		return nil
	}
	l.recovery.CompactErr = err
	switch {
	case l.recovery.Dropped == 0:
		return l.flushFile()
	case l.recovery.DamagedCopy != "":
		// Cutting the file would change the kept copy, its hard link.
		l.broken = err
		return nil
	}
	return l.cutTail()
}

// flushFile flushes frames a killed predecessor may have written without
// a flush.
func (l *Log) flushFile() error {
	if !l.sync {
		return nil
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("sync record log: %w", err)
	}
	return nil
}

// cutTail truncates the file after its last good frame, in place, which
// needs no free space, and flushes that.
func (l *Log) cutTail() error {
	if err := l.f.Truncate(l.size); err != nil {
		return fmt.Errorf("cut damaged end of record log: %w", err)
	}
	l.alloc = l.size
	if l.sync {
		if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
			return fmt.Errorf("flush record log: %w", err)
		}
	}
	return nil
}

// removeTemps removes temporary files for base left in dir by a crash.
func removeTemps(dir, base string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read state dir: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix+base) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("remove stale temp file: %w", err)
			}
		}
	}
	return nil
}
