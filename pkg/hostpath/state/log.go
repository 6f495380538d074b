//go:build linux

package state

import (
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

const (
	// logName is the record log's file name in the state directory.
	logName = "records.log"
	// logMagic starts every record log.
	logMagic = "SHUTLOG1"
	// frameHeader is the length and checksum before every frame body.
	frameHeader = 8
	// maxFrameBody bounds a frame body; a longer length is a torn header.
	// Commit refuses a change whose frame would be longer.
	maxFrameBody = 1 << 20
	// A log is compacted once it is larger than compactMinBytes and more
	// than compactRatio times the size its live records need.
	compactMinBytes = 1 << 20
	compactRatio    = 4
	// logPrealloc is how far the log file is extended with zeros, flushed,
	// ahead of its frames: appending then overwrites allocated blocks, so
	// making a frame durable needs no metadata write.
	logPrealloc = 1 << 20
	// logLowWater is the preallocated space below which the log is
	// extended before it runs out. Should the extension fail (a full disk),
	// changes that fit in what is left still succeed: small ones, such as
	// the deletes that free space, keep working.
	logLowWater = 64 << 10
)

// MaxValueBytes is the largest record value Commit accepts with a table
// name and ID of up to 1 KiB together. Callers bound what they store well
// below it when a request arrives.
const MaxValueBytes = maxFrameBody - 1<<10

// ErrRecordTooLarge is returned, wrapped, for a change whose frame would be
// longer than a frame may be. Nothing of it is written.
var ErrRecordTooLarge = errors.New("record too large for the record log")

// errClosed fails changes after Close.
var errClosed = errors.New("record log is closed")

// How a batch reaches the disk.
type durability int

const (
	// written: the write has finished; the frames survive a killed
	// process.
	written durability = iota
	// writtenThrough: the frames have reached the device, not yet its
	// volatile cache's backing store (sync_file_range). The next flush of
	// the device's write cache makes them durable.
	writtenThrough
	// flushed: the frames are durable (fdatasync).
	flushed
)

// Frame operations.
const (
	opPut    byte = 1
	opDelete byte = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordKey names a record: its table and its ID.
type recordKey struct{ table, id string }

// change is one put (value set) or delete (value nil) of a record.
type change struct {
	key   recordKey
	value []byte
}

// batch is the changes that go to disk with one write, and its outcome.
type batch struct {
	changes []change
	// mode is the most demanding durability one of the changes asks for.
	mode durability
	done bool
	err  error
}

// Log is the append-only, checksummed record log that all tables of one
// driver share. Changes are appended as frames and group-committed: while
// one write and flush is in progress, later changes queue up and go to disk
// together in the next one. See the package documentation for the format's
// invariants.
type Log struct {
	dir  string
	sync bool
	// recovery is what Open found.
	recovery Recovery

	mu   sync.Mutex
	cond *sync.Cond
	f    *os.File
	// size is the end of the last complete frame in f; alloc is the end of
	// the zeros f is extended with, durably, beyond it.
	size  int64
	alloc int64
	// live holds the value of every record that exists, and liveBytes the
	// size of the frames that a compacted log needs for them.
	live      map[recordKey][]byte
	liveBytes int64
	// next collects the changes for the batch after the one being
	// written; flushing says a leader is writing one. started and done
	// count the batches begun and finished.
	next     *batch
	flushing bool
	started  uint64
	done     uint64
	closed   bool
	// broken is set when a write, flush or compaction failed in a way that
	// leaves the file's contents unknown (a flush that failed and is
	// retried may report success for data it lost). The next batch first
	// rewrites the log from the live records, as compaction does, and
	// fails while that fails; once it succeeds the log works again.
	broken error
}

// Close closes the log file. Changes after Close fail.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.flushing {
		l.cond.Wait()
	}
	l.closed = true
	return l.f.Close()
}

// apply changes the live records by c. The caller holds mu or owns l.
func (l *Log) apply(c change) {
	if old, ok := l.live[c.key]; ok {
		l.liveBytes -= frameSize(c.key, old)
		delete(l.live, c.key)
	}
	if c.value != nil {
		l.live[c.key] = c.value
		l.liveBytes += frameSize(c.key, c.value)
	}
}

// records returns the live records of table by ID.
func (l *Log) records(table string) map[string][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range l.live {
		if k.table == table {
			out[k.id] = v
		}
	}
	return out
}

// commit appends changes to the log, in order, with one write, and returns
// once they are as durable as mode asks (when the log syncs; otherwise
// once they are written). Concurrent commits share writes and flushes.
// Callers must not commit changes to the same record concurrently. A
// change too large for a frame fails the commit before anything is
// written.
func (l *Log) commit(mode durability, changes ...change) error {
	for _, c := range changes {
		if n := frameSize(c.key, c.value) - frameHeader; n > maxFrameBody {
			return fmt.Errorf("%w: %s record %s takes %d bytes, at most %d fit", ErrRecordTooLarge, c.key.table, c.key.id, n, maxFrameBody)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errClosed
	}
	if l.next == nil {
		l.next = &batch{}
	}
	b := l.next
	b.changes = append(b.changes, changes...)
	b.mode = max(b.mode, mode)
	for !b.done {
		if l.flushing {
			l.cond.Wait()
			continue
		}
		l.lead()
	}
	return b.err
}

// lead writes and flushes the next batch, after rewriting the log if an
// earlier failure broke it, then compacts the log if it has grown enough.
// It is called with mu held and returns with mu held; the I/O happens
// without it. While flushing is set, only the leader touches f, size,
// alloc and live.
func (l *Log) lead() {
	b := l.next
	l.next = nil
	l.started++
	l.flushing = true
	defer func() {
		b.done = true
		l.done++
		l.flushing = false
		l.cond.Broadcast()
	}()
	if l.closed {
		b.err = errClosed
		return
	}
	var buf, heal []byte
	var healEnd int64
	for _, c := range b.changes {
		buf = appendFrame(buf, c)
	}
	if l.broken != nil {
		heal, healEnd = l.image()
	}
	l.mu.Unlock()
	healed, unknown, err := l.write(heal, healEnd, buf, b.mode)
	l.mu.Lock()
	if healed {
		l.broken = nil
	}
	if unknown {
		l.broken = err
	}
	b.err = err
	if err != nil {
		return
	}
	for _, c := range b.changes {
		l.apply(c)
	}
	l.compactIfGrown()
}

// write rewrites the log from heal, when given (after an earlier failure),
// and appends buf. healed says the rewrite succeeded; unknown that the
// append failed after part of buf may have reached the file.
func (l *Log) write(heal []byte, healEnd int64, buf []byte, mode durability) (healed, unknown bool, err error) {
	if heal != nil {
		installed, err := l.install(heal, healEnd)
		if err != nil {
			return false, false, fmt.Errorf("rewrite record log after an earlier failure: %w", err)
		}
		if !installed {
			return false, false, errors.New("rewrite record log after an earlier failure: not installed")
		}
		healed = true
	}
	unknown, err = l.append(buf, mode)
	return healed, unknown, err
}

// compactIfGrown writes the live records afresh when the log has grown to
// several times their size. It is called by the leader with mu held. A
// compaction that fails before the rename leaves the log as it was and is
// tried again after the next batch; one that fails after it breaks the log
// until the next batch rewrites it. The batch just written is durable
// either way.
func (l *Log) compactIfGrown() {
	if l.size <= compactMinBytes || l.size <= compactRatio*(l.liveBytes+int64(len(logMagic))) {
		return
	}
	image, end := l.image()
	l.mu.Unlock()
	installed, err := l.install(image, end)
	l.mu.Lock()
	if installed && err != nil {
		l.broken = err
	}
}

// append writes buf at the end of the log, as durably as mode asks. When
// the write or flush fails, unknown is true: part of buf may be in the
// file. A failed write is zeroed again, best effort, so that a later Open
// does not take it for frames. When only preallocating space fails, as on
// a full disk, nothing was written and the log stays usable.
func (l *Log) append(buf []byte, mode durability) (unknown bool, err error) {
	if err := l.reserve(int64(len(buf))); err != nil {
		return false, err
	}
	if _, err := l.f.WriteAt(buf, l.size); err != nil {
		_, _ = l.f.WriteAt(make([]byte, len(buf)), l.size)
		return true, fmt.Errorf("append to record log: %w", err)
	}
	if l.sync {
		fd := int(l.f.Fd())
		switch mode {
		case flushed:
			if err := unix.Fdatasync(fd); err != nil {
				return true, fmt.Errorf("flush record log: %w", err)
			}
		case writtenThrough:
			const flags = unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
			if err := unix.SyncFileRange(fd, l.size, int64(len(buf)), flags); err != nil {
				return true, fmt.Errorf("write record log through: %w", err)
			}
		}
	}
	l.size += int64(len(buf))
	return false, nil
}

// reserve makes sure n bytes after the last frame are preallocated: when
// less than logLowWater would be left, it extends the file with zeros and
// flushes them, size and all, before a frame may be written there. When
// the extension fails but n bytes are still preallocated, it succeeds.
func (l *Log) reserve(n int64) error {
	if l.size+n+logLowWater <= l.alloc {
		return nil
	}
	alloc := (l.size + n + logLowWater + logPrealloc) / logPrealloc * logPrealloc
	err := l.extend(alloc)
	if err != nil && l.size+n <= l.alloc {
		return nil
	}
	return err
}

// extend grows the file with flushed zeros up to alloc. On failure the
// file is cut back to its former end, which frees what the partial
// extension took and needs no space; zeros that stay behind if that fails
// too are never taken for frames.
func (l *Log) extend(alloc int64) error {
	if _, err := l.f.WriteAt(make([]byte, alloc-l.alloc), l.alloc); err != nil {
		_ = l.f.Truncate(l.alloc)
		return fmt.Errorf("extend record log: %w", err)
	}
	if l.sync {
		if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
			_ = l.f.Truncate(l.alloc)
			return fmt.Errorf("flush record log extension: %w", err)
		}
	}
	l.alloc = alloc
	return nil
}

// image returns the contents of a compacted log: the live records in key
// order, then zeros up to the next multiple of logPrealloc past the end.
// The caller holds mu or owns l.
func (l *Log) image() ([]byte, int64) {
	buf := []byte(logMagic)
	keys := slices.SortedFunc(maps.Keys(l.live), func(a, b recordKey) int {
		if c := strings.Compare(a.table, b.table); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	for _, k := range keys {
		buf = appendFrame(buf, change{key: k, value: l.live[k]})
	}
	end := int64(len(buf))
	alloc := (end + logPrealloc) / logPrealloc * logPrealloc
	return append(buf, make([]byte, alloc-end)...), end
}

// install replaces the log file with image: it writes a temporary file,
// flushes it, renames it over the log and flushes the directory. A crash
// leaves the old log or the new one. installed says whether the new file
// replaced the old one; an error after that means the replacement may not
// be durable. The caller is the flushing leader, or Open.
func (l *Log) install(image []byte, end int64) (installed bool, err error) {
	path := filepath.Join(l.dir, logName)
	temp, err := writeTemp(l.dir, logName, image, l.sync)
	if err != nil {
		return false, err
	}
	f, err := os.OpenFile(temp, os.O_RDWR, 0)
	if err != nil {
		_ = os.Remove(temp)
		return false, fmt.Errorf("open compacted record log: %w", err)
	}
	if err := os.Rename(temp, path); err != nil {
		_ = f.Close()
		_ = os.Remove(temp)
		return false, fmt.Errorf("install compacted record log: %w", err)
	}
	// From here on the new file is the log, whatever happens: appends to
	// the old one would be lost.
	if l.f != nil {
		_ = l.f.Close()
	}
	l.f, l.size, l.alloc = f, end, int64(len(image))
	if l.sync {
		return true, SyncDir(l.dir)
	}
	return true, nil
}
