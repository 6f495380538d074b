package cluster

// What the local node changes on the host outside its state folder, and how it is put back:
//
//   - cgroups: containerd, kubelet, every shim and every pod live in one cgroup subtree per node,
//     /<nodeCgroup> in every mounted hierarchy (kubelet's cgroupRoot). Stopping kills whatever is
//     left in it and removes it, deepest first.
//   - mounts: kubelet's root folder (which it makes rshared), pods' volumes and containers'
//     root filesystems are mounted under the node's folder; stopping detaches them, deepest first.
//   - sysctls: kubelet sets six kernel sysctls at start. The values found before the first node
//     of the machine started are kept in sysctlRecord with the state folders of the nodes that
//     run; the last node to stop writes them back and removes the record.
//
// Each step works from what the host shows (mount table, cgroup folders, the record file), not
// from memory, so a stop after a crashed run cleans just as well, and a second stop does nothing.

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shutter-csi/shutter/pkg/mountinfo"
)

// kubeletSysctls are the kernel settings kubelet rewrites when it starts
// (pkg/kubelet/cm setupKernelTunables).
var kubeletSysctls = []string{
	"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
}

// sysctlRecord is where the values before the first running node are kept (a tmpfs, so a reboot,
// which resets the sysctls too, forgets it). Its folder is locked while the record changes.
var sysctlRecord = "/run/shutter-node-sysctls.json"

// nodeCgroup names the cgroup of the node whose state folder is dir: stable for the folder, so a
// later stop finds it, and distinct for every folder, so that nodes can run side by side.
func nodeCgroup(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return fmt.Sprintf("shutter-node-%x", sum[:5])
}

// cgroupMounts lists the mount points of every cgroup hierarchy (v1 and v2).
func cgroupMounts() ([]string, error) {
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if m.FSType == "cgroup" || m.FSType == "cgroup2" {
			out = append(out, m.MountPoint)
		}
	}
	return out, nil
}

// createCgroup makes the node's cgroup in every hierarchy. A new cpuset cgroup starts without
// CPUs and memory nodes, so it gets its parent's.
func createCgroup(name string) error {
	roots, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, root := range roots {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			data, err := os.ReadFile(filepath.Join(root, file))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(dir, file), err)
			}
		}
	}
	return nil
}

// joinCgroup moves pid into the child group sub of the node's cgroup in every hierarchy.
func joinCgroup(name, sub string, pid int) error {
	roots, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, root := range roots {
		dir := filepath.Join(root, name, sub)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			if data, err := os.ReadFile(filepath.Join(root, name, file)); err == nil {
				_ = os.WriteFile(filepath.Join(dir, file), data, 0o644)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("move %d into %s: %w", pid, dir, err)
		}
	}
	return nil
}

// removeCgroup kills every process left in the node's cgroup subtree and removes the subtree
// from every hierarchy. It returns an error if a cgroup could not be removed.
func removeCgroup(name string) error {
	roots, err := cgroupMounts()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(stopGrace)
	for {
		pids := cgroupPids(roots, name)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes %v survive SIGKILL", name, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var errs []error
	for _, root := range roots {
		errs = append(errs, removeTree(filepath.Join(root, name)))
	}
	return errors.Join(errs...)
}

// cgroupPids lists the processes in the subtree name of every hierarchy.
func cgroupPids(roots []string, name string) []int {
	var pids []int
	for _, root := range roots {
		_ = filepath.WalkDir(filepath.Join(root, name), func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			data, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// removeTree removes the cgroup folders under and including dir, deepest first (a cgroup folder
// is removed with rmdir; its control files go with it).
func removeTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("remove cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}

// mountsUnder lists the mount points at or under dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
			out = append(out, m.MountPoint)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out, nil
}

// unmountAll detaches every mount at or under dir. Mounts stacked on one point and copies made by
// shared propagation show up again after a round; it repeats until the table holds none.
func unmountAll(dir string) error {
	for round := 0; ; round++ {
		points, err := mountsUnder(dir)
		if err != nil || len(points) == 0 {
			return err
		}
		if round == 20 {
			return fmt.Errorf("mounts under %s survive unmounting: %v", dir, points)
		}
		for _, p := range points {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil &&
				!errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				return fmt.Errorf("unmount %s: %w", p, err)
			}
		}
	}
}

// sysctlState is the content of sysctlRecord.
type sysctlState struct {
	// Values before the first node started, by sysctl name.
	Values map[string]string `json:"values"`
	// Holders are the state folders of the nodes started since.
	Holders []string `json:"holders"`
}

// procSys is where sysctls are read and written (a variable for tests).
var procSys = "/proc/sys"

func sysctlPath(name string) string {
	return filepath.Join(procSys, strings.ReplaceAll(name, ".", "/"))
}

// holdSysctls records the kubelet sysctls' values unless the record holds them already, and adds
// dir to the record's holders. Call it before kubelet starts, once containerd runs. Holders whose
// node died without stopping (a killed test binary) are cleaned up and dropped on the way; their
// record of the values stays, as kubelet has changed the values since.
func holdSysctls(dir string) error {
	return withSysctlRecord(func(st *sysctlState) error {
		if err := dropDeadHolders(st, dir); err != nil {
			return err
		}
		if st.Values == nil {
			st.Values = map[string]string{}
			for _, name := range kubeletSysctls {
				data, err := os.ReadFile(sysctlPath(name))
				if err != nil {
					return err
				}
				st.Values[name] = strings.TrimSpace(string(data))
			}
		}
		if !slices.Contains(st.Holders, dir) {
			st.Holders = append(st.Holders, dir)
		}
		return nil
	})
}

// releaseSysctls drops dir from the record's holders (and holders whose node died without
// stopping, after cleaning up after them); when none is left it writes the recorded values back
// and removes the record.
func releaseSysctls(dir string) error {
	return withSysctlRecord(func(st *sysctlState) error {
		st.Holders = slices.DeleteFunc(st.Holders, func(h string) bool { return h == dir })
		if err := dropDeadHolders(st, ""); err != nil {
			return err
		}
		if len(st.Holders) > 0 || st.Values == nil {
			return nil
		}
		for name, value := range st.Values {
			if err := os.WriteFile(sysctlPath(name), []byte(value), 0o644); err != nil {
				return fmt.Errorf("restore %s=%s: %w", name, value, err)
			}
		}
		st.Values = nil
		return nil
	})
}

// dropDeadHolders cleans up after every holder but self whose containerd no longer runs in its
// node's cgroup, and drops it from the record.
func dropDeadHolders(st *sysctlState, self string) error {
	var errs []error
	st.Holders = slices.DeleteFunc(st.Holders, func(h string) bool {
		if h == self || isNodeAlive(h) {
			return false
		}
		err := cleanHost(h)
		errs = append(errs, err)
		return err == nil
	})
	return errors.Join(errs...)
}

// isNodeAlive is nodeAlive (a variable for tests).
var isNodeAlive = nodeAlive

// nodeAlive tells whether the containerd of the node with state folder dir runs, in the node's
// cgroup (a pid file of a dead node may name an unrelated process by now).
func nodeAlive(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "containerd.pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return false
	}
	cgroups, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	return err == nil && strings.Contains(string(cgroups), "/"+nodeCgroup(dir)+"/")
}

// withSysctlRecord runs change on the record under an exclusive lock and writes the result back
// (an empty record is removed).
func withSysctlRecord(change func(*sysctlState) error) error {
	lock, err := os.Open(filepath.Dir(sysctlRecord))
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	var st sysctlState
	data, err := os.ReadFile(sysctlRecord)
	if err == nil {
		if err := json.Unmarshal(data, &st); err != nil {
			return fmt.Errorf("%s: %w", sysctlRecord, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := change(&st); err != nil {
		return err
	}
	if st.Values == nil && len(st.Holders) == 0 {
		err := os.Remove(sysctlRecord)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	data, err = json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := sysctlRecord + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, sysctlRecord)
}
