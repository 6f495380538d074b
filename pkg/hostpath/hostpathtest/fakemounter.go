//go:build linux

// Package hostpathtest holds test doubles of the hostpath driver's kernel
// work: FakeMounter, which keeps mounter.Interface's contract in memory so
// that the node service's logic is tested as any user. It imports nothing
// of package hostpath, whose own tests use it.
package hostpathtest

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shutter-csi/shutter/pkg/hostpath/mounter"
)

// Mount is one mount FakeMounter made.
type Mount struct {
	Source string
	Flags  uintptr
}

// loopKey identifies a loop device: its backing file (device and inode, as
// the kernel keeps it) and whether it is read-only.
type loopKey struct {
	dev, ino uint64
	readOnly bool
}

// FakeMounter is an in-memory mounter.Interface. Like the kernel it refuses
// a bind onto a target that does not exist or from a source that does not
// (a path, or a loop device it attached), and a loop device for a file that
// does not exist; it matches loop devices to files by inode, so that a
// renamed file keeps its devices. The zero value is ready.
type FakeMounter struct {
	mu      sync.Mutex
	mounts  map[string][]Mount
	loops   map[loopKey]string
	next    int
	resized []string
	synced  []string
}

var _ mounter.Interface = (*FakeMounter)(nil)

// Bind records a mount of source at target, stacked on what is there.
func (m *FakeMounter) Bind(source, target string, flags uintptr) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := os.Lstat(target); err != nil {
		return fmt.Errorf("bind mount: %w", err)
	}
	if !m.isLoop(source) {
		if _, err := os.Lstat(source); err != nil {
			return fmt.Errorf("bind mount: %w", err)
		}
	}
	if flags&^(unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV) != 0 {
		return fmt.Errorf("remount with flags %#x: %w", flags, unix.EINVAL)
	}
	if m.mounts == nil {
		m.mounts = map[string][]Mount{}
	}
	m.mounts[target] = append(m.mounts[target], Mount{Source: source, Flags: flags})
	return nil
}

func (m *FakeMounter) isLoop(path string) bool {
	for _, dev := range m.loops {
		if dev == path {
			return true
		}
	}
	return false
}

// Unmount removes every mount at target.
func (m *FakeMounter) Unmount(target string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.mounts, target)
	return nil
}

// IsMountPoint reports whether a mount is at path.
func (m *FakeMounter) IsMountPoint(path string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mounts[path]) > 0, nil
}

// AttachLoop returns the fake device node of the file at path, read-only
// or not, making one when there is none.
func (m *FakeMounter) AttachLoop(path string, readOnly bool) (string, error) {
	k, err := keyOf(path, readOnly)
	if err != nil {
		return "", fmt.Errorf("open image: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if dev, ok := m.loops[k]; ok {
		return dev, nil
	}
	if m.loops == nil {
		m.loops = map[loopKey]string{}
	}
	m.loops[k] = fmt.Sprintf("/dev/fakeloop%d", m.next)
	m.next++
	return m.loops[k], nil
}

// DetachLoop forgets the device of the file at path, if any.
func (m *FakeMounter) DetachLoop(path string, readOnly bool) error {
	k, err := keyOf(path, readOnly)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.loops, k)
	return nil
}

// ResizeLoops records that the devices of path were told its size.
func (m *FakeMounter) ResizeLoops(path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resized = append(m.resized, path)
	return nil
}

func keyOf(path string, readOnly bool) (loopKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return loopKey{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return loopKey{}, &fs.PathError{Op: "attach", Path: path, Err: unix.EINVAL}
	}
	return loopKey{dev: st.Dev, ino: st.Ino, readOnly: readOnly}, nil
}

// SyncLoops records that the devices of path were flushed.
func (m *FakeMounter) SyncLoops(path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.synced = append(m.synced, path)
	return nil
}

// Synced returns the paths SyncLoops was called with, in order.
func (m *FakeMounter) Synced() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.synced)
}

// Mounted returns the mounts at target, the topmost last.
func (m *FakeMounter) Mounted(target string) []Mount {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.mounts[target])
}

// Loops returns the device nodes of the attached loop devices, sorted.
func (m *FakeMounter) Loops() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, dev := range m.loops {
		out = append(out, dev)
	}
	slices.Sort(out)
	return out
}

// Resized returns the paths ResizeLoops was called with, in order.
func (m *FakeMounter) Resized() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.resized)
}
