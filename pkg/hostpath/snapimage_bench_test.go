//go:build linux

package hostpath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// BenchmarkImageSnapshot: snapshots of a 1 GiB image volume holding 64 MiB in 16 files, with
// fsync on: "plain" copies the files from the live volume; "metadata" (the snapshot-metadata
// service on) copies the volume's image with its filesystem frozen, then the files from that
// copy mounted read-only. "frozen" is the frozen part alone: how long the volume's writers wait
// (root and loop devices needed).
func BenchmarkImageSnapshot(b *testing.B) {
	if err := checkLoopSupport(); err != nil {
		b.Skipf("image volumes cannot be benchmarked here: %v", err)
	}
	for _, tt := range []struct {
		name     string
		metadata bool
	}{{"plain", false}, {"metadata", true}, {"frozen", true}} {
		b.Run(tt.name, func(b *testing.B) {
			e := newTestEnv(b, func(o *Options) {
				o.VolumeBacking, o.Sync, o.EnableSnapshotMetadata = BackingImage, true, tt.metadata
			})
			vol := e.createVolume(b, "fs", benchVolumeSize, mountCap()).GetVolumeId()
			for i := range 16 {
				if err := os.WriteFile(filepath.Join(e.d.volumePath(vol), fmt.Sprintf("f%02d", i)), randomBytes(b, 4<<20), 0o644); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				if tt.name == "frozen" {
					path := filepath.Join(e.dir, "frozen-copy")
					if _, err := e.d.copyFrozenImage(vol, path); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					_ = os.Remove(path)
					b.StartTimer()
					continue
				}
				id := e.createSnapshot(b, fmt.Sprintf("s%d", i), vol).GetSnapshotId()
				b.StopTimer()
				if _, err := e.ctrl.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			if _, err := e.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: vol}); err != nil {
				b.Fatal(err)
			}
		})
	}
}
