//go:build linux

package quiesce

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// target is one thing quiescing stops and resumes: the cgroup of a pod.
type target interface {
	// key names the target; two sessions that find the same target share it.
	key() string
	// stop stops it. ours is false when it was stopped already by someone
	// else, whose business resuming it is.
	stop() (ours bool, err error)
	// stopped reports whether every task of it has stopped running.
	stopped() (bool, error)
	// resume lets it run again.
	resume() error
	// record is how a restarted driver resumes it (see Quiescer.Recover).
	record() heldRecord
}

// heldRecord is a stopped target as the journal keeps it.
type heldRecord struct {
	// Kind is "cgroup2" or "cgroup1"; "process" records were written by
	// drivers before 0.2, which stopped single processes too.
	Kind string `json:"kind"`
	// Dir is a cgroup's directory in the cgroup filesystem; Ino its inode
	// when it was frozen, so that a new cgroup of the same name is left
	// alone; Mark the token set on it as an extended attribute when the
	// driver froze it ("" where the cgroup filesystem takes none).
	Dir  string `json:"dir,omitempty"`
	Ino  uint64 `json:"ino,omitempty"`
	Mark string `json:"mark,omitempty"`
	// PID and Start name a process (legacy "process" records).
	PID   int    `json:"pid,omitempty"`
	Start uint64 `json:"start,omitempty"`
}

// freezeMarkAttr is the extended attribute that marks a cgroup the driver
// froze; its value is the token in the journal.
const freezeMarkAttr = "trusted.shutter.frozen"

// cgroupTarget freezes a cgroup: the freeze is invisible to its tasks and
// covers the children they fork. Version 2 uses cgroup.freeze and
// cgroup.events, version 1 the freezer controller's freezer.state.
type cgroupTarget struct {
	version int
	dir     string
	// ino and mark are set by a successful stop.
	ino  uint64
	mark string
}

func (c *cgroupTarget) key() string { return "cgroup" + strconv.Itoa(c.version) + ":" + c.dir }

func (c *cgroupTarget) files() (state, frozen, thawed string) {
	if c.version == 1 {
		return "freezer.state", "FROZEN", "THAWED"
	}
	return "cgroup.freeze", "1", "0"
}

// stop freezes the cgroup unless it is frozen already. Its inode and a
// fresh mark are taken first, for the journal (record).
func (c *cgroupTarget) stop() (bool, error) {
	file, freeze, thaw := c.files()
	var st unix.Stat_t
	if err := unix.Stat(c.dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil // the pod has gone
		}
		return false, fmt.Errorf("freeze cgroup: %w", err)
	}
	cur, err := os.ReadFile(filepath.Join(c.dir, file))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("freeze cgroup: %w", err)
	}
	if s := strings.TrimSpace(string(cur)); s != thaw && s != "0" {
		return false, nil
	}
	c.ino, c.mark = st.Ino, newMark()
	if unix.Setxattr(c.dir, freezeMarkAttr, []byte(c.mark), 0) != nil {
		c.mark = "" // a hierarchy without extended attributes
	}
	if err := os.WriteFile(filepath.Join(c.dir, file), []byte(freeze), 0); err != nil {
		return false, fmt.Errorf("freeze cgroup: %w", err)
	}
	return true, nil
}

func newMark() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (c *cgroupTarget) stopped() (bool, error) {
	if c.version == 1 {
		b, err := os.ReadFile(filepath.Join(c.dir, "freezer.state"))
		return strings.TrimSpace(string(b)) == "FROZEN", err
	}
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.events"))
	for _, line := range strings.Split(string(b), "\n") {
		if line == "frozen 1" {
			return true, nil
		}
	}
	return false, err
}

func (c *cgroupTarget) resume() error {
	err := thawIfOurs(c.record())
	if errors.Is(err, errNotOurs) {
		return nil
	}
	return err
}

func (c *cgroupTarget) record() heldRecord {
	return heldRecord{Kind: "cgroup" + strconv.Itoa(c.version), Dir: c.dir, Ino: c.ino, Mark: c.mark}
}

// errNotOurs says a journal's cgroup is no longer frozen by the driver:
// gone, replaced by a new cgroup of the same name, thawed, or marked by
// another freeze.
var errNotOurs = errors.New("not frozen by this driver any more")

// thawIfOurs thaws the cgroup r names if it is still the cgroup the driver
// froze (same inode, its mark) and still frozen, and removes the mark.
func thawIfOurs(r heldRecord) error {
	v, _ := strconv.Atoi(strings.TrimPrefix(r.Kind, "cgroup"))
	c := &cgroupTarget{version: v, dir: r.Dir}
	file, freeze, thaw := c.files()
	var st unix.Stat_t
	if err := unix.Stat(r.Dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return errNotOurs // gone, and its tasks with it
		}
		return fmt.Errorf("thaw cgroup %s: %w", r.Dir, err)
	}
	if r.Ino != 0 && st.Ino != r.Ino {
		return errNotOurs
	}
	if r.Mark != "" {
		buf := make([]byte, 64)
		n, err := unix.Getxattr(r.Dir, freezeMarkAttr, buf)
		if err != nil || string(buf[:n]) != r.Mark {
			return errNotOurs
		}
	}
	cur, err := os.ReadFile(filepath.Join(r.Dir, file))
	if err != nil {
		return fmt.Errorf("thaw cgroup %s: %w", r.Dir, err)
	}
	if s := strings.TrimSpace(string(cur)); s == freeze {
		if err := os.WriteFile(filepath.Join(r.Dir, file), []byte(thaw), 0); err != nil {
			return fmt.Errorf("thaw cgroup %s: %w", r.Dir, err)
		}
	}
	if r.Mark != "" {
		_ = unix.Removexattr(r.Dir, freezeMarkAttr)
	}
	return nil
}

// resumeRecord resumes what a journal record names, for a driver that
// restarted while it was stopped: a cgroup only while it is still frozen
// by the driver (thawIfOurs), a legacy process record's process only if it
// is still the one stopped.
func resumeRecord(proc string, r heldRecord) error {
	switch r.Kind {
	case "cgroup1", "cgroup2":
		if err := thawIfOurs(r); err != nil && !errors.Is(err, errNotOurs) {
			return err
		}
		return nil
	case "process":
		st, err := readProcStart(filepath.Join(proc, strconv.Itoa(r.PID), "stat"))
		if err != nil || st != r.Start {
			return nil // gone
		}
		if err := unix.Kill(r.PID, unix.SIGCONT); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("resume process %d: %w", r.PID, err)
		}
		return nil
	}
	return fmt.Errorf("unknown quiesce record kind %q", r.Kind)
}

// readProcStart returns the start time (clock ticks after boot) in a
// /proc/<pid>/stat file.
func readProcStart(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed %s", path)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("malformed %s", path)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// podUIDPattern is the form of a pod's UID.
var podUIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// PodOfTarget returns the UID of the pod a kubelet publish target belongs
// to: <kubelet>/pods/<uid>/volumes/... for a filesystem volume,
// <kubelet>/plugins/kubernetes.io/csi/volumeDevices/publish/<pv>/<uid> for
// a block volume.
func PodOfTarget(target string) (string, bool) {
	parts := strings.Split(filepath.Clean(target), "/")
	for i := 0; i+2 < len(parts); i++ {
		if parts[i] == "pods" && parts[i+2] == "volumes" && podUIDPattern.MatchString(parts[i+1]) {
			return parts[i+1], true
		}
	}
	n := len(parts)
	if n >= 4 && parts[n-4] == "volumeDevices" && parts[n-3] == "publish" && podUIDPattern.MatchString(parts[n-1]) {
		return parts[n-1], true
	}
	return "", false
}

// podCgroups finds the cgroups the kubelet made for pods, by pod UID, in
// the cgroup filesystem at root: the unified hierarchy (cgroup v2), or the
// folder holding the v1 hierarchies, of which the freezer is used. Only
// the kubelet's own layouts are searched, for both cgroup drivers:
// kubepods[/burstable|/besteffort]/pod<uid> (cgroupfs) and
// kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid_>.slice
// (systemd).
type podCgroups struct {
	root string
	// self is the driver's PID: a cgroup that holds it is never frozen.
	self int
}

// kubepodsParents are the folders pod cgroups live in, below the root.
var kubepodsParents = []string{
	"kubepods", "kubepods/burstable", "kubepods/besteffort",
	"kubepods.slice", "kubepods.slice/kubepods-burstable.slice", "kubepods.slice/kubepods-besteffort.slice",
}

// hierarchy returns the version and folder of the usable hierarchy.
func (p podCgroups) hierarchy() (int, string, error) {
	if _, err := os.Stat(filepath.Join(p.root, "cgroup.controllers")); err == nil {
		return 2, p.root, nil
	}
	if freezer := filepath.Join(p.root, "freezer"); dirExists(freezer) {
		return 1, freezer, nil
	}
	return 0, "", fmt.Errorf("no cgroup v2 hierarchy or v1 freezer at %s", p.root)
}

func dirExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// find returns the cgroups of the pods uids that exist; pods without one
// (ended, or on another node) are left out.
func (p podCgroups) find(uids []string) ([]target, error) {
	version, root, err := p.hierarchy()
	if err != nil {
		return nil, err
	}
	var out []target
	for _, uid := range uids {
		if dir, ok := p.podDir(root, uid); ok {
			out = append(out, &cgroupTarget{version: version, dir: dir})
		}
	}
	return out, nil
}

// podDir finds the cgroup folder of pod uid below root, unless it holds
// the driver itself.
func (p podCgroups) podDir(root, uid string) (string, bool) {
	if !podUIDPattern.MatchString(uid) {
		return "", false
	}
	for _, parent := range kubepodsParents {
		base := strings.TrimSuffix(filepath.Base(parent), ".slice")
		for _, name := range []string{"pod" + uid, base + "-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"} {
			dir := filepath.Join(root, parent, name)
			if dirExists(dir) && !holdsPID(dir, p.self) {
				return dir, true
			}
		}
	}
	return "", false
}

// holdsPID reports whether the cgroup at dir or a descendant holds pid.
func holdsPID(dir string, pid int) bool {
	found := false
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || found {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if f == strconv.Itoa(pid) {
				found = true
			}
		}
		return nil
	})
	return found
}
