//go:build linux

package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
)

// fuzzTables are the tables the fuzz test writes to.
var fuzzTables = []string{"volumes", "snapshots"}

// writeFuzzLog commits the changes ops describes to a new log in dir and
// returns every value each record ever had. Each op byte picks a table, an
// ID out of eight, and a put (with a value no other put has) or a delete.
func writeFuzzLog(t *testing.T, dir string, ops []byte) map[recordKey]map[string]bool {
	t.Helper()
	l, err := OpenLog(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	values := map[recordKey]map[string]bool{}
	for i, op := range ops {
		k := recordKey{table: fuzzTables[op&1], id: fmt.Sprintf("id-%d", op>>1&7)}
		c := change{key: k}
		if op&0x10 == 0 {
			c.value = fmt.Appendf(nil, `{"n":%d,"pad":"%s"}`, i, bytes.Repeat([]byte{'x'}, int(op>>5)*7))
			if values[k] == nil {
				values[k] = map[string]bool{}
			}
			values[k][string(c.value)] = true
		}
		if err := l.commit(written, c); err != nil {
			t.Fatal(err)
		}
	}
	return values
}

// splitFrames cuts a log file into its frames and what follows them.
func splitFrames(t *testing.T, data []byte) (frames [][]byte, rest []byte) {
	t.Helper()
	off := len(logMagic)
	for {
		n := frameAt(data[off:])
		if n == 0 {
			return frames, data[off:]
		}
		frames = append(frames, bytes.Clone(data[off:off+n]))
		off += n
	}
}

// damageLog changes a log file as damage says, four bytes an instruction:
// what to do and three arguments. Frames are duplicated, moved (reordered)
// or removed first; then the file is truncated or has bits flipped.
func damageLog(t *testing.T, data, damage []byte) []byte {
	t.Helper()
	frames, rest := splitFrames(t, data)
	type byteOp struct{ kind, a, b, c byte }
	var late []byteOp
	for ; len(damage) >= 4; damage = damage[4:] {
		op := byteOp{damage[0] % 5, damage[1], damage[2], damage[3]}
		if len(frames) == 0 || op.kind >= 3 {
			late = append(late, op)
			continue
		}
		i, j := int(op.a)%len(frames), int(op.b)%len(frames)
		switch op.kind {
		case 0: // duplicate frame i after frame j
			frames = append(frames[:j+1], append([][]byte{bytes.Clone(frames[i])}, frames[j+1:]...)...)
		case 1: // swap frames i and j
			frames[i], frames[j] = frames[j], frames[i]
		case 2: // remove frame i
			frames = append(frames[:i], frames[i+1:]...)
		}
	}
	out := []byte(logMagic)
	for _, f := range frames {
		out = append(out, f...)
	}
	out = append(out, rest...)
	for _, op := range late {
		pos := int(binary.LittleEndian.Uint16([]byte{op.a, op.b})) % len(out)
		switch op.kind {
		case 3: // truncate, but keep the magic
			out = out[:max(pos, len(logMagic))]
		case 4: // flip a bit
			out[pos] ^= 1 << (op.c % 8)
		}
	}
	return out
}

// liveRecords returns every live record of the fuzz tables.
func liveRecords(l *Log) map[recordKey]string {
	out := map[recordKey]string{}
	for _, table := range fuzzTables {
		for id, v := range l.records(table) {
			out[recordKey{table, id}] = string(v)
		}
	}
	return out
}

// FuzzReplay writes a log, damages it (truncation, bit flips, duplicated,
// reordered and removed frames) and opens it. Open must not panic; when it
// succeeds, every record it yields must have been written with that very
// value, the log must take a new record, and opening it again must yield
// the same records plus the new one. `make test` runs it for a bounded
// time, `make fuzz` for longer.
func FuzzReplay(f *testing.F) {
	f.Add([]byte{0, 2, 4, 0x10, 0x21, 0x42, 0x02}, []byte{})
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7}, []byte{4, 40, 0, 3})
	f.Add([]byte{0, 1, 2, 3, 0x12, 5}, []byte{0, 1, 3, 0, 1, 0, 2, 0})
	f.Add([]byte{0xe0, 0xe1, 0xe2, 0x10, 0xe4}, []byte{3, 90, 0, 0, 2, 1, 0, 0})
	f.Add([]byte{0, 2, 4, 6, 8}, []byte{2, 1, 0, 0, 4, 200, 0, 7})
	f.Fuzz(func(t *testing.T, ops, damage []byte) {
		if len(ops) > 64 || len(damage) > 64 {
			return
		}
		dir := t.TempDir()
		written := writeFuzzLog(t, dir, ops)
		data, err := os.ReadFile(logPath(dir))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(logPath(dir), damageLog(t, data, damage), 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := OpenLog(dir, false)
		if err != nil {
			// A frame that passes its checksum but does not decode is
			// refused, not dropped: the driver does not start.
			return
		}
		got := liveRecords(l)
		for k, v := range got {
			if !written[k][v] {
				t.Fatalf("record %v = %s was never written", k, v)
			}
		}
		extra := change{key: recordKey{"volumes", "id-new"}, value: []byte(`{"new":true}`)}
		if err := l.commit(flushed, extra); err != nil {
			t.Fatal(err)
		}
		_ = l.Close()
		again, err := OpenLog(dir, false)
		if err != nil {
			t.Fatalf("reopen after a clean close: %v", err)
		}
		defer again.Close()
		got[extra.key] = string(extra.value)
		if after := liveRecords(again); !maps.Equal(after, got) {
			t.Fatalf("reopen yields %v, want %v", after, got)
		}
		if again.Dropped() != 0 {
			t.Fatalf("a log written after Open has a damaged end of %d bytes", again.Dropped())
		}
		// Kept copies of a damaged log are the only other files.
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.Name() != logName && !bytes.HasPrefix([]byte(e.Name()), []byte(logName+damagedSuffix)) {
				t.Fatalf("unexpected file %s", filepath.Join(dir, e.Name()))
			}
		}
	})
}
