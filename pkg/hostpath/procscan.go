package hostpath

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// process is a process found using a member volume.
type process struct {
	PID int
	// Start is the process's start time in clock ticks after boot; with
	// PID it names one process even after the PID is reused.
	Start uint64
	// State is the state letter of /proc/<pid>/stat ('T' is stopped).
	State byte
	// Cgroup2 and Freezer are its cgroup paths in the unified hierarchy and
	// in the cgroup v1 freezer hierarchy, "" where it has none.
	Cgroup2, Freezer string
}

// procScan finds the processes that use volumes, from a procfs mount.
//
// A process uses a volume when it runs in a mount namespace other than the
// driver's and the host's and that namespace mounts the volume or something
// inside it (how a pod sees a published volume), or when it has its working
// directory, root or an open file inside the volume. Processes in the
// driver's or the host's namespace, the driver and its ancestors are never
// users: every one of them sees the whole data folder.
type procScan struct {
	// proc is where procfs is mounted; tests point it at a fake tree.
	proc string
	// files enables the working directory, root and open file check.
	files bool
}

// member is a volume's data as the scan matches it.
type member struct {
	loc      fsLocation
	dev, ino uint64
	dir      bool
	// published are the mount points of the member in the driver's and
	// the host's namespaces: staging and publish targets.
	published []string
}

// scanContext is what one scan excludes and looks for.
type scanContext struct {
	members    []member
	devs       map[uint64]bool
	excludedNS map[string]bool
	excluded   map[int]bool
	// nsUses caches the verdict on each mount namespace's mounts.
	nsUses map[string]nsVerdict
	// inside caches which directories lie inside a member.
	inside map[devIno]bool
}

// nsVerdict is how a mount namespace's mounts relate to the members.
type nsVerdict uint8

const (
	// nsApart: no mount shows a member or anything above one.
	nsApart nsVerdict = iota
	// nsReaches: a mount shows a folder above a member (a host folder
	// mounted into a privileged pod): its processes' files are checked.
	nsReaches
	// nsMounts: a mount shows a member or something inside one.
	nsMounts
)

type devIno struct{ dev, ino uint64 }

// users lists the processes that use any of paths.
func (s procScan) users(paths []string) ([]process, error) {
	c, err := s.context(paths)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(s.proc)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || c.excluded[pid] || !s.uses(c, pid) {
			continue
		}
		p, err := s.describe(pid)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			continue // exited meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// context locates the members and works out what the scan must skip.
func (s procScan) context(paths []string) (*scanContext, error) {
	self, err := os.Readlink(filepath.Join(s.proc, "self"))
	if err != nil {
		return nil, fmt.Errorf("find own process: %w", err)
	}
	selfPID, err := strconv.Atoi(self)
	if err != nil {
		return nil, fmt.Errorf("find own process: %q is no PID", self)
	}
	mounts, err := readMountInfo(filepath.Join(s.proc, self, "mountinfo"))
	if err != nil {
		return nil, fmt.Errorf("read own mounts: %w", err)
	}
	c := &scanContext{devs: map[uint64]bool{}, excludedNS: map[string]bool{}, excluded: map[int]bool{1: true},
		nsUses: map[string]nsVerdict{}, inside: map[devIno]bool{}}
	for _, p := range paths {
		m, err := locateMember(mounts, p)
		if err != nil {
			return nil, err
		}
		c.members = append(c.members, m)
		c.devs[m.dev] = true
	}
	for pid := selfPID; pid > 0 && !c.excluded[pid]; {
		c.excluded[pid] = true
		if pid, err = s.parent(pid); err != nil {
			return nil, fmt.Errorf("find the driver's ancestors: %w", err)
		}
	}
	own, err := os.Readlink(filepath.Join(s.proc, self, "ns", "mnt"))
	if err != nil {
		return nil, fmt.Errorf("read own mount namespace: %w", err)
	}
	host, hostPID, err := s.hostNS()
	if err != nil {
		return nil, err
	}
	c.excludedNS[own], c.excludedNS[host] = true, true
	hostMounts, _ := readMountInfo(filepath.Join(s.proc, strconv.Itoa(hostPID), "mountinfo"))
	for i := range c.members {
		c.members[i].published = publishedAt(slices.Concat(mounts, hostMounts), c.members[i].loc)
	}
	return c, nil
}

// publishedAt lists where mounts show loc or something inside it.
func publishedAt(mounts []mountEntry, loc fsLocation) []string {
	var out []string
	for _, m := range mounts {
		if mountsOf([]mountEntry{m}, loc, nil) && m.MountPoint != "/" {
			out = append(out, m.MountPoint)
		}
	}
	return out
}

// locateMember resolves a volume's data path to what the scan matches.
func locateMember(mounts []mountEntry, path string) (member, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return member{}, fmt.Errorf("resolve volume path: %w", err)
	}
	loc, err := locate(mounts, real)
	if err != nil {
		return member{}, err
	}
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		return member{}, fmt.Errorf("stat volume: %w", err)
	}
	return member{loc: loc, dev: st.Dev, ino: st.Ino, dir: st.Mode&unix.S_IFMT == unix.S_IFDIR}, nil
}

// hostNS is the host's mount namespace and a process in it: PID 1, or
// where PID 1 cannot be inspected, the kernel threads' parent (kthreadd,
// PID 2), whose namespace is the initial one too.
func (s procScan) hostNS() (string, int, error) {
	if ns, err := os.Readlink(filepath.Join(s.proc, "1", "ns", "mnt")); err == nil {
		return ns, 1, nil
	}
	st, err := s.stat(2)
	if err == nil && st.ppid == 0 && st.flags&pfKthread != 0 {
		if ns, err := os.Readlink(filepath.Join(s.proc, "2", "ns", "mnt")); err == nil {
			return ns, 2, nil
		}
	}
	return "", 0, errors.New("cannot tell the host's mount namespace: neither PID 1 nor kthreadd can be inspected")
}

// pfKthread is the PF_KTHREAD bit of the flags in /proc/<pid>/stat.
const pfKthread = 0x00200000

// uses reports whether process pid uses a member; a process that cannot be
// inspected (exited, or not ours to see) does not.
func (s procScan) uses(c *scanContext, pid int) bool {
	dir := filepath.Join(s.proc, strconv.Itoa(pid))
	ns, err := os.Readlink(filepath.Join(dir, "ns", "mnt"))
	if err != nil || c.excludedNS[ns] {
		return false
	}
	v, known := c.nsUses[ns]
	if !known {
		mounts, err := readMountInfo(filepath.Join(dir, "mountinfo"))
		if err != nil {
			return false
		}
		for _, m := range c.members {
			switch {
			case mountsOf(mounts, m.loc, m.published):
				v = nsMounts
			case v == nsApart && reaches(mounts, m.loc):
				v = nsReaches
			}
		}
		c.nsUses[ns] = v
	}
	return v == nsMounts || v == nsReaches && s.files && s.usesByFiles(c, dir)
}

// usesByFiles reports whether the process's working directory, root or an
// open file lies inside a member. Only files on a member's device are
// looked at: statx with AT_STATX_DONT_SYNC never waits for a network
// filesystem, and a directory is then climbed with ".." until the device
// changes. An open file whose mount has gone from the namespace (lazily
// unmounted) or that came over a socket is not found.
func (s procScan) usesByFiles(c *scanContext, dir string) bool {
	links := []string{filepath.Join(dir, "cwd"), filepath.Join(dir, "root")}
	fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
	for _, fd := range fds {
		links = append(links, filepath.Join(dir, "fd", fd.Name()))
	}
	for _, link := range links {
		var st unix.Statx_t
		if unix.Statx(unix.AT_FDCWD, link, unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE|unix.STATX_INO, &st) != nil {
			continue
		}
		dev := unix.Mkdev(st.Dev_major, st.Dev_minor)
		if !c.devs[dev] {
			continue
		}
		if c.isMember(dev, st.Ino) {
			return true
		}
		start := link
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			// A file has no "..": climb from its directory, found by
			// its path through the process's own root.
			target, err := os.Readlink(link)
			if err != nil || !strings.HasPrefix(target, "/") || strings.HasSuffix(target, " (deleted)") {
				continue
			}
			start = filepath.Join(dir, "root", filepath.Dir(target))
		}
		if c.insideMember(start) {
			return true
		}
	}
	return false
}

// isMember reports whether dev and ino are a member's top directory or file.
func (c *scanContext) isMember(dev, ino uint64) bool {
	for _, m := range c.members {
		if m.dev == dev && m.ino == ino {
			return true
		}
	}
	return false
}

// insideMember climbs from directory path through ".." and reports whether
// it meets a member's top directory before leaving the members' devices.
// Every directory it passes gets the same answer, so it is cached.
func (c *scanContext) insideMember(path string) bool {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer func() { _ = unix.Close(fd) }()
	var passed []devIno
	verdict := false
	for range 256 {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || !c.devs[st.Dev] {
			break
		}
		d := devIno{st.Dev, st.Ino}
		if known, ok := c.inside[d]; ok {
			verdict = known
			break
		}
		if len(passed) > 0 && passed[len(passed)-1] == d {
			break // the root: ".." is itself
		}
		passed = append(passed, d)
		if c.isMember(st.Dev, st.Ino) {
			verdict = true
			break
		}
		up, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		_ = unix.Close(fd)
		fd = up
	}
	for _, d := range passed {
		c.inside[d] = verdict
	}
	return verdict
}

// describe reads what quiescing needs to know about process pid.
func (s procScan) describe(pid int) (process, error) {
	st, err := s.stat(pid)
	if err != nil {
		return process{}, err
	}
	p := process{PID: pid, Start: st.start, State: st.state}
	p.Cgroup2, p.Freezer, err = s.cgroups(pid)
	return p, err
}

// procStat holds the fields of /proc/<pid>/stat the scan uses.
type procStat struct {
	state byte
	ppid  int
	flags uint64
	start uint64
}

// stat parses /proc/<pid>/stat (or .../task/<tid>/stat with a task path).
func (s procScan) stat(pid int) (procStat, error) {
	return readProcStat(filepath.Join(s.proc, strconv.Itoa(pid), "stat"))
}

func readProcStat(path string) (procStat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return procStat{}, err
	}
	// The command name may hold spaces and parentheses: fields start
	// after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("malformed %s", path)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("malformed %s", path)
	}
	var st procStat
	st.state = f[0][0]
	st.ppid, err = strconv.Atoi(f[1])
	if err == nil {
		st.flags, err = strconv.ParseUint(f[6], 10, 64)
	}
	if err == nil {
		st.start, err = strconv.ParseUint(f[19], 10, 64)
	}
	if err != nil {
		return procStat{}, fmt.Errorf("malformed %s: %w", path, err)
	}
	return st, nil
}

// parent returns the parent PID of pid, 0 for the top of the tree.
func (s procScan) parent(pid int) (int, error) {
	st, err := s.stat(pid)
	return st.ppid, err
}

// cgroups reads a process's unified (v2) and v1 freezer cgroup paths.
func (s procScan) cgroups(pid int) (unified, freezer string, err error) {
	f, err := os.Open(filepath.Join(s.proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			unified = parts[2]
		case hasController(parts[1], "freezer"):
			freezer = parts[2]
		}
	}
	return unified, freezer, sc.Err()
}

// hasController reports whether a comma-separated controller list names c.
func hasController(list, c string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == c {
			return true
		}
	}
	return false
}
