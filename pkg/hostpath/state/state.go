//go:build linux

// Package state persists the hostpath driver's records (volumes, snapshots,
// group snapshots, pending restores) so that a restart, even after SIGKILL
// or power loss, finds every object the driver ever acknowledged.
//
// Invariants:
//   - All records of a driver live in one append-only file, the record log
//     (<dir>/records.log, see log.go): a magic string, then frames of
//     body length, CRC-32C of the body, and the body (put or delete, table,
//     ID, JSON value), then zeros: the file is extended with flushed zeros
//     ahead of its frames, so a frame only overwrites allocated blocks.
//     Concurrent changes share one write and one flush (group commit).
//   - A change is durable, and with sync acknowledged, only after a flush
//     of the device's write cache that started after its frame was written:
//     the log's own fdatasync (Commit), or, for CommitNoFlush, one the
//     caller issues by flushing other files on the same filesystem. A flush
//     covers every frame written before it. So after a power failure the
//     frames after the first missing or damaged one were never
//     acknowledged: Open keeps the frames up to the first one that is
//     incomplete or fails its checksum and drops the rest.
//   - A change whose frame would exceed the frame size limit is refused
//     (ErrRecordTooLarge) before anything is written: Open would take such
//     a frame for a torn one and drop every frame after it.
//   - After a failed write or flush the log file's state is unknown, and a
//     flush that is retried may report success for data it lost: the next
//     change first writes the log afresh from the live records (as
//     compaction does) and fails while that fails. Failing to extend the
//     log (a full disk) writes nothing, so it fails only the one change;
//     changes that fit in the space already preallocated still succeed.
//   - A log that ends in a damaged frame followed by valid ones was damaged
//     in its middle, not torn by a crash: Open keeps the frames before the
//     damage, as always, and a hard link to the log as it found it
//     (Recovery), so no byte of it is lost.
//   - Open needs no free space when the log exists: a compaction it cannot
//     write is skipped, a torn end is cut off in place.
//   - The log is compacted, at Open and whenever it has grown to several
//     times the size of its live records, by writing the live records to a
//     temporary file, flushing it, renaming it over the log and flushing the
//     directory. A crash leaves the old log or the new one; temporary files
//     are removed by Open.
//   - A table's in-memory index changes only after its change is in the
//     log, so what the driver answers from memory is on disk.
//   - Records of the earlier layout, one file per record below
//     <dir>/<table>/, are moved into the log when their table is opened;
//     the old files are removed only once the log holding them is durable.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

const (
	legacySuffix = ".json"
	tempPrefix   = ".tmp-"
)

// Table is a durable map from ID to record of type T, kept in a Log under
// the table's name. It is safe for concurrent use; callers serialise
// changes to one ID with their own per-ID locks.
type Table[T any] struct {
	log  *Log
	name string

	mu      sync.RWMutex
	records map[string]T
}

// OpenTable loads the records named name from log. Records that an earlier
// version kept as files in the directory name next to the log are moved
// into the log first.
func OpenTable[T any](log *Log, name string) (*Table[T], error) {
	if err := importLegacy[T](log, name); err != nil {
		return nil, err
	}
	t := &Table[T]{log: log, name: name, records: map[string]T{}}
	for id, data := range log.records(name) {
		var rec T
		if err := json.Unmarshal(data, &rec); err != nil {
			return nil, fmt.Errorf("decode %s record %s: %w", name, id, err)
		}
		t.records[id] = rec
	}
	return t, nil
}

// Get returns the record stored under id.
func (t *Table[T]) Get(id string) (T, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	rec, ok := t.records[id]
	return rec, ok
}

// IDs returns all IDs in ascending order.
func (t *Table[T]) IDs() []string {
	t.mu.RLock()
	ids := make([]string, 0, len(t.records))
	for id := range t.records {
		ids = append(ids, id)
	}
	t.mu.RUnlock()
	slices.Sort(ids)
	return ids
}

// List returns all records ordered by ID.
func (t *Table[T]) List() []T {
	t.mu.RLock()
	defer t.mu.RUnlock()
	ids := make([]string, 0, len(t.records))
	for id := range t.records {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]T, 0, len(ids))
	for _, id := range ids {
		out = append(out, t.records[id])
	}
	return out
}

// Put durably stores rec under id, replacing any previous record.
func (t *Table[T]) Put(id string, rec T) error {
	c, err := t.PutChange(id, rec)
	if err != nil {
		return err
	}
	return t.log.Commit(c)
}

// Delete durably removes the record stored under id. Deleting a missing
// record is not an error.
func (t *Table[T]) Delete(id string) error {
	if _, ok := t.Get(id); !ok {
		return nil
	}
	return t.log.Commit(t.DeleteChange(id))
}

// Change is a put or delete of one record, made by Table.PutChange or
// Table.DeleteChange, that takes effect when Log.Commit or
// Log.CommitNoFlush writes it.
type Change struct {
	change
	// apply updates the table in memory once the change is in the log.
	apply func()
}

// PutChange prepares storing rec under id.
func (t *Table[T]) PutChange(id string, rec T) (Change, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return Change{}, fmt.Errorf("encode %s record %s: %w", t.name, id, err)
	}
	return Change{
		change: change{key: recordKey{table: t.name, id: id}, value: data},
		apply: func() {
			t.mu.Lock()
			t.records[id] = rec
			t.mu.Unlock()
		},
	}, nil
}

// DeleteChange prepares removing the record stored under id.
func (t *Table[T]) DeleteChange(id string) Change {
	return Change{
		change: change{key: recordKey{table: t.name, id: id}},
		apply: func() {
			t.mu.Lock()
			delete(t.records, id)
			t.mu.Unlock()
		},
	}
}

// Commit durably writes changes, possibly of several tables, in order and
// with one write: after a crash the log holds a prefix of them. Then it
// applies them to their tables.
func (l *Log) Commit(changes ...Change) error { return l.commitChanges(flushed, changes) }

// CommitNoFlush is Commit without the flush: it returns once the changes
// have been handed to the storage device, so they survive a killed process,
// but not once the device has made them durable. Any later flush of the
// device's write cache does that; every fsync on the log's filesystem
// issues one. Until then a power failure may lose them, and everything
// committed after them. With sync off it is Commit.
func (l *Log) CommitNoFlush(changes ...Change) error {
	return l.commitChanges(writtenThrough, changes)
}

func (l *Log) commitChanges(mode durability, changes []Change) error {
	raw := make([]change, len(changes))
	for i, c := range changes {
		raw[i] = c.change
	}
	if err := l.commit(mode, raw...); err != nil {
		return err
	}
	for _, c := range changes {
		c.apply()
	}
	return nil
}

// importLegacy moves the records of table that an earlier version kept as
// <log dir>/<table>/<id>.json into the log, then removes those files and
// the directory. A crash in between leaves files that the next import
// writes again, unchanged. A file that does not decode as T is an error.
func importLegacy[T any](log *Log, table string) error {
	dir := filepath.Join(log.dir, table)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read legacy state dir: %w", err)
	}
	var changes []change
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), legacySuffix)
		if !ok || e.IsDir() || strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("read legacy record %s: %w", e.Name(), err)
		}
		var rec T
		if err := json.Unmarshal(data, &rec); err != nil {
			return fmt.Errorf("decode legacy record %s/%s: %w", table, e.Name(), err)
		}
		// Compact the JSON so the log holds what Put would write.
		value, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("encode legacy record %s/%s: %w", table, e.Name(), err)
		}
		changes = append(changes, change{key: recordKey{table: table, id: id}, value: value})
	}
	if len(changes) > 0 {
		if err := log.commit(flushed, changes...); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove legacy state dir: %w", err)
	}
	if log.sync {
		return SyncDir(log.dir)
	}
	return nil
}

// writeTemp writes data to a new temporary file in dir, named after base,
// flushes it when sync is true and returns its path.
func writeTemp(dir, base string, data []byte, sync bool) (path string, err error) {
	f, err := os.CreateTemp(dir, tempPrefix+base+"-*")
	if err != nil {
		return "", fmt.Errorf("create temp file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		_ = f.Close()
		return "", fmt.Errorf("write temp file: %w", err)
	}
	if sync {
		if err = f.Sync(); err != nil {
			_ = f.Close()
			return "", fmt.Errorf("sync temp file: %w", err)
		}
	}
	if err = f.Close(); err != nil {
		return "", fmt.Errorf("close temp file: %w", err)
	}
	return f.Name(), nil
}

// WriteFileAtomic replaces path with data: it writes a temporary file in the
// same directory, flushes it (when sync is true), renames it over path and
// flushes the directory. For small files kept outside the log, such as the
// quiesce journal.
func WriteFileAtomic(path string, data []byte, sync bool) error {
	dir := filepath.Dir(path)
	temp, err := writeTemp(dir, filepath.Base(path), data, sync)
	if err != nil {
		return err
	}
	if err := os.Rename(temp, path); err != nil {
		_ = os.Remove(temp)
		return fmt.Errorf("rename temp file: %w", err)
	}
	if sync {
		return SyncDir(dir)
	}
	return nil
}
