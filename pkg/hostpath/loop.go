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
// mount the filesystem in it.
//
// Invariants:
//   - An image is attached to at most one loop device. Two devices over
//     one file would be two filesystems writing the same blocks. Before
//     attaching, every bound loop device is asked for its backing file
//     (device and inode); one found is used again. Callers hold the
//     volume's lock, and start-up runs alone.
//   - Devices are attached with autoclear: the kernel detaches one as soon
//     as nothing holds it (no mount, no open descriptor). Unmounting a
//     volume's last mount, or the death of the process between attaching
//     and mounting, therefore frees the device; nothing is leaked.

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
	img, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return loopDevice{}, nil, fmt.Errorf("open image: %w", err)
	}
	defer img.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(img.Fd()), &st); err != nil {
		return loopDevice{}, nil, fmt.Errorf("stat image: %w", err)
	}
	if dev, f, err := findLoop(st.Dev, st.Ino); err != nil || f != nil {
		return dev, f, err
	}
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
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
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

// findLoop returns, open, the bound loop device whose backing file is the
// inode ino on device dev, or no file when there is none.
func findLoop(dev, ino uint64) (loopDevice, *os.File, error) {
	entries, err := os.ReadDir("/sys/block")
	if err != nil {
		return loopDevice{}, nil, fmt.Errorf("list block devices: %w", err)
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
		if err != nil {
			return loopDevice{}, nil, err
		}
		info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
		if err == nil && info.Device == dev && info.Inode == ino {
			return ld, f, nil
		}
		_ = f.Close()
	}
	return loopDevice{}, nil, nil
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
