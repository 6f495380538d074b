//go:build linux

package hostpath

import (
	"bytes"
	"context"
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// testEnv is a driver served on a real Unix socket plus clients for it.
type testEnv struct {
	d     *Driver
	dir   string
	ctrl  csi.ControllerClient
	node  csi.NodeClient
	group csi.GroupControllerClient
	meta  csi.SnapshotMetadataClient
	ident csi.IdentityClient
	// stop ends serving and closes the driver; it may be called again.
	stop func()
}

// newTestEnv starts a driver with test defaults, changed by opts.
func newTestEnv(t testing.TB, opts ...func(*Options)) *testEnv {
	t.Helper()
	dir := t.TempDir()
	o := testOptions(dir)
	for _, f := range opts {
		f(&o)
	}
	e := &testEnv{dir: dir}
	e.start(t, o)
	return e
}

// testOptions are the test defaults for a driver with its data and socket
// below dir.
func testOptions(dir string) Options {
	o := DefaultOptions()
	o.NodeID = "node-1"
	o.DataDir = filepath.Join(dir, "data")
	o.Endpoint = "unix://" + filepath.Join(dir, "csi.sock")
	o.EnableSnapshotMetadata = true
	o.EnableAttach = true
	o.Sync = false
	return o
}

// start opens a driver with o, serves it on the env's socket and points
// the clients at it.
func (e *testEnv) start(t testing.TB, o Options) {
	t.Helper()
	// Benchmarks measure the driver, not log formatting, and a fuzz
	// target's F must not be used by the server's goroutines.
	ctx := klog.NewContext(context.Background(), logr.Discard())
	if tt, ok := t.(*testing.T); ok {
		_, ctx = ktesting.NewTestContext(tt)
	}
	ctx, cancel := context.WithCancel(ctx)
	d, err := New(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	sock := filepath.Join(e.dir, "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, lis) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	e.stop = func() {
		once.Do(func() {
			_ = conn.Close()
			cancel()
			<-done
			if err := d.Close(); err != nil {
				t.Errorf("close driver: %v", err)
			}
		})
	}
	t.Cleanup(e.stop)
	e.d, e.ctrl, e.node = d, csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	e.group, e.meta, e.ident = csi.NewGroupControllerClient(conn), csi.NewSnapshotMetadataClient(conn), csi.NewIdentityClient(conn)
}

// restart stops the driver and starts a new one on the same data
// directory, as a restarted process would, and returns it. The first must
// be closed first: the data directory admits one driver at a time.
func (e *testEnv) restart(t testing.TB) *Driver {
	t.Helper()
	e.stop()
	e.start(t, e.d.opts)
	return e.d
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func mountCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// createVolume creates an empty volume and fails the test on error.
func (e *testEnv) createVolume(t testing.TB, name string, size int64, c *csi.VolumeCapability) *csi.Volume {
	t.Helper()
	return e.createVolumeFrom(t, name, size, c, nil)
}

// createVolumeFrom creates a volume holding the data of source (nil: none)
// and fails the test on error.
func (e *testEnv) createVolumeFrom(t testing.TB, name string, size int64, c *csi.VolumeCapability, source *csi.VolumeContentSource) *csi.Volume {
	t.Helper()
	resp, err := e.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapabilities: []*csi.VolumeCapability{c},
		VolumeContentSource: source,
	})
	if err != nil {
		t.Fatalf("CreateVolume %s: %v", name, err)
	}
	return resp.GetVolume()
}

// snapshotSource is the content source of a volume restored from a snapshot.
func snapshotSource(snapID string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapID},
	}}
}

// volumeSource is the content source of a clone of a volume.
func volumeSource(volID string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: volID},
	}}
}

func (e *testEnv) createSnapshot(t testing.TB, name, volID string) *csi.Snapshot {
	t.Helper()
	resp, err := e.ctrl.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: volID})
	if err != nil {
		t.Fatalf("CreateSnapshot %s: %v", name, err)
	}
	return resp.GetSnapshot()
}

// writeAt writes data into a block volume's backing file.
func (e *testEnv) writeAt(t testing.TB, volID string, off int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(e.d.volumePath(volID), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("got code %s (%v), want %s", got, err, want)
	}
}

func TestCreateVolumeIdempotentByName(t *testing.T) {
	e := newTestEnv(t)
	v1 := e.createVolume(t, "pvc-1", 1<<20, blockCap())
	v2 := e.createVolume(t, "pvc-1", 1<<20, blockCap())
	if v1.GetVolumeId() != v2.GetVolumeId() {
		t.Fatalf("repeat gave ID %s, want %s", v2.GetVolumeId(), v1.GetVolumeId())
	}
	_, err := e.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "pvc-1", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}, VolumeCapabilities: []*csi.VolumeCapability{blockCap()},
	})
	wantCode(t, err, codes.AlreadyExists)
}

func TestCreateVolumeLimits(t *testing.T) {
	e := newTestEnv(t, func(o *Options) { o.Capacity = 10 << 20; o.MaxVolumeSize = 8 << 20 })
	tests := []struct {
		name string
		size int64
		want codes.Code
	}{
		{name: "over max volume size", size: 9 << 20, want: codes.OutOfRange},
		{name: "fits", size: 8 << 20, want: codes.OK},
		{name: "over remaining capacity", size: 4 << 20, want: codes.ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
				Name: tt.name, CapacityRange: &csi.CapacityRange{RequiredBytes: tt.size}, VolumeCapabilities: []*csi.VolumeCapability{blockCap()},
			})
			wantCode(t, err, tt.want)
		})
	}
	capResp, err := e.ctrl.GetCapacity(context.Background(), &csi.GetCapacityRequest{})
	if err != nil || capResp.GetAvailableCapacity() != 2<<20 {
		t.Fatalf("GetCapacity = %v, %v; want 2 MiB free", capResp, err)
	}
}

func TestSnapshotRestoreAndCloneKeepData(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "src", 64<<20, blockCap())
	data := randomBytes(t, 3<<20)
	e.writeAt(t, vol.GetVolumeId(), 10<<20, data)
	snap := e.createSnapshot(t, "snap-1", vol.GetVolumeId())
	if !snap.GetReadyToUse() || snap.GetSizeBytes() != 64<<20 {
		t.Fatalf("snapshot = %v", snap)
	}
	// Writes after the snapshot must not reach it.
	e.writeAt(t, vol.GetVolumeId(), 10<<20, make([]byte, len(data)))

	restored := e.restoreVolume(t, "restored", snap.GetSnapshotId(), 64<<20, blockCap())
	got, err := os.ReadFile(e.d.volumePath(restored))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 64<<20 || !bytes.Equal(got[10<<20:13<<20], data) || !bytes.Equal(got[:10<<20], make([]byte, 10<<20)) {
		t.Fatal("restored volume does not hold the snapshot's data")
	}

	clone := e.createVolumeFrom(t, "clone", 128<<20, blockCap(), volumeSource(vol.GetVolumeId()))
	info, err := os.Stat(e.d.volumePath(clone.GetVolumeId()))
	if err != nil || info.Size() != 128<<20 {
		t.Fatalf("clone size = %v, %v; want 128 MiB", info, err)
	}
}

func TestMountVolumeSnapshotCopiesTree(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "fs", 1<<20, mountCap())
	root := e.d.volumePath(vol.GetVolumeId())
	if err := os.MkdirAll(filepath.Join(root, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "a", "b", "f"), []byte("hello"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b/f", filepath.Join(root, "a", "link")); err != nil {
		t.Fatal(err)
	}
	snap := e.createSnapshot(t, "fs-snap", vol.GetVolumeId())
	got, err := os.ReadFile(filepath.Join(e.d.snapshotPath(snap.GetSnapshotId()), "a", "link"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("snapshot file via link = %q, %v", got, err)
	}
}

func TestSnapshotNameConflict(t *testing.T) {
	e := newTestEnv(t)
	a := e.createVolume(t, "a", 1<<20, blockCap())
	b := e.createVolume(t, "b", 1<<20, blockCap())
	s1 := e.createSnapshot(t, "s", a.GetVolumeId())
	s2 := e.createSnapshot(t, "s", a.GetVolumeId())
	if s1.GetSnapshotId() != s2.GetSnapshotId() {
		t.Fatal("repeated CreateSnapshot gave a new ID")
	}
	_, err := e.ctrl.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: b.GetVolumeId()})
	wantCode(t, err, codes.AlreadyExists)
	_, err = e.ctrl.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "t", SourceVolumeId: "vol-missing"})
	wantCode(t, err, codes.NotFound)
}

func TestBusyIDIsAborted(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "busy", 1<<20, blockCap())
	release, err := e.d.locks.acquire(volumeKey(vol.GetVolumeId()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.ctrl.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: vol.GetVolumeId()})
	wantCode(t, err, codes.Aborted)
	_, err = e.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()})
	wantCode(t, err, codes.Aborted)
	// Other IDs are not blocked.
	e.createVolume(t, "other", 1<<20, blockCap())
	release()
	e.createSnapshot(t, "s", vol.GetVolumeId())
}

func TestListPaging(t *testing.T) {
	e := newTestEnv(t)
	want := map[string]bool{}
	for _, n := range []string{"p1", "p2", "p3", "p4", "p5"} {
		want[e.createVolume(t, n, 1<<20, blockCap()).GetVolumeId()] = true
	}
	seen := map[string]bool{}
	token := ""
	for range 10 {
		resp, err := e.ctrl.ListVolumes(context.Background(), &csi.ListVolumesRequest{MaxEntries: 2, StartingToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range resp.GetEntries() {
			seen[en.GetVolume().GetVolumeId()] = true
		}
		if token = resp.GetNextToken(); token == "" {
			break
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("paged through %d volumes, want %d", len(seen), len(want))
	}
	_, err := e.ctrl.ListVolumes(context.Background(), &csi.ListVolumesRequest{StartingToken: "bogus"})
	wantCode(t, err, codes.Aborted)
}

func TestExpandAndModify(t *testing.T) {
	e := newTestEnv(t)
	vol := e.createVolume(t, "grow", 1<<20, blockCap())
	resp, err := e.ctrl.ControllerExpandVolume(context.Background(), &csi.ControllerExpandVolumeRequest{
		VolumeId: vol.GetVolumeId(), CapacityRange: &csi.CapacityRange{RequiredBytes: 5 << 20},
	})
	if err != nil || resp.GetCapacityBytes() != 5<<20 {
		t.Fatalf("expand = %v, %v", resp, err)
	}
	if info, _ := os.Stat(e.d.volumePath(vol.GetVolumeId())); info.Size() != 5<<20 {
		t.Fatalf("backing file has %d bytes, want 5 MiB", info.Size())
	}
	_, err = e.ctrl.ControllerModifyVolume(context.Background(), &csi.ControllerModifyVolumeRequest{
		VolumeId: vol.GetVolumeId(), MutableParameters: map[string]string{"iops": "100"},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.ctrl.ControllerModifyVolume(context.Background(), &csi.ControllerModifyVolumeRequest{
		VolumeId: vol.GetVolumeId(), MutableParameters: map[string]string{"color": "red"},
	})
	wantCode(t, err, codes.InvalidArgument)
}

func TestAttachLimit(t *testing.T) {
	e := newTestEnv(t, func(o *Options) { o.MaxVolumesPerNode = 1 })
	a := e.createVolume(t, "a", 1<<20, blockCap())
	b := e.createVolume(t, "b", 1<<20, blockCap())
	pub := func(id string, ro bool) error {
		_, err := e.ctrl.ControllerPublishVolume(context.Background(), &csi.ControllerPublishVolumeRequest{
			VolumeId: id, NodeId: "node-1", VolumeCapability: blockCap(), Readonly: ro,
		})
		return err
	}
	if err := pub(a.GetVolumeId(), false); err != nil {
		t.Fatal(err)
	}
	wantCode(t, pub(a.GetVolumeId(), true), codes.AlreadyExists)
	wantCode(t, pub(b.GetVolumeId(), false), codes.ResourceExhausted)
	got, err := e.ctrl.ControllerGetVolume(context.Background(), &csi.ControllerGetVolumeRequest{VolumeId: a.GetVolumeId()})
	if err != nil || len(got.GetStatus().GetPublishedNodeIds()) != 1 {
		t.Fatalf("ControllerGetVolume = %v, %v", got, err)
	}
	_, err = e.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: a.GetVolumeId()})
	wantCode(t, err, codes.FailedPrecondition)
}

// TestAttachRequestChecks: attach and detach are refused while attach is
// off; a detach may leave out the node (every node) but not name a
// malformed one; detaching an unknown volume is success.
func TestAttachRequestChecks(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	vol := e.createVolume(t, "a", 1<<20, blockCap()).GetVolumeId()
	publish := func(e *testEnv, id, node string) error {
		_, err := e.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: blockCap()})
		return err
	}
	unpublish := func(e *testEnv, id, node string) error {
		_, err := e.ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: node})
		return err
	}
	wantCode(t, publish(e, vol, ""), codes.InvalidArgument)
	wantCode(t, publish(e, "", "node-1"), codes.InvalidArgument)
	wantCode(t, publish(e, vol, "../x"), codes.InvalidArgument)
	wantCode(t, unpublish(e, "", "node-1"), codes.InvalidArgument)
	wantCode(t, unpublish(e, vol, "../x"), codes.InvalidArgument)
	wantCode(t, unpublish(e, "unknown-vol", "node-1"), codes.OK)
	wantCode(t, publish(e, vol, "node-1"), codes.OK)
	wantCode(t, unpublish(e, vol, ""), codes.OK)
	got, err := e.ctrl.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: vol})
	if err != nil || len(got.GetStatus().GetPublishedNodeIds()) != 0 {
		t.Fatalf("ControllerGetVolume after a detach from every node = %v, %v", got, err)
	}
	off := newTestEnv(t, func(o *Options) { o.EnableAttach = false })
	wantCode(t, publish(off, vol, "node-1"), codes.Unimplemented)
	wantCode(t, unpublish(off, vol, "node-1"), codes.Unimplemented)
}
