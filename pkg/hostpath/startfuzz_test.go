//go:build linux

package hostpath

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// copyTree copies the folders and regular files below src to dst.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		switch {
		case e.IsDir():
			return os.MkdirAll(target, 0o750)
		case e.Type().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, 0o640)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// FuzzStartKeepsData damages the record log of a data folder holding
// volumes and snapshots (bit flips, a cut, the log gone) and starts the
// driver on it: whatever the log holds, start-up must not delete a byte of
// volume or snapshot data (it may quarantine it). `make test` runs it for
// a bounded time, `make fuzz` for longer.
func FuzzStartKeepsData(f *testing.F) {
	e := newTestEnv(f)
	for i := range 3 {
		v := e.createVolume(f, fmt.Sprintf("fz-%d", i), 1<<20, mountCap())
		if err := os.WriteFile(filepath.Join(e.d.volumePath(v.GetVolumeId()), "f"), fmt.Appendf(nil, "data %d", i), 0o644); err != nil {
			f.Fatal(err)
		}
		e.createSnapshot(f, fmt.Sprintf("fz-s%d", i), v.GetVolumeId())
	}
	template := e.d.opts.DataDir
	e.stop()
	logData, err := os.ReadFile(filepath.Join(template, "state", "records.log"))
	if err != nil {
		f.Fatal(err)
	}
	used := len(bytes.TrimRight(logData, "\x00"))
	before := dataSums(f, template)
	f.Add(uint16(used/2), byte(1), uint16(0), false)
	f.Add(uint16(used-3), byte(0x80), uint16(used-10), false)
	f.Add(uint16(40), byte(0xff), uint16(0), false)
	f.Add(uint16(0), byte(0), uint16(0), true)
	f.Fuzz(func(t *testing.T, flipAt uint16, flip byte, cutAt uint16, removeLog bool) {
		dir := t.TempDir()
		copyTree(t, template, dir)
		logPath := filepath.Join(dir, "state", "records.log")
		data := bytes.Clone(logData)
		data[int(flipAt)%used] ^= flip
		if cutAt != 0 {
			data = data[:max(int(cutAt)%used, 1)]
		}
		if err := os.WriteFile(logPath, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if removeLog {
			_ = os.Remove(logPath)
		}
		o := testOptions(t.TempDir())
		o.DataDir = dir
		if d, err := New(klog.NewContext(context.Background(), logr.Discard()), o); err == nil {
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
		}
		wantNoDataLost(t, before, dataSums(t, dir))
	})
}
