//go:build linux

package hostpath

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// The benchmarks below compare the driver with the archive-based approach
// of the reference hostpath driver (`tar czf` to snapshot, `tar xzf` to
// restore), timed on the same data in the same run. They only run with
// -bench; `make bench` runs them with -benchtime=1x.
//
// Reported metrics: ns/op (Go's own), tar-s (the `tar czf` run of the same
// data) and x-vs-tar (tar time divided by driver time; above 1 is faster).
// Restores also report tar-xzf-s and x-vs-tar-xzf, against extracting
// that archive, which is how the reference driver restores.

const benchVolumeSize = 1 << 30

// timeCmd runs a command and returns its wall time.
func timeCmd(b *testing.B, name string, args ...string) time.Duration {
	b.Helper()
	start := time.Now()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		b.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return time.Since(start)
}

// fillZeros writes size bytes of zeros, so the file is allocated, not a hole.
func fillZeros(b *testing.B, path string, size int64) {
	b.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4<<20)
	for off := int64(0); off < size; off += int64(len(block)) {
		if _, err := f.WriteAt(block, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSnapshot1GiB snapshots and restores a 1 GiB block volume holding
// random data or written zeros, with fsync on (the default).
func BenchmarkSnapshot1GiB(b *testing.B) {
	for _, content := range []string{"random", "zeros"} {
		b.Run(content, func(b *testing.B) {
			e := newTestEnv(b, func(o *Options) { o.Sync = true; o.Capacity = 64 << 30 })
			vol := e.createVolume(b, "bench-src", benchVolumeSize, blockCap())
			path := e.d.volumePath(vol.GetVolumeId())
			if content == "random" {
				fillVolume(b, path, benchVolumeSize)
			} else {
				fillZeros(b, path, benchVolumeSize)
			}
			archive := filepath.Join(e.dir, "vol.tgz")
			tarC := timeCmd(b, "tar", "czf", archive, "-C", filepath.Dir(path), filepath.Base(path))
			extract := filepath.Join(e.dir, "extract")
			if err := os.Mkdir(extract, 0o755); err != nil {
				b.Fatal(err)
			}
			tarX := timeCmd(b, "tar", "xzf", archive, "-C", extract)
			_ = os.RemoveAll(extract)
			_ = os.Remove(archive)

			b.Run("snapshot", func(b *testing.B) {
				for i := range b.N {
					name := fmt.Sprintf("bench-snap-%d", i)
					start := time.Now()
					snap := e.createSnapshot(b, name, vol.GetVolumeId())
					report(b, time.Since(start), tarC)
					b.StopTimer()
					deleteSnapshot(b, e, snap.GetSnapshotId())
					b.StartTimer()
				}
			})
			snap := e.createSnapshot(b, "bench-restore-src", vol.GetVolumeId())
			b.Run("restore", func(b *testing.B) {
				for i := range b.N {
					start := time.Now()
					resp, err := e.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
						Name: fmt.Sprintf("bench-restore-%d", i), CapacityRange: &csi.CapacityRange{RequiredBytes: benchVolumeSize},
						VolumeCapabilities: []*csi.VolumeCapability{blockCap()},
						VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
							Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshotId()},
						}},
					})
					if err != nil {
						b.Fatal(err)
					}
					took := time.Since(start)
					report(b, took, tarC)
					b.ReportMetric(tarX.Seconds(), "tar-xzf-s")
					b.ReportMetric(tarX.Seconds()/took.Seconds(), "x-vs-tar-xzf")
					b.StopTimer()
					if _, err := e.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: resp.GetVolume().GetVolumeId()}); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
		})
	}
}

// report records the driver's time for one operation against tar's.
func report(b *testing.B, took, tar time.Duration) {
	b.ReportMetric(tar.Seconds(), "tar-s")
	b.ReportMetric(tar.Seconds()/took.Seconds(), "x-vs-tar")
}

func deleteSnapshot(b *testing.B, e *testEnv, id string) {
	b.Helper()
	if _, err := e.ctrl.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: id}); err != nil {
		b.Fatal(err)
	}
}

// burstSize is the number of CreateSnapshot calls in one burst.
const burstSize = 200

// BenchmarkSnapshotBurst issues 200 CreateSnapshot calls on 200 filesystem
// volumes, one at a time and 10 at a time, with fsync on and off, on volumes
// that are empty (data=empty: their snapshots are records only) and on
// volumes holding one 4 KiB file (data=4KiB: copied). One op is the whole
// burst; snapshots/s is the rate. The tar baseline is 200 `tar czf` runs of
// one such volume, one at a time.
func BenchmarkSnapshotBurst(b *testing.B) {
	for _, sync := range []bool{true, false} {
		for _, workers := range []int{1, 10} {
			for _, data := range []string{"empty", "4KiB"} {
				b.Run(fmt.Sprintf("fsync=%t/workers=%d/data=%s", sync, workers, data), func(b *testing.B) {
					benchBurst(b, sync, workers, data == "4KiB")
				})
			}
		}
	}
}

// benchBurst runs BenchmarkSnapshotBurst's bursts on fresh volumes, each
// holding a 4 KiB file when withFile is set.
func benchBurst(b *testing.B, sync bool, workers int, withFile bool) {
	e := newTestEnv(b, func(o *Options) { o.Sync = sync; o.Capacity = 1 << 40 })
	vols := make([]string, burstSize)
	for i := range vols {
		vols[i] = e.createVolume(b, fmt.Sprintf("burst-%d", i), 1<<20, mountCap()).GetVolumeId()
		if withFile {
			if err := os.WriteFile(filepath.Join(e.d.volumePath(vols[i]), "data"), randomBytes(b, 4<<10), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	tar := tarBurst(b, e.d.volumePath(vols[0]), filepath.Join(e.dir, "tar"))
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		ids := burst(b, e, vols, workers, i)
		took := time.Since(start)
		b.ReportMetric(burstSize/took.Seconds(), "snapshots/s")
		b.ReportMetric(burstSize/tar.Seconds(), "tar-ops/s")
		b.ReportMetric(tar.Seconds()/took.Seconds(), "x-vs-tar")
		b.StopTimer()
		for _, id := range ids {
			if id != "" {
				deleteSnapshot(b, e, id)
			}
		}
		b.StartTimer()
	}
}

// tarBurst times burstSize `tar czf` runs of a volume directory.
func tarBurst(b *testing.B, src, dir string) time.Duration {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for i := range burstSize {
		total += timeCmd(b, "tar", "czf", filepath.Join(dir, fmt.Sprintf("%d.tgz", i)), "-C", src, ".")
	}
	return total
}

// burst snapshots every volume once using workers concurrent callers and
// returns the snapshot IDs.
func burst(b *testing.B, e *testEnv, vols []string, workers, round int) []string {
	ids := make([]string, len(vols))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				resp, err := e.ctrl.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{
					Name: fmt.Sprintf("burst-%d-%d", round, i), SourceVolumeId: vols[i],
				})
				if err != nil {
					b.Error(err)
					continue
				}
				ids[i] = resp.GetSnapshot().GetSnapshotId()
			}
		})
	}
	for i := range vols {
		next <- i
	}
	close(next)
	wg.Wait()
	return ids
}
