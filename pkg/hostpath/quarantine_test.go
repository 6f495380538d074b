//go:build linux

package hostpath

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shutter-csi/shutter/pkg/metrics"
)

// dataSums counts the contents of every regular file below the data
// folder's volumes, snapshots and quarantine, by SHA-256.
func dataSums(t testing.TB, dataDir string) map[[32]byte]int {
	t.Helper()
	sums := map[[32]byte]int{}
	for _, top := range []string{"volumes", "snapshots", quarantineDirName} {
		err := filepath.WalkDir(filepath.Join(dataDir, top), func(path string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sums[sha256.Sum256(data)]++
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return sums
}

// wantNoDataLost fails unless every file content of before is still there,
// in place or quarantined.
func wantNoDataLost(t testing.TB, before, after map[[32]byte]int) {
	t.Helper()
	for sum, n := range before {
		if after[sum] < n {
			t.Fatalf("%d of %d files with content %x are gone", n-after[sum], n, sum[:6])
		}
	}
}

// fillEnv creates volumes with distinct data (a block and a filesystem one
// per round) and a snapshot of each, so the record log holds many frames.
func fillEnv(t *testing.T, e *testEnv, prefix string, rounds int) []string {
	t.Helper()
	var ids []string
	for i := range rounds {
		b := e.createVolume(t, fmt.Sprintf("%s-b%d", prefix, i), 1<<20, blockCap())
		e.writeAt(t, b.GetVolumeId(), 4096, randomBytes(t, 8192))
		m := e.createVolume(t, fmt.Sprintf("%s-m%d", prefix, i), 1<<20, mountCap())
		if err := os.WriteFile(filepath.Join(e.d.volumePath(m.GetVolumeId()), "f"), randomBytes(t, 5000), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{b.GetVolumeId(), m.GetVolumeId()} {
			s := e.createSnapshot(t, fmt.Sprintf("%s-s%s", prefix, v), v)
			ids = append(ids, v, s.GetSnapshotId())
		}
	}
	return ids
}

// restartTwice restarts the driver twice and checks after each start that
// no file's data is gone. It returns the cleanup-halted gauge after each.
func restartTwice(t *testing.T, e *testEnv, damage func(logPath string)) (halted [2]float64) {
	t.Helper()
	dataDir := e.d.opts.DataDir
	e.stop()
	before := dataSums(t, dataDir)
	damage(filepath.Join(dataDir, "state", "records.log"))
	for i := range 2 {
		e.start(t, e.d.opts)
		halted[i] = testutil.ToFloat64(cleanupHalted)
		e.stop()
		wantNoDataLost(t, before, dataSums(t, dataDir))
	}
	return halted
}

// TestStartKeepsDataWhenLogIsDamagedInTheMiddle flips a byte in the middle
// of the record log. Before, the next start dropped the records after it
// and deleted their data. Now the first start leaves the data folders
// alone and keeps the damaged log in quarantine; the second quarantines
// the data it has no record for.
func TestStartKeepsDataWhenLogIsDamagedInTheMiddle(t *testing.T) {
	e := newTestEnv(t)
	fillEnv(t, e, "d", 4)
	halted := restartTwice(t, e, func(path string) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		used := len(bytes.TrimRight(data, "\x00"))
		data[used/2] ^= 0x20
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	})
	if halted != [2]float64{1, 0} {
		t.Fatalf("cleanup halted = %v, want halted at the first start only", halted)
	}
	logs, _ := filepath.Glob(filepath.Join(e.d.opts.DataDir, quarantineDirName, "*", "state", "records.log"))
	if len(logs) != 1 {
		t.Fatalf("damaged logs in quarantine: %v, want one", logs)
	}
}

// TestStartKeepsDataWithoutRecordLog deletes records.log. Before, the next
// start created an empty log and deleted every volume's and snapshot's
// data.
func TestStartKeepsDataWithoutRecordLog(t *testing.T) {
	e := newTestEnv(t)
	ids := fillEnv(t, e, "n", 2)
	halted := restartTwice(t, e, func(path string) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	})
	if halted != [2]float64{1, 0} {
		t.Fatalf("cleanup halted = %v, want halted at the first start only", halted)
	}
	for _, id := range ids {
		kind := "volumes"
		if id[:4] == "snap" {
			kind = "snapshots"
		}
		if got, _ := filepath.Glob(filepath.Join(e.d.opts.DataDir, quarantineDirName, "*", kind, id)); len(got) != 1 {
			t.Fatalf("%s is not in quarantine after the second start: %v", id, got)
		}
	}
}

// TestStartKeepsDataWithOlderRecordLog puts back a copy of the record log
// taken before more volumes and snapshots were made, as a restore from a
// backup would. Before, the next start deleted the newer data.
func TestStartKeepsDataWithOlderRecordLog(t *testing.T) {
	e := newTestEnv(t)
	old := fillEnv(t, e, "old", 1)
	logPath := filepath.Join(e.d.opts.DataDir, "state", "records.log")
	older, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	newer := fillEnv(t, e, "new", 2)
	count := testutil.ToFloat64(quarantined.WithLabelValues(kindVolume)) + testutil.ToFloat64(quarantined.WithLabelValues(kindSnapshot))
	halted := restartTwice(t, e, func(path string) {
		if err := os.WriteFile(path, older, 0o600); err != nil {
			t.Fatal(err)
		}
	})
	if halted != [2]float64{0, 0} {
		t.Fatalf("cleanup halted = %v; an older log is not new nor damaged", halted)
	}
	for _, id := range old {
		if _, ok := e.d.volumes.Get(id); !ok {
			if _, ok := e.d.snapshots.Get(id); !ok {
				t.Fatalf("%s, recorded in the older log, is gone", id)
			}
		}
	}
	moved := testutil.ToFloat64(quarantined.WithLabelValues(kindVolume)) + testutil.ToFloat64(quarantined.WithLabelValues(kindSnapshot)) - count
	if int(moved) != len(newer) {
		t.Fatalf("%v entries counted as quarantined, want %d", moved, len(newer))
	}
}

// duBytes is what du(1) says the tree at path takes of the disk.
func duBytes(t *testing.T, path string) int64 {
	t.Helper()
	out, err := exec.Command("du", "-s", "-B1", path).Output()
	mustDo(t, err)
	n, err := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
	mustDo(t, err)
	return n
}

// TestQuarantineCountsAndAges: quarantined data counts against --capacity
// and its size is exported; with --quarantine-max-age, a start's folder
// nothing was moved into for longer is deleted at the next start, and a
// new one stays.
func TestQuarantineCountsAndAges(t *testing.T) {
	e := newTestEnv(t, func(o *Options) { o.Capacity = 64 << 20 })
	dataDir := e.d.opts.DataDir
	free := func() int64 {
		resp, err := e.ctrl.GetCapacity(context.Background(), &csi.GetCapacityRequest{})
		mustDo(t, err)
		return resp.GetAvailableCapacity()
	}
	unrecorded := func(name string) {
		dir := filepath.Join(volumesDir(dataDir), name)
		mustDo(t, os.Mkdir(dir, 0o750))
		mustDo(t, os.WriteFile(filepath.Join(dir, "kept"), randomBytes(t, 4<<20), 0o644))
	}
	e.stop()
	unrecorded("vol-lost-1")
	e.start(t, e.d.opts)
	root := filepath.Join(dataDir, quarantineDirName)
	held := duBytes(t, root)
	if held < 4<<20 {
		t.Fatalf("du says the quarantine takes %d bytes, less than the data moved there", held)
	}
	if got := free(); got != 64<<20-held {
		t.Errorf("free capacity %d with %d bytes quarantined, want %d", got, held, 64<<20-held)
	}
	if got := testutil.ToFloat64(quarantineBytes); got != float64(held) {
		t.Errorf("%s = %v, want %d", metrics.HostpathQuarantineBytes, got, held)
	}

	// Eight days later, with a limit of seven: the old start's folder goes,
	// what this start quarantines stays.
	e.stop()
	old, err := os.ReadDir(root)
	mustDo(t, err)
	eightDaysAgo := time.Now().Add(-8 * 24 * time.Hour)
	for _, p := range []string{filepath.Join(root, old[0].Name()), filepath.Join(root, old[0].Name(), "volumes")} {
		mustDo(t, os.Chtimes(p, eightDaysAgo, eightDaysAgo))
	}
	unrecorded("vol-lost-2")
	o := e.d.opts
	o.QuarantineMaxAge = 7 * 24 * time.Hour
	e.start(t, o)
	if _, err := os.Lstat(filepath.Join(root, old[0].Name())); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the quarantine folder of eight days ago is still there (%v)", err)
	}
	kept, _ := filepath.Glob(filepath.Join(root, "*", "volumes", "vol-lost-2", "kept"))
	if len(kept) != 1 {
		t.Errorf("data quarantined by this start: %v, want it kept", kept)
	}
	if held := duBytes(t, root); free() != 64<<20-held || testutil.ToFloat64(quarantineBytes) != float64(held) {
		t.Errorf("after deleting old quarantined data: free %d, %s %v; want %d bytes held", free(), metrics.HostpathQuarantineBytes, testutil.ToFloat64(quarantineBytes), held)
	}
}
