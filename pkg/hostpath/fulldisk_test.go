package hostpath

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory and unmounts
// it when the test ends. It skips the test when not run as root.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

// fillDisk writes a file into dir until its filesystem is full and returns
// the file's path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			return path
		}
	}
}

// TestFullDiskIsResourceExhausted runs the driver on a small filesystem
// and fills it. Creating volumes must fail with ResourceExhausted, not
// Internal; deleting must still work; a restart on the full disk must
// succeed although the record log holds outdated frames; and once space
// is free, creating works again without a restart and everything
// acknowledged survives the next one.
func TestFullDiskIsResourceExhausted(t *testing.T) {
	fs := mountTmpfs(t, 8<<20)
	e := newTestEnv(t, func(o *Options) { o.DataDir = filepath.Join(fs, "data"); o.Sync = true })
	ctx := context.Background()
	pad := strings.Repeat("p", 200<<10)
	create := func(name string) error {
		_, err := e.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
			Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
			VolumeCapabilities: []*csi.VolumeCapability{mountCap()}, Parameters: map[string]string{"pad": pad},
		})
		return err
	}
	first := e.createVolume(t, "first", 1<<20, mountCap())
	filler := fillDisk(t, fs)
	var acked []string
	var err error
	for i := 0; err == nil; i++ {
		name := fmt.Sprintf("full-%d", i)
		if err = create(name); err == nil {
			acked = append(acked, deriveID(volumePrefix, name))
		}
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("CreateVolume on a full disk = %v, want ResourceExhausted", err)
	}
	if _, err := e.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: first.GetVolumeId()}); err != nil {
		t.Fatalf("DeleteVolume on a full disk: %v", err)
	}
	// The log now holds outdated frames: opening it would compact it.
	d := e.restart(t)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := create("after"); err != nil {
		t.Fatalf("CreateVolume once space is free: %v", err)
	}
	acked = append(acked, deriveID(volumePrefix, "after"))
	d = e.restart(t)
	for _, id := range acked {
		if _, ok := d.volumes.Get(id); !ok {
			t.Fatalf("acknowledged volume %s lost", id)
		}
	}
	if _, ok := d.volumes.Get(first.GetVolumeId()); ok {
		t.Fatal("a volume deleted on the full disk is back")
	}
}
