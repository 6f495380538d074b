//go:build linux

package hostpath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shutter-csi/shutter/internal/fstest"
)

// TestFullDiskIsResourceExhausted runs the driver on a small filesystem
// and fills it. Creating volumes must fail with ResourceExhausted, not
// Internal; deleting must still work; a restart on the full disk must
// succeed although the record log holds outdated frames; and once space
// is free, creating works again without a restart and everything
// acknowledged survives the next one.
func TestFullDiskIsResourceExhausted(t *testing.T) {
	fs := fstest.MountTmpfs(t, 8<<20)
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
	filler := fstest.FillDisk(t, fs)
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
