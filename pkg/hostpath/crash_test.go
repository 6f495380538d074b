//go:build linux

package hostpath

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// driverProcess is the hostpath-driver binary running as a child process.
type driverProcess struct {
	cmd  *exec.Cmd
	conn *grpc.ClientConn
	ctrl csi.ControllerClient
}

// buildDriver compiles cmd/hostpath-driver once for the test.
func buildDriver(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hostpath-driver")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/shutter-csi/shutter/cmd/hostpath-driver").CombinedOutput()
	if err != nil {
		t.Fatalf("build driver: %v\n%s", err, out)
	}
	return bin
}

// startDriver runs the binary on dir (with fsync on and the extra flags)
// and waits until it answers Probe.
func startDriver(t *testing.T, bin, dir string, extra ...string) *driverProcess {
	t.Helper()
	sock := filepath.Join(dir, "csi.sock")
	args := append([]string{"--endpoint=unix://" + sock, "--nodeid=crash-node", "--datadir=" + filepath.Join(dir, "data"),
		"--capacity=1099511627776", "--fsync=true", "--v=2"}, extra...)
	cmd := exec.Command(bin, args...)
	logFile, err := os.OpenFile(filepath.Join(dir, "driver.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = logFile.Close() })
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ident := csi.NewIdentityClient(conn)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := ident.Probe(ctx, &csi.ProbeRequest{})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "driver.log"))
			t.Fatalf("driver did not come up: %v\n%s", err, log)
		}
	}
	return &driverProcess{cmd: cmd, conn: conn, ctrl: csi.NewControllerClient(conn)}
}

func (p *driverProcess) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
}

// fillVolume writes size bytes of non-repeating data into a backing file.
func fillVolume(t testing.TB, path string, size int64) []byte {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := randomBytes(t, 1<<20)
	for off := int64(0); off < size; off += int64(len(block)) {
		binary.LittleEndian.PutUint64(block, uint64(off))
		if _, err := f.WriteAt(block, off); err != nil {
			t.Fatal(err)
		}
	}
	return block
}

// startWithFilledVolume builds the driver, starts it in a process of its
// own below a new test folder and creates a block volume name of size
// bytes, filled with data. It returns the binary, the folder, the process
// and the volume's ID.
func startWithFilledVolume(t *testing.T, name string, size int64) (bin, dir string, p *driverProcess, volID string) {
	t.Helper()
	bin, dir = buildDriver(t), t.TempDir()
	p = startDriver(t, bin, dir)
	vol, err := p.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapabilities: []*csi.VolumeCapability{blockCap()},
	})
	if err != nil {
		t.Fatal(err)
	}
	volID = vol.GetVolume().GetVolumeId()
	fillVolume(t, filepath.Join(dir, "data", "volumes", volID), size)
	return bin, dir, p, volID
}

// restoreRequest asks for volume name of size bytes, restored from snapID.
func restoreRequest(name, snapID string, size int64, c *csi.VolumeCapability) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapabilities: []*csi.VolumeCapability{c},
		VolumeContentSource: snapshotSource(snapID),
	}
}

func waitForPath(path string, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if _, err := os.Lstat(path); err == nil {
			return true
		}
	}
	return false
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

// TestSIGKILLDuringSnapshot kills the driver process while it copies a
// snapshot, restarts it and checks that the half-made snapshot is gone (not
// reported, data removed), that the volume survived, and that retrying the
// same request produces a complete snapshot that survives another SIGKILL.
func TestSIGKILLDuringSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the driver and copies 256 MiB")
	}
	bin, dir, p, volID := startWithFilledVolume(t, "crash-src", 256<<20)
	ctx := context.Background()
	volPath := filepath.Join(dir, "data", "volumes", volID)

	snapID := deriveID(snapshotPrefix, "crash-snap")
	snapPath := filepath.Join(dir, "data", "snapshots", snapID)
	go func() {
		_, _ = p.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "crash-snap", SourceVolumeId: volID})
	}()
	if !waitForPath(tempPath(snapPath), 10*time.Second) {
		t.Fatal("snapshot copy never started")
	}
	p.kill(t)
	if _, err := os.Lstat(snapPath); err == nil {
		t.Fatal("copy finished before the kill; the test did not interrupt it")
	}

	p = startDriver(t, bin, dir)
	list, err := p.ctrl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
	if err != nil || len(list.GetEntries()) != 0 {
		t.Fatalf("after restart ListSnapshots = %v, %v; want no snapshot", list, err)
	}
	_, err = p.ctrl.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: snapID})
	wantCode(t, err, codes.NotFound)
	if _, err := os.Lstat(tempPath(snapPath)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("partial snapshot data left behind: %v", err)
	}
	if _, err := p.ctrl.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: volID}); err != nil {
		t.Fatalf("volume lost: %v", err)
	}

	snap, err := p.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "crash-snap", SourceVolumeId: volID})
	if err != nil || !snap.GetSnapshot().GetReadyToUse() || snap.GetSnapshot().GetSnapshotId() != snapID {
		t.Fatalf("retry = %v, %v", snap, err)
	}
	p.kill(t)
	p = startDriver(t, bin, dir)
	got, err := p.ctrl.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: snapID})
	if err != nil || !got.GetSnapshot().GetReadyToUse() {
		t.Fatalf("after second kill GetSnapshot = %v, %v", got, err)
	}
	if !sameFile(t, volPath, snapPath) {
		t.Fatal("snapshot data differs from the volume")
	}
}

// TestRecoverRemovesIncompleteGroup simulates a crash between writing a
// group's member records and its group record.
func TestRecoverRemovesIncompleteGroup(t *testing.T) {
	e := newTestEnv(t)
	a := e.createVolume(t, "a", 1<<20, blockCap())
	e.writeAt(t, a.GetVolumeId(), 0, randomBytes(t, 4096))
	resp, err := e.group.CreateVolumeGroupSnapshot(context.Background(), &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{a.GetVolumeId()}})
	if err != nil {
		t.Fatal(err)
	}
	g := resp.GetGroupSnapshot()
	if err := e.d.groups.Delete(g.GetGroupSnapshotId()); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(tempPath(e.d.volumePath("vol-half")), 0o755); err != nil {
		t.Fatal(err)
	}
	d := e.restart(t)
	member := g.GetSnapshots()[0].GetSnapshotId()
	if _, ok := d.snapshots.Get(member); ok {
		t.Fatal("member of a group without record survived recovery")
	}
	for _, p := range []string{d.snapshotPath(member), tempPath(d.volumePath("vol-half"))} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left behind: %v", p, err)
		}
	}
	if _, ok := d.volumes.Get(a.GetVolumeId()); !ok {
		t.Fatal("volume lost in recovery")
	}
}

// writeTree fills a mount volume with nested directories, files of sizes
// that are not block multiples and a symlink.
func writeTree(t *testing.T, root string) {
	t.Helper()
	for _, d := range []string{"a", "a/b", "c"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, size := range map[string]int{"top": 10, "a/one": 4097, "a/b/two": 3<<20 + 5, "c/empty": 0} {
		if err := os.WriteFile(filepath.Join(root, name), randomBytes(t, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a/one", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
}

// TestRecoverDropsSnapshotNotMatchingManifest simulates a power failure
// that kept a snapshot's record but not all of its directories: Recover
// must drop the snapshot and its data rather than report it ready.
func TestRecoverDropsSnapshotNotMatchingManifest(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "tree", 1<<20, mountCap())
	writeTree(t, e.d.volumePath(vol.GetVolumeId()))
	whole := e.createSnapshot(t, "whole", vol.GetVolumeId())
	torn := e.createSnapshot(t, "torn", vol.GetVolumeId())
	if err := os.RemoveAll(filepath.Join(e.d.snapshotPath(torn.GetSnapshotId()), "a", "b")); err != nil {
		t.Fatal(err)
	}
	d := e.restart(t)
	if _, ok := d.snapshots.Get(torn.GetSnapshotId()); ok {
		t.Fatal("a snapshot whose data lost a directory survived recovery")
	}
	if _, err := os.Lstat(d.snapshotPath(torn.GetSnapshotId())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data of the dropped snapshot left behind: %v", err)
	}
	if _, ok := d.snapshots.Get(whole.GetSnapshotId()); !ok {
		t.Fatal("a complete snapshot was dropped")
	}
}

// TestSnapshotReplacesLeftovers: data left under the temporary and the
// final name by an attempt whose cleanup failed must not stop a retry, nor
// end up in the snapshot.
func TestSnapshotReplacesLeftovers(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "leftover-src", 1<<20, mountCap())
	writeTree(t, e.d.volumePath(vol.GetVolumeId()))
	id := deriveID(snapshotPrefix, "leftover")
	final := e.d.snapshotPath(id)
	for _, p := range []string{tempPath(final), final} {
		if err := os.MkdirAll(filepath.Join(p, "stale"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	snap := e.createSnapshot(t, "leftover", vol.GetVolumeId())
	if _, err := os.Lstat(filepath.Join(final, "stale")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale data inside the snapshot: %v", err)
	}
	if !sameFile(t, filepath.Join(e.d.volumePath(vol.GetVolumeId()), "a", "b", "two"), filepath.Join(final, "a", "b", "two")) {
		t.Fatal("snapshot data differs from the volume")
	}
	if got, _ := e.d.snapshots.Get(snap.GetSnapshotId()); got.Manifest == nil || got.Manifest.Entries != 9 {
		t.Fatalf("manifest = %+v, want 9 entries (4 directories, 4 files, 1 symlink)", got.Manifest)
	}
}
