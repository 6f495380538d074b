//go:build linux

package state

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestCommitRefusesOversizedRecord: a record whose frame is over the limit
// must fail before anything is written. Written, it would be acknowledged,
// and the next Open would take it for a torn frame and drop every record
// after it.
func TestCommitRefusesOversizedRecord(t *testing.T) {
	dir := t.TempDir()
	l, tab := openVolumes(t, dir)
	end := putVolume(t, l, tab, "vol-a")
	huge := Volume{ID: "vol-huge", Parameters: map[string]string{"pad": strings.Repeat("x", 1536<<10)}}
	err := tab.Put("vol-huge", huge)
	if !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("put of a 1.5 MiB record = %v, want ErrRecordTooLarge", err)
	}
	if logEnd(l) != end {
		t.Fatalf("the refused record moved the log's end from %d to %d", end, logEnd(l))
	}
	checkRecovered(t, l, tab, dir, "vol-huge", "vol-a", "vol-b")
}

// writeThree writes records vol-a, vol-b and vol-c to a new log in dir and
// returns the file and where vol-b's frame starts and ends.
func writeThree(t *testing.T, dir string) (data []byte, bStart, bEnd int) {
	t.Helper()
	l, tab := openVolumes(t, dir)
	for i, id := range []string{"vol-a", "vol-b", "vol-c"} {
		if i == 1 {
			bStart = logEnd(l)
		}
		if err := tab.Put(id, Volume{ID: id, Name: "name-" + id}); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			bEnd = logEnd(l)
		}
	}
	return closeAndRead(t, l, dir), bStart, bEnd
}

// TestOpenKeepsLogDamagedInTheMiddle flips a byte in the middle frame of
// three: Open keeps what precedes the damage, as for a torn end, and says
// that valid frames followed it, keeping the log as it was under another
// name.
func TestOpenKeepsLogDamagedInTheMiddle(t *testing.T) {
	dir := t.TempDir()
	data, bStart, bEnd := writeThree(t, dir)
	data[(bStart+bEnd)/2] ^= 0x40
	if err := os.WriteFile(logPath(dir), data, 0o600); err != nil {
		t.Fatal(err)
	}
	l, tab := openVolumes(t, dir)
	if ids := tab.IDs(); !slices.Equal(ids, []string{"vol-a"}) {
		t.Fatalf("IDs = %v, want [vol-a]", ids)
	}
	r := l.Recovery()
	if r.FramesAfterDamage != 1 || r.Created || r.Dropped == 0 {
		t.Fatalf("Recovery = %+v, want one frame after the damage", r)
	}
	kept, err := os.ReadFile(r.DamagedCopy)
	if err != nil || !bytes.Equal(kept, data) {
		t.Fatalf("the damaged log was not kept as found (%v)", err)
	}
}

// TestOpenTornEndIsNotDamageInTheMiddle: a frame torn at the end, followed
// by zeros, is what a crash leaves; nothing is kept.
func TestOpenTornEndIsNotDamageInTheMiddle(t *testing.T) {
	dir := t.TempDir()
	l, tab := openVolumes(t, dir)
	end := putVolume(t, l, tab, "vol-a")
	data := closeAndRead(t, l, dir)
	torn := appendFrame(nil, change{key: recordKey{"volumes", "vol-b"}, value: []byte(`{"id":"vol-b"}`)})
	copy(data[end:], torn[:len(torn)-3])
	if err := os.WriteFile(logPath(dir), data, 0o600); err != nil {
		t.Fatal(err)
	}
	l, _ = openVolumes(t, dir)
	if r := l.Recovery(); r.Dropped == 0 || r.FramesAfterDamage != 0 || r.DamagedCopy != "" {
		t.Fatalf("Recovery = %+v, want a dropped tail only", r)
	}
}

// TestOpenReportsNewLog: a log that did not exist is reported as created,
// one that did is not.
func TestOpenReportsNewLog(t *testing.T) {
	dir := t.TempDir()
	l, _ := openVolumes(t, dir)
	if !l.Recovery().Created {
		t.Fatal("a new log is not reported as created")
	}
	_ = l.Close()
	l, _ = openVolumes(t, dir)
	if l.Recovery().Created {
		t.Fatal("an existing log is reported as created")
	}
}
