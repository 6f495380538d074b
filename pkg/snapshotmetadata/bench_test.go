//go:build linux

package snapshotmetadata

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/changedblocks"
	"github.com/shutter-csi/shutter/pkg/hostpath"
	"github.com/shutter-csi/shutter/pkg/snapshotmetadata/smtest"
)

// BenchmarkDelta1GiB: the delta between two snapshots of a 1 GiB block volume of the hostpath
// driver, 64 MiB of it written, 1% (164 ranges of 64 KiB) changed in between, through the
// sidecar to a client. Reports the covered volume per second (target: >= 1 GB/s, the whole
// delta in well under a second).
func BenchmarkDelta1GiB(b *testing.B) {
	const size, chunk = 1 << 30, 64 << 10
	socket, dataDir := startHostpath(b)
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctrl := csi.NewControllerClient(conn)
	ctx := context.Background()
	vol, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "bench", CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}})
	if err != nil {
		b.Fatal(err)
	}
	file := filepath.Join(dataDir, "volumes", vol.GetVolume().GetVolumeId())
	writeEvery(b, file, size/1024, chunk) // 1024 chunks: 64 MiB
	a := cut(b, ctrl, "a", vol.GetVolume().GetVolumeId())
	writeEvery(b, file, size/164, chunk) // 164 chunks: 1% of the volume
	target := cut(b, ctrl, "b", vol.GetVolume().GetVolumeId())
	f := newFixture(b, func(o *Options, _ *smtest.Driver) { o.CSIAddress = socket })
	f.addSnapshot(b, "bench-b", target, "bench-vol")
	b.ResetTimer()
	for b.Loop() {
		var ranges int
		err := f.svc.List(ctx, changedblocks.Request{Token: tokenBackup, Namespace: testNS, Snapshot: "bench-b", BaseID: a},
			func(batch changedblocks.Batch) error { ranges += len(batch.Ranges); return nil })
		if err != nil || ranges == 0 {
			b.Fatalf("%d ranges, %v", ranges, err)
		}
	}
	b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s-covered")
}

// BenchmarkStreamSparse streams the ranges of a 10 GiB and a 100 GiB sparse volume (every other
// 64 KiB allocated: 81,920 and 819,200 ranges) from a driver through the sidecar, and reports how
// far the heap of the process (driver, sidecar and client) rose above its level before the
// stream. Flat means the same rise for both sizes: nothing is buffered per range.
func BenchmarkStreamSparse(b *testing.B) {
	for _, gib := range []int64{10, 100} {
		b.Run(fmt.Sprintf("%dGiB", gib), func(b *testing.B) { benchmarkStream(b, gib<<30) })
	}
}

func benchmarkStream(b *testing.B, size int64) {
	const stride = 128 << 10
	f := newFixture(b, func(_ *Options, d *smtest.Driver) { d.Generated, d.Stride = size/stride, stride })
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	peak, stop := sampleHeap()
	for b.Loop() {
		var covered int64
		err := f.svc.List(context.Background(), changedblocks.Request{Token: tokenBackup, Namespace: testNS, Snapshot: "a"},
			func(batch changedblocks.Batch) error {
				for _, r := range batch.Ranges {
					covered += r.Size
				}
				return nil
			})
		if err != nil || covered != size/2 {
			b.Fatalf("covered %d bytes, %v", covered, err)
		}
	}
	stop()
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
	b.ReportMetric((float64(peak.Load())-float64(before.HeapInuse))/(1<<20), "heap-rise-MiB")
}

// sampleHeap records the highest HeapInuse seen every 20ms until stop is called.
func sampleHeap() (peak *atomic.Uint64, stop func()) {
	peak = new(atomic.Uint64)
	done, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapInuse > peak.Load() {
					peak.Store(m.HeapInuse)
				}
			}
		}
	}()
	return peak, func() { close(done); <-sampled }
}

func startHostpath(b *testing.B) (socket, dataDir string) {
	dir := b.TempDir()
	o := hostpath.DefaultOptions()
	o.NodeID, o.DriverName, o.DataDir, o.EnableSnapshotMetadata, o.Sync = "node-1", testDriver, filepath.Join(dir, "data"), true, false
	socket = filepath.Join(dir, "csi.sock")
	o.Endpoint = "unix://" + socket
	ctx, cancel := context.WithCancel(context.Background())
	d, err := hostpath.New(ctx, o)
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	lis, err := net.Listen("unix", socket)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, lis) }()
	b.Cleanup(func() { cancel(); <-done; _ = d.Close() })
	return socket, o.DataDir
}

// writeEvery writes a random chunk every stride bytes of the file.
func writeEvery(b *testing.B, path string, stride, chunk int64) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, chunk)
	fi, _ := f.Stat()
	for off := int64(0); off+chunk <= fi.Size(); off += stride - stride%4096 {
		_, _ = rand.Read(buf)
		if _, err := f.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
}

func cut(b *testing.B, ctrl csi.ControllerClient, name, vol string) string {
	resp, err := ctrl.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: vol})
	if err != nil {
		b.Fatal(err)
	}
	return resp.GetSnapshot().GetSnapshotId()
}

// addSnapshot adds a ready VolumeSnapshot apps/name of handle to the fixture's API objects.
func (f *fixture) addSnapshot(b testing.TB, name, handle, volume string) {
	ctx := context.Background()
	content := "content-" + name
	if _, err := f.snapshots.SnapshotV1().VolumeSnapshots(testNS).Create(ctx, &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Status: &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To(content), ReadyToUse: ptr.To(true)}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := f.snapshots.SnapshotV1().VolumeSnapshotContents().Create(ctx, &snapshotv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: content},
		Spec:   snapshotv1.VolumeSnapshotContentSpec{Driver: testDriver, Source: snapshotv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To(volume)}},
		Status: &snapshotv1.VolumeSnapshotContentStatus{SnapshotHandle: ptr.To(handle), ReadyToUse: ptr.To(true)}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
}
