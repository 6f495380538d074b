//go:build linux

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

// Loop devices: an image file made a block device, so that the kernel can
// mount the filesystem in it, and a block volume's file made a device
// node that a container runtime takes (mount.go's kernelMounter).
//
// Invariants:
//   - An image is attached to at most one loop device. Two devices over
//     one file would be two filesystems writing the same blocks. Before
//     attaching, every bound loop device is asked for its backing file
//     (device and inode); one found is used again. Callers hold the
//     volume's lock, and start-up runs alone.
//   - Images' devices are attached with autoclear: the kernel detaches one
//     as soon as nothing holds it (no mount, no open descriptor).
//     Unmounting a volume's last mount, or the death of the process between
//     attaching and mounting, therefore frees the device; nothing is leaked.
//   - A block volume's file has at most one read-write and one read-only
//     device, attached without autoclear (a bind of its node holds nothing
//     open): the node service detaches them (node.go). Detaching one still
//     open turns autoclear on instead; publishing again turns it off.

// loopControl is the loop driver's control device; tests may point it
// elsewhere.
var loopControl = "/dev/loop-control"

const (
	loopMajor = 7
	// loopAttachTries bounds retries when another process takes the free
	// device between asking for it and configuring it.
	loopAttachTries = 8
)

// loopDevice is an attached loop device: its node and its device number.
type loopDevice struct {
	path string
	rdev uint64
}

// attachLoop returns the loop device backed by the image at path, attaching
// a free one (with autoclear) when none is. The caller must mount or close
// the device soon: see the invariants.
func attachLoop(path string) (loopDevice, *os.File, error) {
	return attachLoopWith(path, unix.LO_FLAGS_AUTOCLEAR)
}

// attachLoopWith returns, open, the loop device backed by the file at path
// that is read-only as flags ask (unix.LO_FLAGS_READ_ONLY), attaching a
// free one with flags when there is none. One found gets flags'
// autoclear: a block volume's device that a detach left to go once
// closed stays when it is published again.
func attachLoopWith(path string, flags uint32) (loopDevice, *os.File, error) {
	readOnly := flags&unix.LO_FLAGS_READ_ONLY != 0
	mode := os.O_RDWR
	if readOnly {
		mode = os.O_RDONLY
	}
	img, err := os.OpenFile(path, mode|unix.O_CLOEXEC, 0)
	if err != nil {
		return loopDevice{}, nil, fmt.Errorf("open image: %w", err)
	}
	defer img.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(img.Fd()), &st); err != nil {
		return loopDevice{}, nil, fmt.Errorf("stat image: %w", err)
	}
	var found loopDevice
	var foundFile *os.File
	err = eachLoop(st.Dev, st.Ino, func(dev loopDevice, f *os.File, info *unix.LoopInfo64) error {
		if foundFile != nil || (info.Flags&unix.LO_FLAGS_READ_ONLY != 0) != readOnly {
			return nil
		}
		if err := keepAutoclear(f, info, flags); err != nil {
			return err
		}
		found, foundFile = dev, f
		return errKeepOpen
	})
	if err != nil || foundFile != nil {
		return found, foundFile, err
	}
	return attachFree(img, path, flags)
}

// keepAutoclear gives the loop device f, described by info, the autoclear
// flag of flags.
func keepAutoclear(f *os.File, info *unix.LoopInfo64, flags uint32) error {
	if info.Flags&unix.LO_FLAGS_AUTOCLEAR == flags&unix.LO_FLAGS_AUTOCLEAR {
		return nil
	}
	info.Flags = info.Flags&^unix.LO_FLAGS_AUTOCLEAR | flags&unix.LO_FLAGS_AUTOCLEAR
	if err := unix.IoctlLoopSetStatus64(int(f.Fd()), info); err != nil {
		return fmt.Errorf("set loop device flags: %w", err)
	}
	return nil
}

// attachFree attaches a free loop device to img (the file at path) with
// flags and returns it, open.
func attachFree(img *os.File, path string, flags uint32) (loopDevice, *os.File, error) {
	ctl, err := os.OpenFile(loopControl, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return loopDevice{}, nil, fmt.Errorf("open %s: %w", loopControl, err)
	}
	defer ctl.Close()
	for range loopAttachTries {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return loopDevice{}, nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev, f, err := openLoop(n)
		if err != nil {
			return loopDevice{}, nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = flags
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], filepath.Base(path))
		err = unix.IoctlLoopConfigure(int(f.Fd()), &cfg)
		if err == nil {
			return dev, f, nil
		}
		_ = f.Close()
		if !errors.Is(err, unix.EBUSY) {
			return loopDevice{}, nil, fmt.Errorf("attach %s: %w", dev.path, err)
		}
	}
	return loopDevice{}, nil, fmt.Errorf("attach image: no free loop device after %d tries", loopAttachTries)
}

// errKeepOpen, returned by eachLoop's fn, stops the walk and leaves the
// device's file open for fn's caller.
var errKeepOpen = errors.New("keep the loop device open")

// eachLoop calls fn with every bound loop device whose backing file is the
// inode ino on device dev, open, and its status, and closes it afterwards
// unless fn returns errKeepOpen.
func eachLoop(dev, ino uint64, fn func(loopDevice, *os.File, *unix.LoopInfo64) error) error {
	entries, err := os.ReadDir("/sys/block")
	if err != nil {
		return fmt.Errorf("list block devices: %w", err)
	}
	for _, e := range entries {
		n, ok := loopNumber(e.Name())
		if !ok {
			continue
		}
		if _, err := os.Stat(filepath.Join("/sys/block", e.Name(), "loop")); err != nil {
			continue // not bound
		}
		ld, f, err := openLoop(n)
		if errors.Is(err, fs.ErrPermission) {
			continue // not one this process attached
		}
		if err != nil {
			return err
		}
		info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
		if err != nil || info.Device != dev || info.Inode != ino {
			_ = f.Close()
			continue
		}
		err = fn(ld, f, info)
		if errors.Is(err, errKeepOpen) {
			return nil
		}
		_ = f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// eachLoopOf calls fn with every loop device backed by the file at path; a
// file that is gone has none.
func eachLoopOf(path string, fn func(*os.File, *unix.LoopInfo64) error) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("stat %s: %w", filepath.Base(path), err)
	}
	return eachLoop(st.Dev, st.Ino, func(_ loopDevice, f *os.File, info *unix.LoopInfo64) error { return fn(f, info) })
}

// findLoop returns, open, the bound loop device whose backing file is the
// inode ino on device dev, or no file when there is none.
func findLoop(dev, ino uint64) (loopDevice, *os.File, error) {
	var found loopDevice
	var foundFile *os.File
	err := eachLoop(dev, ino, func(ld loopDevice, f *os.File, _ *unix.LoopInfo64) error {
		found, foundFile = ld, f
		return errKeepOpen
	})
	return found, foundFile, err
}

// loopNumber parses "loop<N>".
func loopNumber(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "loop")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

// openLoop opens loop device n, creating its node when the /dev this
// process sees lacks it (a container's /dev is a copy made at its start).
func openLoop(n int) (loopDevice, *os.File, error) {
	path := fmt.Sprintf("/dev/loop%d", n)
	rdev := unix.Mkdev(loopMajor, uint32(n))
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if err := unix.Mknod(path, unix.S_IFBLK|0o660, int(rdev)); err != nil && !errors.Is(err, unix.EEXIST) {
			return loopDevice{}, nil, fmt.Errorf("create %s: %w", path, err)
		}
		f, err = os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return loopDevice{}, nil, fmt.Errorf("open loop device: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK || st.Rdev != rdev {
		_ = f.Close()
		return loopDevice{}, nil, fmt.Errorf("%s is not loop device %d (%v)", path, n, err)
	}
	return loopDevice{path: path, rdev: rdev}, f, nil
}

// loopOfImage returns the loop device backed by the image at path, open,
// or an error when none is.
func loopOfImage(path string) (loopDevice, *os.File, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return loopDevice{}, nil, fmt.Errorf("stat image: %w", err)
	}
	dev, f, err := findLoop(st.Dev, st.Ino)
	if err == nil && f == nil {
		err = fmt.Errorf("image %s is not attached to a loop device", filepath.Base(path))
	}
	return dev, f, err
}

// checkLoopSupport reports why loop devices cannot be attached here, or
// nil.
func checkLoopSupport() error {
	if os.Geteuid() != 0 {
		return errors.New("attaching loop devices needs root")
	}
	ctl, err := os.OpenFile(loopControl, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loop devices are unavailable: %w", err)
	}
	_ = ctl.Close()
	fss, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return fmt.Errorf("read /proc/filesystems: %w", err)
	}
	for _, line := range strings.Split(string(fss), "\n") {
		if strings.TrimSpace(line) == "ext4" {
			return nil
		}
	}
	return errors.New("the kernel does not offer ext4 (not in /proc/filesystems)")
}
