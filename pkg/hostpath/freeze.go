package hostpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// target is one thing quiescing stops and resumes: a cgroup it freezes or a
// process it stops with SIGSTOP.
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
	// record is how a restarted driver resumes it (see quiescer.recover).
	record() heldRecord
}

// heldRecord is a stopped target as the journal keeps it.
type heldRecord struct {
	// Kind is "cgroup2", "cgroup1" or "process".
	Kind string `json:"kind"`
	// Dir is a cgroup's directory in the cgroup filesystem.
	Dir string `json:"dir,omitempty"`
	// PID and Start name a process.
	PID   int    `json:"pid,omitempty"`
	Start uint64 `json:"start,omitempty"`
}

// cgroupTarget freezes a cgroup: the freeze is invisible to its tasks and
// covers the children they fork. Version 2 uses cgroup.freeze and
// cgroup.events, version 1 the freezer controller's freezer.state.
type cgroupTarget struct {
	version int
	dir     string
}

func (c cgroupTarget) key() string { return "cgroup" + strconv.Itoa(c.version) + ":" + c.dir }

func (c cgroupTarget) stop() (bool, error) {
	file, freeze := "cgroup.freeze", "1"
	if c.version == 1 {
		file, freeze = "freezer.state", "FROZEN"
	}
	cur, err := os.ReadFile(filepath.Join(c.dir, file))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // removed since the scan, with its tasks
	}
	if err != nil {
		return false, fmt.Errorf("freeze cgroup: %w", err)
	}
	if s := strings.TrimSpace(string(cur)); s != "0" && s != "THAWED" {
		return false, nil
	}
	if err := os.WriteFile(filepath.Join(c.dir, file), []byte(freeze), 0); err != nil {
		return false, fmt.Errorf("freeze cgroup: %w", err)
	}
	return true, nil
}

func (c cgroupTarget) stopped() (bool, error) {
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

func (c cgroupTarget) resume() error {
	file, thaw := "cgroup.freeze", "0"
	if c.version == 1 {
		file, thaw = "freezer.state", "THAWED"
	}
	err := os.WriteFile(filepath.Join(c.dir, file), []byte(thaw), 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // the cgroup is gone, and its tasks with it
	}
	return err
}

func (c cgroupTarget) record() heldRecord {
	return heldRecord{Kind: "cgroup" + strconv.Itoa(c.version), Dir: c.dir}
}

// signalTarget stops one process with SIGSTOP and resumes it with SIGCONT,
// through a pidfd, so a signal never reaches another process that reused
// the PID.
type signalTarget struct {
	proc  string
	pid   int
	start uint64
	// pidfd is open from a successful stop until resume.
	pidfd int
}

func newSignalTarget(proc string, p process) *signalTarget {
	return &signalTarget{proc: proc, pid: p.PID, start: p.Start, pidfd: -1}
}

func (s *signalTarget) key() string { return fmt.Sprintf("process:%d:%d", s.pid, s.start) }

func (s *signalTarget) stop() (bool, error) {
	fd, err := unix.PidfdOpen(s.pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return false, nil // exited
	}
	if err != nil {
		return false, fmt.Errorf("open pidfd of %d: %w", s.pid, err)
	}
	// The pidfd was opened after the scan: the process it names must
	// still be the one the scan found.
	st, err := readProcStat(filepath.Join(s.proc, strconv.Itoa(s.pid), "stat"))
	if err != nil || st.start != s.start || st.state == 'T' || st.state == 't' {
		_ = unix.Close(fd)
		return false, nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGSTOP, nil, 0); err != nil {
		_ = unix.Close(fd)
		if errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("stop process %d: %w", s.pid, err)
	}
	s.pidfd = fd
	return true, nil
}

// stopped reports whether every thread is stopped, traced or dead. A
// thread in the middle of a write finishes it first.
func (s *signalTarget) stopped() (bool, error) {
	tasks, err := os.ReadDir(filepath.Join(s.proc, strconv.Itoa(s.pid), "task"))
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	for _, t := range tasks {
		st, err := readProcStat(filepath.Join(s.proc, strconv.Itoa(s.pid), "task", t.Name(), "stat"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, err
		}
		if st.start != s.start && t.Name() == strconv.Itoa(s.pid) {
			return true, nil // exited, PID reused
		}
		if !strings.ContainsRune("TtZX", rune(st.state)) {
			return false, nil
		}
	}
	return true, nil
}

func (s *signalTarget) resume() error {
	fd := s.pidfd
	if fd < 0 {
		return nil
	}
	s.pidfd = -1
	defer func() { _ = unix.Close(fd) }()
	if err := unix.PidfdSendSignal(fd, unix.SIGCONT, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("resume process %d: %w", s.pid, err)
	}
	return nil
}

func (s *signalTarget) record() heldRecord {
	return heldRecord{Kind: "process", PID: s.pid, Start: s.start}
}

// resumeRecord resumes what a journal record names, for a driver that
// restarted while it was stopped. A cgroup found frozen is thawed; a
// process is sent SIGCONT only if it is still the one stopped.
func resumeRecord(proc string, r heldRecord) error {
	switch r.Kind {
	case "cgroup1", "cgroup2":
		v, _ := strconv.Atoi(strings.TrimPrefix(r.Kind, "cgroup"))
		return cgroupTarget{version: v, dir: r.Dir}.resume()
	case "process":
		st, err := readProcStat(filepath.Join(proc, strconv.Itoa(r.PID), "stat"))
		if err != nil || st.start != r.Start {
			return nil // gone
		}
		if err := unix.Kill(r.PID, unix.SIGCONT); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("resume process %d: %w", r.PID, err)
		}
		return nil
	}
	return fmt.Errorf("unknown quiesce record kind %q", r.Kind)
}

// cgroupPlanner chooses how to stop each user: its own cgroup is frozen
// when that cgroup (with its descendants, which a freeze covers too) holds
// nothing but users, is not a hierarchy's root and holds neither the driver
// nor PID 1; otherwise the process gets SIGSTOP. The unified hierarchy is
// preferred to the v1 freezer.
type cgroupPlanner struct {
	proc string
	// hier are the usable hierarchies: index 0 unified, 1 the v1 freezer.
	hier [2]hierarchy
}

// hierarchy is a mounted cgroup hierarchy and the cgroups it must never
// freeze.
type hierarchy struct {
	version int
	mount   *mountEntry
	protect []string
}

// newCgroupPlanner finds the cgroup mounts the driver sees and the cgroups
// of the driver and PID 1. A hierarchy whose protected cgroups cannot be
// read is not used.
func newCgroupPlanner(proc string) cgroupPlanner {
	p := cgroupPlanner{proc: proc, hier: [2]hierarchy{{version: 2}, {version: 1}}}
	mounts, err := readMountInfo(filepath.Join(proc, "self", "mountinfo"))
	if err != nil {
		return p
	}
	for i, m := range mounts {
		switch {
		case m.FSType == "cgroup2":
			p.hier[0].mount = &mounts[i]
		case m.FSType == "cgroup" && hasController(m.SuperOptions, "freezer"):
			p.hier[1].mount = &mounts[i]
		}
	}
	self, err := os.Readlink(filepath.Join(proc, "self"))
	if err != nil {
		return cgroupPlanner{proc: proc}
	}
	selfPID, _ := strconv.Atoi(self)
	for _, pid := range []int{selfPID, 1} {
		unified, freezer, err := procScan{proc: proc}.cgroups(pid)
		if err != nil || unified == "" {
			p.hier[0].mount = nil
		}
		if err != nil || freezer == "" {
			p.hier[1].mount = nil
		}
		p.hier[0].protect = append(p.hier[0].protect, unified)
		p.hier[1].protect = append(p.hier[1].protect, freezer)
	}
	return p
}

// plan returns the targets that stop every process in users.
func (p cgroupPlanner) plan(users []process) []target {
	isUser := map[int]bool{}
	for _, u := range users {
		isUser[u.PID] = true
	}
	eligible := map[string]bool{}
	var out []target
	seen := map[string]bool{}
	for _, u := range users {
		var t target = newSignalTarget(p.proc, u)
		for i, path := range []string{u.Cgroup2, u.Freezer} {
			h := p.hier[i]
			dir, ok := h.dir(path)
			if !ok {
				continue
			}
			ok, known := eligible[dir]
			if !known {
				ok = subtreeOnly(dir, isUser)
				eligible[dir] = ok
			}
			if ok {
				t = cgroupTarget{version: h.version, dir: dir}
				break
			}
		}
		if !seen[t.key()] {
			seen[t.key()] = true
			out = append(out, t)
		}
	}
	return out
}

// dir is the directory of cgroup path in the hierarchy, if the hierarchy
// is usable and the cgroup may be frozen.
func (h hierarchy) dir(path string) (string, bool) {
	// A cgroup outside the driver's cgroup namespace shows as "/../x".
	if h.mount == nil || path == "/" || !filepath.IsAbs(path) || filepath.Clean(path) != path || strings.Contains(path, "/..") {
		return "", false
	}
	for _, q := range h.protect {
		if pathWithin(q, path) {
			return "", false
		}
	}
	if !pathWithin(path, h.mount.Root) || path == h.mount.Root {
		return "", false
	}
	rel, err := filepath.Rel(h.mount.Root, path)
	if err != nil {
		return "", false
	}
	return filepath.Join(h.mount.MountPoint, rel), true
}

// subtreeOnly reports whether every process in the cgroup at dir and its
// descendants is in pids (and there is at least one).
func subtreeOnly(dir string, pids map[int]bool) bool {
	found := false
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil || !pids[pid] {
				return errNotOnlyUsers
			}
			found = true
		}
		return nil
	})
	return err == nil && found
}

var errNotOnlyUsers = errors.New("cgroup holds other processes")
