package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// LoopsUnder lists the loop devices whose backing file is at or under dir (deleted or not), from
// sysfs: the devices of the hostpath driver's block and image volumes on the node, which a node
// stopped while pods used them leaves attached.
func LoopsUnder(dir string) ([]string, error) {
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // detached meanwhile
		}
		if err != nil {
			return nil, err
		}
		backing := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if backing == dir || strings.HasPrefix(backing, dir+"/") {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return out, nil
}

// detachLoops detaches every loop device backed by a file under dir. Run after the mounts under
// dir are gone; a device still in use is left to go when its last user closes it (the kernel
// turns autoclear on instead).
func detachLoops(dir string) error {
	devs, err := LoopsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, dev := range devs {
		f, err := os.OpenFile(dev, os.O_RDONLY, 0)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
			errs = append(errs, fmt.Errorf("detach %s: %w", dev, err))
		}
		_ = f.Close()
	}
	return errors.Join(errs...)
}
