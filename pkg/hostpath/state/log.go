package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
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
	maxFrameBody = 1 << 20
	// A log is compacted once it is larger than compactMinBytes and more
	// than compactRatio times the size its live records need.
	compactMinBytes = 1 << 20
	compactRatio    = 4
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

// Log is the append-only, checksummed record log that all tables of one
// driver share. Changes are appended as frames and group-committed: while
// one write and flush is in progress, later changes queue up and go to disk
// together in the next one. See the package documentation for the format's
// invariants.
type Log struct {
	dir  string
	sync bool
	// dropped is the number of torn or corrupt tail bytes Open cut off.
	dropped int64

	mu   sync.Mutex
	cond *sync.Cond
	f    *os.File
	// size is the end of the last complete frame in f.
	size int64
	// live holds the value of every record that exists, and liveBytes the
	// size of the frames that a compacted log needs for them.
	live      map[recordKey][]byte
	liveBytes int64
	// pending changes go to disk in batch started+1, flushed when
	// pendingFlush is set. done is the last batch finished; flushing says
	// a leader is writing batch started.
	pending      []change
	pendingFlush bool
	started      uint64
	done         uint64
	flushing     bool
	// err is set for good when a write, flush or compaction fails:
	// after a failed flush the file's state is unknown, so every later
	// change fails too, from batch failedFrom on, until the log is opened
	// again.
	err        error
	failedFrom uint64
}

// OpenLog opens the record log in dir, creating dir and the log if needed.
// It reads every frame up to the first one that is incomplete or fails its
// checksum, cuts the file there (only the tail can be torn: nothing is
// written after a frame before that frame was flushed) and compacts the log
// when it holds outdated frames. With sync false nothing is flushed: the log
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
		if _, err := l.install(l.image()); err != nil {
			return nil, err
		}
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read record log: %w", err)
	}
	if !bytes.HasPrefix(data, []byte(logMagic)) {
		return nil, fmt.Errorf("%s is not a record log", path)
	}
	good, err := replay(data[len(logMagic):], l.apply)
	if err != nil {
		return nil, fmt.Errorf("read record log %s: %w", path, err)
	}
	l.size = int64(len(logMagic)) + good
	l.dropped = int64(len(data)) - l.size
	if l.f, err = os.OpenFile(path, os.O_RDWR, 0); err != nil {
		return nil, fmt.Errorf("open record log: %w", err)
	}
	if l.dropped > 0 || l.size > int64(len(logMagic))+l.liveBytes {
		// A torn tail or outdated frames: write the live records afresh.
		if _, err := l.install(l.image()); err != nil {
			_ = l.f.Close()
			return nil, err
		}
		return l, nil
	}
	// A killed predecessor may have written frames it never flushed.
	if flush {
		if err := l.f.Sync(); err != nil {
			_ = l.f.Close()
			return nil, fmt.Errorf("sync record log: %w", err)
		}
	}
	return l, nil
}

// Dropped returns the number of bytes of torn or corrupt frames that Open
// cut from the end of the log.
func (l *Log) Dropped() int64 { return l.dropped }

// Close closes the log file. Changes after Close fail.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.flushing {
		l.cond.Wait()
	}
	if l.err == nil {
		l.err, l.failedFrom = errors.New("record log is closed"), l.started+1
	}
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
// once they are written and, when flush is set and the log syncs, flushed.
// Concurrent commits share writes and flushes. Callers must not commit
// changes to the same record concurrently.
func (l *Log) commit(flush bool, changes ...change) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	l.pending = append(l.pending, changes...)
	l.pendingFlush = l.pendingFlush || flush
	batch := l.started + 1
	for l.done < batch {
		if l.err != nil && batch >= l.failedFrom {
			return l.err
		}
		if l.flushing {
			l.cond.Wait()
			continue
		}
		l.lead()
	}
	if l.err != nil && batch >= l.failedFrom {
		return l.err
	}
	return nil
}

// lead writes and flushes the pending changes as the next batch, then
// compacts the log if it has grown enough. It is called with mu held and
// returns with mu held; the I/O happens without it. While flushing is set,
// only the leader touches f and size.
func (l *Log) lead() {
	changes, flush := l.pending, l.pendingFlush
	l.pending, l.pendingFlush = nil, false
	l.started++
	batch := l.started
	l.flushing = true
	var buf []byte
	for _, c := range changes {
		buf = appendFrame(buf, c)
	}
	l.mu.Unlock()
	err := l.append(buf, flush)
	l.mu.Lock()
	if err == nil {
		for _, c := range changes {
			l.apply(c)
		}
		if l.size > compactMinBytes && l.size > compactRatio*(l.liveBytes+int64(len(logMagic))) {
			// A compaction that fails before the rename leaves the log
			// as it was; it is tried again after the next batch.
			image := l.image()
			l.mu.Unlock()
			if installed, ierr := l.install(image); installed {
				err = ierr
			}
			l.mu.Lock()
		}
	}
	if err != nil {
		l.err, l.failedFrom = err, batch
	}
	l.done = batch
	l.flushing = false
	l.cond.Broadcast()
}

// append writes buf at the end of the log and flushes it when asked to. A
// failed write is cut off again so that a later Open does not mistake it
// for a torn tail followed by nothing.
func (l *Log) append(buf []byte, flush bool) error {
	if _, err := l.f.WriteAt(buf, l.size); err != nil {
		_ = l.f.Truncate(l.size)
		return fmt.Errorf("append to record log: %w", err)
	}
	if l.sync && flush {
		if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
			return fmt.Errorf("flush record log: %w", err)
		}
	}
	l.size += int64(len(buf))
	return nil
}

// image returns the contents of a compacted log: the live records in key
// order. The caller holds mu or owns l.
func (l *Log) image() []byte {
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
	return buf
}

// install replaces the log file with image: it writes a temporary file,
// flushes it, renames it over the log and flushes the directory. A crash
// leaves the old log or the new one. installed says whether the new file
// replaced the old one; an error after that means the replacement may not
// be durable. The caller is the flushing leader, or Open.
func (l *Log) install(image []byte) (installed bool, err error) {
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
	l.f, l.size = f, int64(len(image))
	if l.sync {
		return true, SyncDir(l.dir)
	}
	return true, nil
}

// frameSize is the size of the frame that puts value under k.
func frameSize(k recordKey, value []byte) int64 {
	return int64(frameHeader + 1 + uvarintLen(len(k.table)) + len(k.table) + uvarintLen(len(k.id)) + len(k.id) + len(value))
}

func uvarintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(n))
}

// appendFrame appends the frame of c to buf; see appendFramed and
// encodeBody.
func appendFrame(buf []byte, c change) []byte { return appendFramed(buf, encodeBody(c)) }

// appendFramed appends body as a frame: its length and CRC-32C (little
// endian), then the body.
func appendFramed(buf, body []byte) []byte {
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(body)))
	buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(body, castagnoli))
	return append(buf, body...)
}

// encodeBody encodes c: operation, table and ID (each preceded by its
// length as uvarint) and, for a put, the value.
func encodeBody(c change) []byte {
	op := opPut
	if c.value == nil {
		op = opDelete
	}
	body := make([]byte, 0, frameSize(c.key, c.value)-frameHeader)
	body = append(body, op)
	body = binary.AppendUvarint(body, uint64(len(c.key.table)))
	body = append(body, c.key.table...)
	body = binary.AppendUvarint(body, uint64(len(c.key.id)))
	body = append(body, c.key.id...)
	return append(body, c.value...)
}

// errMalformed marks a frame whose checksum holds but whose body does not
// decode: not a torn write but a foreign or newer format.
var errMalformed = errors.New("malformed record")

// replay calls apply for every frame in data up to the first incomplete
// or corrupt one and returns the end of the last good frame.
func replay(data []byte, apply func(change)) (int64, error) {
	off := 0
	for len(data)-off >= frameHeader {
		n := int(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint32(data[off+4:])
		if n == 0 || n > maxFrameBody || len(data)-off-frameHeader < n {
			break
		}
		body := data[off+frameHeader : off+frameHeader+n]
		if crc32.Checksum(body, castagnoli) != sum {
			break
		}
		c, err := decodeBody(body)
		if err != nil {
			return 0, fmt.Errorf("frame at offset %d: %w", off+len(logMagic), err)
		}
		apply(c)
		off += frameHeader + n
	}
	return int64(off), nil
}

// decodeBody decodes a frame body written by appendFrame.
func decodeBody(body []byte) (change, error) {
	op, rest := body[0], body[1:]
	table, rest, ok := cutString(rest)
	if !ok {
		return change{}, errMalformed
	}
	id, rest, ok := cutString(rest)
	if !ok {
		return change{}, errMalformed
	}
	c := change{key: recordKey{table: table, id: id}}
	switch {
	case op == opPut && len(rest) > 0:
		c.value = bytes.Clone(rest)
	case op == opDelete && len(rest) == 0:
	default:
		return change{}, errMalformed
	}
	return c, nil
}

// cutString splits a uvarint-prefixed string off b.
func cutString(b []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", nil, false
	}
	return string(b[k : k+int(n)]), b[k+int(n):], true
}

// LiveIDs reads the record log in dir without changing it and returns the
// IDs of table's live records in ascending order. It is for tools and for
// tests that watch a running driver from outside.
func LiveIDs(dir, table string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, logName))
	if err != nil {
		return nil, fmt.Errorf("read record log: %w", err)
	}
	if !bytes.HasPrefix(data, []byte(logMagic)) {
		return nil, fmt.Errorf("%s is not a record log", dir)
	}
	ids := map[string]bool{}
	_, err = replay(data[len(logMagic):], func(c change) {
		if c.key.table == table {
			ids[c.key.id] = c.value != nil
		}
	})
	var out []string
	for id, live := range ids {
		if live {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, err
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
