//go:build linux

package hostpath

import (
	"context"
	"crypto/sha256"
	"fmt"
	"k8s.io/apimachinery/pkg/util/wait"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/shutter-csi/shutter/pkg/mountinfo"
)

// imageCrashWorld tracks what the killed drivers acknowledged.
type imageCrashWorld struct {
	mu sync.Mutex
	// acked maps volume IDs whose create was acknowledged to the checksum
	// of the file written into them afterwards ("" while none is).
	acked map[string]string
	// deleting holds volumes a delete was sent for: they may be gone.
	deleting map[string]bool
	// creates and deletes count the acknowledged calls.
	creates, deletes int
	// acks gets a signal for every acknowledged call.
	acks chan struct{}
}

// acked signals one acknowledged call; a signal nobody waits for is dropped.
func (w *imageCrashWorld) ack() {
	select {
	case w.acks <- struct{}{}:
	default:
	}
}

// waitAcks waits for n acknowledged calls.
func (w *imageCrashWorld) waitAcks(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(time.Minute)
	for range n {
		select {
		case <-w.acks:
		case <-timeout:
			t.Fatalf("the driver acknowledged fewer than %d calls in a minute", n)
		}
	}
}

// TestImageVolumesSurviveKills SIGKILLs a driver with image-backed volumes
// while it creates and deletes volumes and checks after every restart that
// every acknowledged volume is mounted with its data, and that nothing is
// left mounted or attached that no record accounts for.
func TestImageVolumesSurviveKills(t *testing.T) {
	if err := checkLoopSupport(); err != nil {
		t.Skipf("image volumes cannot be tested here: %v", err)
	}
	bin := buildDriver(t)
	dir := t.TempDir()
	t.Cleanup(func() { checkNothingLeft(t, dir) })
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	w := &imageCrashWorld{acked: map[string]string{}, deleting: map[string]bool{}, acks: make(chan struct{})}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 15))
	for round := range rounds {
		p := startDriver(t, bin, dir, "--volume-backing=image")
		w.check(t, p, dir)
		var wg sync.WaitGroup
		ctx, cancel := context.WithCancel(context.Background())
		for worker := range 3 {
			wg.Go(func() { w.work(ctx, t, p.ctrl, dir, fmt.Sprintf("r%d-w%d", round, worker)) })
		}
		// The kill comes right after a random number of acknowledged calls, while the other
		// workers' calls are under way.
		w.waitAcks(t, 1+rng.IntN(6))
		p.kill(t)
		cancel()
		wg.Wait()
	}
	p := startDriver(t, bin, dir, "--volume-backing=image")
	w.check(t, p, dir)
	t.Logf("%d creates and %d deletes acknowledged over %d kills; %d volumes left", w.creates, w.deletes, rounds, len(w.acked))
	for id := range w.acked {
		if _, err := p.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Errorf("DeleteVolume %s: %v", id, err)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("driver exited with %v", err)
	}
}

// work creates volumes, writes a file into each acknowledged one and
// deletes some, until ctx ends or the driver dies.
func (w *imageCrashWorld) work(ctx context.Context, t *testing.T, ctrl csi.ControllerClient, dir, prefix string) {
	for i := 0; ctx.Err() == nil; i++ {
		resp, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
			Name: fmt.Sprintf("pvc-%s-%d", prefix, i), CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20},
			VolumeCapabilities: []*csi.VolumeCapability{mountCap()},
		})
		if err != nil {
			return
		}
		id := resp.GetVolume().GetVolumeId()
		w.mu.Lock()
		w.acked[id] = ""
		w.creates++
		w.mu.Unlock()
		w.ack()
		data := []byte(fmt.Sprintf("data of %s %d", id, i))
		if writeSynced(filepath.Join(dir, "data", "volumes", id, "file"), data) == nil {
			w.mu.Lock()
			w.acked[id] = fmt.Sprintf("%x", sha256.Sum256(data))
			w.mu.Unlock()
		}
		if i%2 == 1 {
			w.mu.Lock()
			w.deleting[id] = true
			w.mu.Unlock()
			if _, err := ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err == nil {
				w.mu.Lock()
				delete(w.acked, id)
				delete(w.deleting, id)
				w.deletes++
				w.mu.Unlock()
				w.ack()
			}
		}
	}
}

// writeSynced writes a new file and flushes it.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Sync()
}

// check compares the restarted driver's volumes with what was
// acknowledged.
func (w *imageCrashWorld) check(t *testing.T, p *driverProcess, dir string) {
	t.Helper()
	resp, err := p.ctrl.ListVolumes(context.Background(), &csi.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, e := range resp.GetEntries() {
		listed[e.GetVolume().GetVolumeId()] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	volumes := filepath.Join(dir, "data", "volumes")
	for id, sum := range w.acked {
		if !listed[id] {
			if w.deleting[id] {
				delete(w.acked, id)
				continue
			}
			t.Fatalf("acknowledged volume %s is gone after a kill", id)
		}
		if m, err := mountAt(filepath.Join(volumes, id)); err != nil || m == nil || m.FSType != "ext4" {
			t.Fatalf("acknowledged volume %s is not mounted after a restart (%v, %v)", id, m, err)
		}
		if sum == "" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(volumes, id, "file"))
		if err != nil || fmt.Sprintf("%x", sha256.Sum256(data)) != sum {
			t.Fatalf("volume %s lost its flushed file after a kill: %q, %v", id, data, err)
		}
	}
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		t.Fatal(err)
	}
	mounted := 0
	for _, m := range mounts {
		if filepath.Dir(m.MountPoint) != volumes {
			continue
		}
		if id := filepath.Base(m.MountPoint); strings.HasPrefix(id, tempPrefix) || !listed[id] {
			t.Fatalf("%s is mounted, but no record accounts for it", m.MountPoint)
		}
		mounted++
	}
	// Autoclear detaches a device once its last user is gone.
	var loops []string
	_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { loops = loopsBelow(t, dir); return len(loops) == mounted, nil })
	if len(loops) != mounted {
		t.Fatalf("%d loop devices attached to images for %d mounted volumes", len(loops), mounted)
	}
}
