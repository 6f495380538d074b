// Package state persists the hostpath driver's records (volumes, snapshots,
// group snapshots) so that a restart, even after SIGKILL or power loss, finds
// every object the driver ever acknowledged.
//
// Invariants:
//   - Every record lives in its own file <dir>/<kind>/<id>.json. A file is
//     only ever replaced whole: written to a temporary file in the same
//     directory, flushed with fsync, renamed over the old name, and the
//     directory is flushed. A reader therefore sees the old record or the new
//     one, never a mix. Concurrent writers share directory flushes (see
//     SyncDir), never the temporary file's own flush.
//   - The in-memory index is updated only after the file write succeeded, so
//     what the driver answers from memory is always on disk.
//   - Temporary files left by a crash are removed by Open.
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
	recordSuffix = ".json"
	tempPrefix   = ".tmp-"
)

// Table is a durable map from ID to record of type T, one file per record.
// It is safe for concurrent use; callers serialise changes to one ID with
// their own per-ID locks.
type Table[T any] struct {
	dir  string
	sync bool

	mu      sync.RWMutex
	records map[string]T
}

// OpenTable loads every record below dir, creating dir if needed, and
// removes temporary files left by an interrupted write. With sync false the
// table skips fsync: records still replace each other atomically (safe
// against a process crash) but may be lost on power failure.
func OpenTable[T any](dir string, sync bool) (*Table[T], error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read state dir: %w", err)
	}
	t := &Table[T]{dir: dir, sync: sync, records: map[string]T{}}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, tempPrefix) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return nil, fmt.Errorf("remove stale temp file: %w", err)
			}
			continue
		}
		id, ok := strings.CutSuffix(name, recordSuffix)
		if !ok || e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read record %s: %w", name, err)
		}
		var rec T
		if err := json.Unmarshal(data, &rec); err != nil {
			return nil, fmt.Errorf("decode record %s: %w", name, err)
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

// Find returns the first record, in ID order, for which match is true.
func (t *Table[T]) Find(match func(T) bool) (T, bool) {
	for _, rec := range t.List() {
		if match(rec) {
			return rec, true
		}
	}
	var zero T
	return zero, false
}

// Put durably stores rec under id, replacing any previous record.
func (t *Table[T]) Put(id string, rec T) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode record %s: %w", id, err)
	}
	if err := WriteFileAtomic(filepath.Join(t.dir, id+recordSuffix), data, t.sync); err != nil {
		return err
	}
	t.mu.Lock()
	t.records[id] = rec
	t.mu.Unlock()
	return nil
}

// Staged is a record written to a temporary file and flushed, but not yet
// in place. Commit renames it into place; the caller then flushes the
// directory with Table.SyncDir before relying on it. Staging lets a caller
// overlap the record's flush with other I/O.
type Staged[T any] struct {
	t    *Table[T]
	id   string
	rec  T
	temp string
}

// Stage writes rec for id to a flushed temporary file.
func (t *Table[T]) Stage(id string, rec T) (*Staged[T], error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode record %s: %w", id, err)
	}
	temp, err := writeTemp(t.dir, id+recordSuffix, data, t.sync)
	if err != nil {
		return nil, err
	}
	return &Staged[T]{t: t, id: id, rec: rec, temp: temp}, nil
}

// Commit renames the staged record into place and updates the index.
func (s *Staged[T]) Commit() error {
	if err := os.Rename(s.temp, filepath.Join(s.t.dir, s.id+recordSuffix)); err != nil {
		_ = os.Remove(s.temp)
		return fmt.Errorf("rename temp file: %w", err)
	}
	s.t.mu.Lock()
	s.t.records[s.id] = s.rec
	s.t.mu.Unlock()
	return nil
}

// Abort removes the staged record's temporary file.
func (s *Staged[T]) Abort() { _ = os.Remove(s.temp) }

// SyncDir flushes the table's directory when the table syncs.
func (t *Table[T]) SyncDir() error {
	if !t.sync {
		return nil
	}
	return SyncDir(t.dir)
}

// Delete durably removes the record stored under id. Deleting a missing
// record is not an error.
func (t *Table[T]) Delete(id string) error {
	err := os.Remove(filepath.Join(t.dir, id+recordSuffix))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove record %s: %w", id, err)
	}
	if t.sync {
		if err := SyncDir(t.dir); err != nil {
			return err
		}
	}
	t.mu.Lock()
	delete(t.records, id)
	t.mu.Unlock()
	return nil
}

// WriteFileAtomic replaces path with data: it writes a temporary file in the
// same directory, flushes it (when sync is true), renames it over path and
// flushes the directory.
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
