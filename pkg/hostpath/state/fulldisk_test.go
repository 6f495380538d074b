//go:build linux

package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shutter-csi/shutter/internal/fstest"
)

// TestFullDiskFailsOneCommitAndRecovers fills the log's filesystem: a put
// that needs the log to grow fails with ENOSPC, a small change still fits
// in the space preallocated, and once space is free again puts succeed
// without reopening the log; after a reopen every acknowledged record is
// there.
func TestFullDiskFailsOneCommitAndRecovers(t *testing.T) {
	dir := filepath.Join(fstest.MountTmpfs(t, 4<<20), "state")
	l, tab := openVolumes(t, dir)
	filler := fstest.FillDisk(t, filepath.Dir(dir))
	pad := strings.Repeat("p", 100<<10)
	var acked []string
	var err error
	for i := 0; err == nil; i++ {
		id := fmt.Sprintf("vol-%02d", i)
		if err = tab.Put(id, Volume{ID: id, Parameters: map[string]string{"pad": pad}}); err == nil {
			acked = append(acked, id)
		}
	}
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("put on a full disk = %v, want ENOSPC", err)
	}
	if len(acked) == 0 {
		t.Fatal("no put fit in the preallocated space")
	}
	if err := tab.Delete(acked[0]); err != nil {
		t.Fatalf("a delete on a full disk, with preallocated space left: %v", err)
	}
	acked = acked[1:]
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := tab.Put("vol-after", Volume{ID: "vol-after", Parameters: map[string]string{"pad": pad}}); err != nil {
		t.Fatalf("put once space is free again: %v", err)
	}
	acked = append(acked, "vol-after")
	_ = l.Close()
	_, again := openVolumes(t, dir)
	if ids := again.IDs(); !slices.Equal(ids, acked) {
		t.Fatalf("IDs after reopen = %v, want %v", ids, acked)
	}
}

// TestOpenNeedsNoFreeSpace opens logs that Open would compact (outdated
// frames; a torn end) on a full filesystem: Open must succeed, keep every
// record, and the log must accept changes once space is free.
func TestOpenNeedsNoFreeSpace(t *testing.T) {
	for _, torn := range []bool{false, true} {
		t.Run(fmt.Sprintf("torn=%t", torn), func(t *testing.T) {
			dir := filepath.Join(fstest.MountTmpfs(t, 3<<20), "state")
			l, tab := openVolumes(t, dir)
			for i := range 3 {
				if err := tab.Put("vol-a", Volume{ID: "vol-a", CapacityBytes: int64(i)}); err != nil {
					t.Fatal(err)
				}
			}
			end := logEnd(l)
			_ = l.Close()
			if torn {
				f, err := os.OpenFile(logPath(dir), os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				// Within the preallocated zeros: takes no space.
				if _, err := f.WriteAt([]byte{9, 0, 0, 0, 1, 2, 3, 4, 1}, int64(end)); err != nil {
					t.Fatal(err)
				}
				_ = f.Close()
			}
			filler := fstest.FillDisk(t, filepath.Dir(dir))
			l, tab = openVolumes(t, dir)
			if got, _ := tab.Get("vol-a"); got.CapacityBytes != 2 {
				t.Fatalf("vol-a = %+v after open on a full disk", got)
			}
			if r := l.Recovery(); r.CompactErr == nil || (r.Dropped > 0) != torn {
				t.Fatalf("Recovery = %+v", r)
			}
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			if err := tab.Put("vol-b", Volume{ID: "vol-b"}); err != nil {
				t.Fatal(err)
			}
			_ = l.Close()
			_, again := openVolumes(t, dir)
			if ids := again.IDs(); !slices.Equal(ids, []string{"vol-a", "vol-b"}) {
				t.Fatalf("IDs after reopen = %v", ids)
			}
		})
	}
}
