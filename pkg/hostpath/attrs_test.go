//go:build linux

package hostpath

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/shutter-csi/shutter/pkg/hostpath/fscopy"
)

// attrs is what a copy must keep of one entry besides its data.
type attrs struct {
	mode       fs.FileMode
	uid, gid   uint32
	mtime      time.Time
	linkTarget string
}

// treeAttrs returns the attributes of every entry under root, by relative
// path.
func treeAttrs(t *testing.T, root string) map[string]attrs {
	t.Helper()
	out := map[string]attrs{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		a := attrs{mode: info.Mode(), uid: st.Uid, gid: st.Gid, mtime: info.ModTime()}
		if d.Type()&fs.ModeSymlink != 0 {
			a.mode = fs.ModeSymlink // a symlink's permission bits mean nothing
			if a.linkTarget, err = os.Readlink(path); err != nil {
				return err
			}
		}
		rel, _ := filepath.Rel(root, path)
		out[rel] = a
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCopiesKeepOwnerModeAndTimes: a snapshot, and a volume restored from
// it, keep each entry's owner and group, permission bits (setuid, setgid
// and sticky included, whatever the umask) and modification time, as a
// workload such as a database that runs as its own user needs.
func TestCopiesKeepOwnerModeAndTimes(t *testing.T) {
	if !fscopy.CanChown {
		t.Skip("keeping owners needs root (CI runs the driver tests as root)")
	}
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "buffered", true: "direct"}[direct], func(t *testing.T) {
			e := newTestEnv(t, func(o *Options) { o.Sync = true; o.BackgroundRestoreSync = direct })
			vol := e.createVolume(t, "owned", 8<<20, mountCap())
			root := e.d.volumePath(vol.GetVolumeId())
			old := time.Date(2020, 2, 3, 4, 5, 6, 7000, time.UTC)
			mustDo(t, os.Mkdir(filepath.Join(root, "data"), 0o700))
			mustDo(t, os.WriteFile(filepath.Join(root, "data", "table"), randomBytes(t, 64<<10), 0o600))
			mustDo(t, os.WriteFile(filepath.Join(root, "data", "empty"), nil, 0o640))
			mustDo(t, os.WriteFile(filepath.Join(root, "tool"), []byte("#!/bin/sh\n"), 0o755))
			mustDo(t, os.Mkdir(filepath.Join(root, "shared"), 0o777))
			mustDo(t, os.Symlink("data/table", filepath.Join(root, "link")))
			for path, owner := range map[string][2]int{"data": {999, 999}, "data/table": {999, 998}, "data/empty": {1000, 1000},
				"tool": {0, 0}, "shared": {1001, 1002}, "link": {999, 999}, ".": {999, 999}} {
				mustDo(t, os.Lchown(filepath.Join(root, path), owner[0], owner[1]))
			}
			mustDo(t, os.Chmod(filepath.Join(root, "tool"), 0o755|fs.ModeSetuid))
			mustDo(t, os.Chmod(filepath.Join(root, "shared"), 0o777|fs.ModeSetgid|fs.ModeSticky))
			for _, path := range []string{"data/table", "data/empty", "tool", "data", "shared", "."} {
				mustDo(t, os.Chtimes(filepath.Join(root, path), old, old.Add(time.Duration(len(path))*time.Hour)))
			}
			want := treeAttrs(t, root)

			snap := e.createSnapshot(t, "owned-snap", vol.GetVolumeId())
			if got := treeAttrs(t, e.d.snapshotPath(snap.GetSnapshotId())); !sameAttrs(t, "snapshot", got, want) {
				return
			}
			restored := e.restoreVolume(t, "restored", snap.GetSnapshotId(), 8<<20, mountCap())
			mustDo(t, e.d.restores.wait(context.Background(), restored)) // the background flush, when on, has finished
			sameAttrs(t, "restored volume", treeAttrs(t, e.d.volumePath(restored)), want)
		})
	}
}

// sameAttrs reports whether got has exactly the entries and attributes of
// want, and says which differ.
func sameAttrs(t *testing.T, what string, got, want map[string]attrs) bool {
	t.Helper()
	ok := len(got) == len(want)
	for path, w := range want {
		if g, found := got[path]; !found || g != w {
			t.Errorf("%s: %s has %+v, want %+v", what, path, g, w)
			ok = false
		}
	}
	if !ok {
		t.Errorf("%s: %d entries, want %d", what, len(got), len(want))
	}
	return ok
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
