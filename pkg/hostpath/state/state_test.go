//go:build linux

package state

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// openVolumes opens the log in dir and its volumes table.
func openVolumes(t *testing.T, dir string) (*Log, *Table[Volume]) {
	t.Helper()
	l := openLog(t, dir)
	return l, openTable[Volume](t, l, "volumes")
}

// openLog opens the log in dir, which flushes, and closes it when the test
// ends.
func openLog(t *testing.T, dir string) *Log {
	t.Helper()
	l, err := OpenLog(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// openTable opens the table name of l.
func openTable[T any](t *testing.T, l *Log, name string) *Table[T] {
	t.Helper()
	tab, err := OpenTable[T](l, name)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// checkRecovered checks what follows a put of id that failed or was
// refused: the table does not hold id, the next put (of vol-b) succeeds,
// and the log, opened again, holds exactly the IDs want.
func checkRecovered(t *testing.T, l *Log, tab *Table[Volume], dir, id string, want ...string) {
	t.Helper()
	if _, ok := tab.Get(id); ok {
		t.Fatalf("the failed put of %s is in the table", id)
	}
	if err := tab.Put("vol-b", Volume{ID: "vol-b"}); err != nil {
		t.Fatalf("put after the failed one: %v", err)
	}
	_ = l.Close()
	_, again := openVolumes(t, dir)
	if ids := again.IDs(); !slices.Equal(ids, want) {
		t.Fatalf("IDs after reopen = %v, want %v", ids, want)
	}
}

// closeAndRead closes l and returns its file's bytes.
func closeAndRead(t *testing.T, l *Log, dir string) []byte {
	t.Helper()
	_ = l.Close()
	data, err := os.ReadFile(logPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func logPath(dir string) string { return filepath.Join(dir, logName) }

// logEnd returns the end of the log's last frame.
func logEnd(l *Log) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.size)
}

// putVolume puts a record of volume id into tab and returns the end of the
// log's last frame after it.
func putVolume(t *testing.T, l *Log, tab *Table[Volume], id string) int {
	t.Helper()
	if err := tab.Put(id, Volume{ID: id}); err != nil {
		t.Fatal(err)
	}
	return logEnd(l)
}

func logSize(t *testing.T, dir string) int64 {
	t.Helper()
	info, err := os.Stat(logPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

func TestTablePersistsPutsAndDeletes(t *testing.T) {
	dir := t.TempDir()
	l, tab := openVolumes(t, dir)
	snaps := openTable[Snapshot](t, l, "snapshots")
	for _, err := range []error{
		tab.Put("vol-a", Volume{ID: "vol-a", CapacityBytes: 7}),
		tab.Put("vol-b", Volume{ID: "vol-b"}),
		tab.Put("vol-a", Volume{ID: "vol-a", CapacityBytes: 8}),
		tab.Delete("vol-b"),
		tab.Delete("vol-never"),
		// The same ID in another table is another record.
		snaps.Put("vol-a", Snapshot{ID: "vol-a", SizeBytes: 3}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	_ = l.Close()

	l2, again := openVolumes(t, dir)
	if got, ok := again.Get("vol-a"); !ok || got.CapacityBytes != 8 {
		t.Fatalf("vol-a = %v, %t; want the second put", got, ok)
	}
	if ids := again.IDs(); !slices.Equal(ids, []string{"vol-a"}) {
		t.Fatalf("IDs = %v, want only vol-a", ids)
	}
	snaps2 := openTable[Snapshot](t, l2, "snapshots")
	if got, ok := snaps2.Get("vol-a"); !ok || got.SizeBytes != 3 {
		t.Fatalf("snapshot vol-a = %v, %t", got, ok)
	}
	// Open compacted the outdated frames away: one frame per live record,
	// then preallocated zeros.
	want := len(logMagic) + int(l2.liveBytes)
	if got := logEnd(l2); got != want {
		t.Fatalf("log holds %d bytes of frames after open, want %d", got, want)
	}
	if size := logSize(t, dir); size != logPrealloc {
		t.Fatalf("log file is %d bytes, want %d preallocated", size, logPrealloc)
	}
}

// TestOpenDropsTornOrCorruptTail cuts or damages the last frame in every
// way a crash or bad sector could and checks that Open keeps all earlier
// records, drops the damaged one and accepts appends afterwards.
func TestOpenDropsTornOrCorruptTail(t *testing.T) {
	// last is where the damaged frame starts, end where it ends; zeros
	// follow it.
	cases := []struct {
		name   string
		damage func(d []byte, last, end int)
	}{
		{name: "torn header", damage: func(d []byte, last, end int) { clear(d[last+3 : end]) }},
		{name: "torn body", damage: func(d []byte, last, end int) { clear(d[end-5 : end]) }},
		{name: "checksum mismatch", damage: func(d []byte, last, end int) { d[end-2] ^= 0xff }},
		{name: "zeroed", damage: func(d []byte, last, end int) { clear(d[last:end]) }},
		{name: "huge length", damage: func(d []byte, last, end int) { d[last+3] = 0x7f }},
		{name: "garbage after", damage: func(d []byte, last, end int) { d[end+10] = 7 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l, tab := openVolumes(t, dir)
			last := putVolume(t, l, tab, "vol-a")
			end := putVolume(t, l, tab, "vol-b")
			data := closeAndRead(t, l, dir)
			tc.damage(data, last, end)
			if err := os.WriteFile(logPath(dir), data, 0o600); err != nil {
				t.Fatal(err)
			}

			l2, again := openVolumes(t, dir)
			wantIDs := []string{"vol-a"}
			if tc.name == "garbage after" {
				wantIDs = []string{"vol-a", "vol-b"}
			}
			if ids := again.IDs(); !slices.Equal(ids, wantIDs) {
				t.Fatalf("IDs = %v, want %v", ids, wantIDs)
			}
			// Zeros look like space never written, which they are then.
			if dropped := l2.Dropped() > 0; dropped != (tc.name != "zeroed") {
				t.Fatalf("Dropped() = %d", l2.Dropped())
			}
			if err := again.Put("vol-c", Volume{ID: "vol-c"}); err != nil {
				t.Fatal(err)
			}
			_ = l2.Close()
			_, third := openVolumes(t, dir)
			if ids := third.IDs(); !slices.Contains(ids, "vol-c") || !slices.Contains(ids, "vol-a") {
				t.Fatalf("after an append past the cut, IDs = %v", ids)
			}
		})
	}
}

func TestOpenRejectsForeignFileAndMalformedFrame(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(logPath(dir), []byte("not a log at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenLog(dir, false); err == nil {
		t.Fatal("a file without the magic was opened as a log")
	}
	// A frame whose checksum holds but whose body does not decode is not a
	// torn write: Open must refuse it rather than drop records after it.
	body := encodeBody(change{key: recordKey{table: "volumes", id: "vol-a"}, value: []byte("{}")})
	body[0] = 9 // no such operation
	bad := appendFramed([]byte(logMagic), body)
	if err := os.WriteFile(logPath(dir), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenLog(dir, false); err == nil {
		t.Fatal("a malformed frame with a valid checksum was accepted")
	}
}

func TestLogCompactsWhenItGrows(t *testing.T) {
	dir := t.TempDir()
	l, tab := openVolumes(t, dir)
	big := Volume{ID: "vol-a", Parameters: map[string]string{"pad": string(make([]byte, 4000))}}
	for i := range 1000 {
		big.CapacityBytes = int64(i)
		if err := tab.Put("vol-a", big); err != nil {
			t.Fatal(err)
		}
		if err := tab.Put(fmt.Sprintf("vol-%d", i%3), Volume{CapacityBytes: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// 1000 frames of 4 KiB were appended; the live records need about 4 KiB.
	if end := logEnd(l); end > compactMinBytes+64<<10 {
		t.Fatalf("log holds %d bytes of frames; it was never compacted", end)
	}
	if size := logSize(t, dir); size > 2*compactMinBytes+logPrealloc {
		t.Fatalf("log file is %d bytes", size)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("state dir holds %d entries, want only the log", len(entries))
	}
	_ = l.Close()
	_, again := openVolumes(t, dir)
	if got, _ := again.Get("vol-a"); got.CapacityBytes != 999 {
		t.Fatalf("vol-a after compaction = %d, want 999", got.CapacityBytes)
	}
	if got, _ := again.Get("vol-0"); got.CapacityBytes != 999 {
		t.Fatalf("vol-0 after compaction = %d, want 999", got.CapacityBytes)
	}
}

// TestConcurrentCommitsShareFlushes puts from many goroutines at once: all
// records must survive and the log must have written fewer batches than
// records.
func TestConcurrentCommitsShareFlushes(t *testing.T) {
	dir := t.TempDir()
	l, tab := openVolumes(t, dir)
	const writers, each = 16, 20
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("vol-%d-%d", w, i)
				if err := tab.Put(id, Volume{ID: id}); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	l.mu.Lock()
	batches := l.done
	l.mu.Unlock()
	if batches >= writers*each {
		t.Fatalf("%d batches for %d records: no commit was shared", batches, writers*each)
	}
	_ = l.Close()
	_, again := openVolumes(t, dir)
	if n := len(again.IDs()); n != writers*each {
		t.Fatalf("%d records after reopen, want %d", n, writers*each)
	}
}

// TestFailedWriteIsRepairedByTheNextCommit breaks the file under the log:
// the put fails and changes nothing, and the next put writes the log afresh
// from the live records (a flush retried on the old file might report
// success for data it lost) and succeeds.
func TestFailedWriteIsRepairedByTheNextCommit(t *testing.T) {
	dir := t.TempDir()
	l, tab := openVolumes(t, dir)
	if err := tab.Put("vol-0", Volume{ID: "vol-0"}); err != nil {
		t.Fatal(err)
	}
	// Closing the file under the log makes the next write fail.
	_ = l.f.Close()
	if err := tab.Put("vol-a", Volume{ID: "vol-a"}); err == nil {
		t.Fatal("put on a broken log succeeded")
	}
	checkRecovered(t, l, tab, dir, "vol-a", "vol-0", "vol-b")
}

// TestOpenTableImportsLegacyFiles writes records in the one-file-per-record
// layout of earlier versions and checks that opening moves them into the
// log, removes the old files, and that nothing is lost on the next open.
func TestOpenTableImportsLegacyFiles(t *testing.T) {
	dir := t.TempDir()
	legacy := filepath.Join(dir, "volumes")
	if err := os.MkdirAll(legacy, 0o750); err != nil {
		t.Fatal(err)
	}
	for _, v := range []Volume{{ID: "vol-a", CapacityBytes: 1}, {ID: "vol-b", CapacityBytes: 2}} {
		data, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(legacy, v.ID+legacySuffix), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A write torn by a crash in the old layout left only a temp file.
	if err := os.WriteFile(filepath.Join(legacy, tempPrefix+"vol-c.json-123"), []byte(`{"id":`), 0o600); err != nil {
		t.Fatal(err)
	}
	l, tab := openVolumes(t, dir)
	if ids := tab.IDs(); !slices.Equal(ids, []string{"vol-a", "vol-b"}) {
		t.Fatalf("IDs after import = %v", ids)
	}
	if _, err := os.Stat(legacy); !os.IsNotExist(err) {
		t.Fatalf("legacy dir left after import: %v", err)
	}
	_ = l.Close()
	_, again := openVolumes(t, dir)
	if got, ok := again.Get("vol-b"); !ok || got.CapacityBytes != 2 {
		t.Fatalf("vol-b after reopen = %v, %t", got, ok)
	}
}

func TestOpenTableRejectsCorruptLegacyRecord(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "volumes"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "volumes", "vol-a.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLog(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := OpenTable[Volume](l, "volumes"); err == nil {
		t.Fatal("corrupt legacy record accepted")
	}
	if _, err := os.Stat(filepath.Join(dir, "volumes", "vol-a.json")); err != nil {
		t.Fatalf("the corrupt record was removed: %v", err)
	}
}

// TestCommitWritesChangesOfSeveralTablesInOrder commits a change to two
// tables at once and checks that a torn write keeps a prefix of the batch;
// a change committed without a flush is still read back.
func TestCommitWritesChangesOfSeveralTablesInOrder(t *testing.T) {
	dir := t.TempDir()
	l, vols := openVolumes(t, dir)
	markers := openTable[PendingRestore](t, l, "restores")
	before := logEnd(l)
	m, err := markers.PutChange("vol-a", PendingRestore{VolumeID: "vol-a"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := vols.PutChange("vol-a", Volume{ID: "vol-a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(m, v); err != nil {
		t.Fatal(err)
	}
	if _, ok := vols.Get("vol-a"); !ok {
		t.Fatal("a committed change was not applied to its table")
	}
	batch, err := os.ReadFile(logPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	copied, err := markers.PutChange("vol-a", PendingRestore{VolumeID: "vol-a", Copied: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CommitNoFlush(copied); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()

	l2 := openLog(t, dir)
	got := openTable[PendingRestore](t, l2, "restores")
	if m, ok := got.Get("vol-a"); !ok || !m.Copied {
		t.Fatalf("marker after reopen = %v, %t; want the unflushed update", m, ok)
	}
	_ = l2.Close()

	// Cut the log inside the batch's second frame: the first must survive.
	markerFrame := frameSize(recordKey{table: "restores", id: "vol-a"}, m.value)
	if err := os.WriteFile(logPath(dir), batch[:before+int(markerFrame)+3], 0o600); err != nil {
		t.Fatal(err)
	}
	l3, vols3 := openVolumes(t, dir)
	markers3 := openTable[PendingRestore](t, l3, "restores")
	if _, ok := markers3.Get("vol-a"); !ok {
		t.Fatal("the first change of a torn batch was lost")
	}
	if _, ok := vols3.Get("vol-a"); ok {
		t.Fatal("the torn second change of a batch was read")
	}
}

// TestSnapshotRecordEmptyField: records written before empty snapshots
// existed load as snapshots with data, records with data are written as
// before (without the new fields), and empty ones keep their mode.
func TestSnapshotRecordEmptyField(t *testing.T) {
	var old Snapshot
	if err := json.Unmarshal([]byte(`{"id":"snap-1","sourceVolumeID":"vol-1","accessType":"mount","sizeBytes":5,"manifest":{"entries":1,"bytes":0},"createdAt":"2025-01-02T03:04:05Z"}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Empty || old.Mode != 0 || old.Manifest == nil {
		t.Fatalf("old record decoded as %+v, want a snapshot with data", old)
	}
	data, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"empty", "mode"} {
		if _, ok := fields[k]; ok {
			t.Fatalf("a record with data is written with %q: %s", k, data)
		}
	}
	dir := t.TempDir()
	l := openLog(t, dir)
	snaps := openTable[Snapshot](t, l, "snapshots")
	empty := Snapshot{ID: "snap-2", AccessType: AccessMount, Empty: true, Mode: 0o751 | fs.ModeSetgid}
	if err := snaps.Put(empty.ID, empty); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	snaps = openTable[Snapshot](t, openLog(t, dir), "snapshots")
	if got, ok := snaps.Get(empty.ID); !ok || !got.Empty || got.Mode != empty.Mode {
		t.Fatalf("empty record reopened as %+v, %v; want %+v", got, ok, empty)
	}
}
