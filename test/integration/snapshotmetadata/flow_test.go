package snapshotmetadata

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	cbtv1beta1 "github.com/shutter-csi/shutter/client/apis/snapshotmetadataservice/v1beta1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/changedblocks"
	"github.com/shutter-csi/shutter/pkg/hostpath"
	"github.com/shutter-csi/shutter/pkg/snapshotmetadata"
	"github.com/shutter-csi/shutter/pkg/snapshotmetadata/smtest"
	"github.com/shutter-csi/shutter/test/testenv"
)

const (
	driverName = "cbt.csi.shutter.dev"
	audience   = "cbt-integration"
	volumeSize = 16 << 20
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is a hostpath driver and a sidecar in front of it, registered through a
// SnapshotMetadataService, on the shared control plane.
type env struct {
	kube      kubernetes.Interface
	snapshots clientset.Interface
	ctrl      csi.ControllerClient
	// volumePath is where the driver keeps a volume's data (a filesystem volume's is a folder).
	volumePath func(id string) string
	// dataDir is the driver's data folder.
	dataDir string
	ns      string
}

// upstreamHostpathEnv names a binary of upstream's csi-driver-host-path to test the sidecar in
// front of instead of Shutter's driver (by hand: that driver is not a Go module the proxy serves).
const upstreamHostpathEnv = "SHUTTER_UPSTREAM_HOSTPATH"

// startDriver serves a driver on socket: Shutter's hostpath driver in this process, with its
// options changed by opts, or upstream's binary named by $SHUTTER_UPSTREAM_HOSTPATH. Its end is
// sent on served.
func (e *env) startDriver(t *testing.T, ctx context.Context, dir, socket string, served chan<- error, opts ...func(*hostpath.Options)) (stop func()) {
	t.Helper()
	data := filepath.Join(dir, "data")
	e.dataDir = data
	if bin := os.Getenv(upstreamHostpathEnv); bin != "" {
		e.volumePath = func(id string) string { return filepath.Join(data, id) }
		cmd := exec.CommandContext(ctx, bin, "--endpoint=unix://"+socket, "--drivername="+driverName, "--nodeid=node-1",
			"--statedir="+data, "--enable-snapshot-metadata", "--snapshot-metadata-block-type=VARIABLE_LENGTH")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = cmd.Wait(); served <- nil }()
		return func() {}
	}
	e.volumePath = func(id string) string { return filepath.Join(data, "volumes", id) }
	o := hostpath.DefaultOptions()
	o.NodeID, o.DriverName, o.DataDir, o.EnableSnapshotMetadata = "node-1", driverName, data, true
	o.Endpoint, o.Sync = "unix://"+socket, false
	for _, f := range opts {
		f(&o)
	}
	d, err := hostpath.New(ctx, o)
	if err != nil && strings.Contains(err.Error(), "cannot work here") {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	go func() { served <- d.Serve(ctx, lis) }()
	return func() { _ = d.Close() }
}

// start starts the env; driverOpts change the options of Shutter's driver.
func start(t *testing.T, driverOpts ...func(*hostpath.Options)) *env {
	t.Helper()
	cp := testenv.Start(t)
	testenv.InstallCRDs(t, cp.Config)
	e := &env{kube: kubernetes.NewForConfigOrDie(cp.Config), snapshots: clientset.NewForConfigOrDie(cp.Config)}
	ctx, cancel := context.WithCancel(context.Background())
	dir := t.TempDir()
	served := make(chan error, 2)
	socket := filepath.Join(dir, "csi.sock")
	stopDriver := e.startDriver(t, ctx, dir, socket, served, driverOpts...)
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	e.ctrl = csi.NewControllerClient(conn)

	certs := smtest.NewCerts(t)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sms := &cbtv1beta1.SnapshotMetadataService{ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec: cbtv1beta1.SnapshotMetadataServiceSpec{Audience: audience, Address: tcp.Addr().String(), CACert: certs.CA}}
	if _, err := e.snapshots.CbtV1beta1().SnapshotMetadataServices().Create(ctx, sms, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	opts := snapshotmetadata.DefaultOptions()
	opts.CSIAddress, opts.Config, opts.Listener = socket, cp.Config, tcp
	opts.TLSCert, opts.TLSKey = certs.CertFile, certs.KeyFile
	ready := make(chan struct{})
	opts.Ready = func(net.Addr) { close(ready) }
	go func() { served <- snapshotmetadata.Run(ctx, opts) }()
	running := 2 // servers whose end is still to be received from served
	t.Cleanup(func() {
		cancel()
		for range running {
			if err := <-served; err != nil {
				t.Errorf("stopped with %v", err)
			}
		}
		_ = conn.Close()
		stopDriver()
		_ = e.snapshots.CbtV1beta1().SnapshotMetadataServices().Delete(context.Background(), driverName, metav1.DeleteOptions{})
	})
	select {
	case <-ready:
	case err := <-served:
		running--
		t.Fatalf("a server stopped: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the sidecar did not start")
	}
	e.ns = testenv.Namespace(t, e.kube)
	return e
}

// volume creates a block volume and returns its id and backing file.
func (e *env) volume(t *testing.T, name, fromSnapshot string) (string, string) {
	t.Helper()
	req := &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: volumeSize},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}}}
	if fromSnapshot != "" {
		req.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: fromSnapshot}}}
	}
	resp, err := e.ctrl.CreateVolume(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	return id, e.volumePath(id)
}

// snapshot cuts a backend snapshot of volume and makes a ready VolumeSnapshot name bound to a
// content recording it, as the controller and csi-snapshotter would.
func (e *env) snapshot(t *testing.T, name, volume string) string {
	t.Helper()
	ctx := context.Background()
	resp, err := e.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: e.ns + "-" + name, SourceVolumeId: volume})
	if err != nil {
		t.Fatal(err)
	}
	handle := resp.GetSnapshot().GetSnapshotId()
	content := "content-" + e.ns + "-" + name
	vs, err := e.snapshots.SnapshotV1().VolumeSnapshots(e.ns).Create(ctx, &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{VolumeSnapshotContentName: ptr.To(content)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vsc, err := e.snapshots.SnapshotV1().VolumeSnapshotContents().Create(ctx, &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: content},
		Spec: snapshotv1.VolumeSnapshotContentSpec{Driver: driverName, DeletionPolicy: snapshotv1.VolumeSnapshotContentRetain,
			VolumeSnapshotRef: corev1.ObjectReference{Namespace: e.ns, Name: name, UID: vs.UID},
			Source:            snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: ptr.To(handle)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.snapshots.SnapshotV1().VolumeSnapshotContents().Delete(context.Background(), content, metav1.DeleteOptions{})
	})
	vsc.Status = &snapshotv1.VolumeSnapshotContentStatus{SnapshotHandle: ptr.To(handle), ReadyToUse: ptr.To(true)}
	if _, err := e.snapshots.SnapshotV1().VolumeSnapshotContents().UpdateStatus(ctx, vsc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	vs.Status = &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To(content), ReadyToUse: ptr.To(true)}
	if _, err := e.snapshots.SnapshotV1().VolumeSnapshots(e.ns).UpdateStatus(ctx, vs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return handle
}

// deleteSnapshot deletes the backend snapshot handle and the VolumeSnapshot name (its content
// goes with the test), as the controller and csi-snapshotter would for a deleted snapshot.
func (e *env) deleteSnapshot(t *testing.T, name, handle string) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: handle}); err != nil {
		t.Fatal(err)
	}
	if err := e.snapshots.SnapshotV1().VolumeSnapshots(e.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pendingSnapshot makes a VolumeSnapshot name whose backend snapshot is not cut yet: bound to a
// content without a snapshot handle, not ready.
func (e *env) pendingSnapshot(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	content := "content-" + e.ns + "-" + name
	vs, err := e.snapshots.SnapshotV1().VolumeSnapshots(e.ns).Create(ctx, &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{VolumeSnapshotContentName: ptr.To(content)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.snapshots.SnapshotV1().VolumeSnapshotContents().Create(ctx, &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: content},
		Spec: snapshotv1.VolumeSnapshotContentSpec{Driver: driverName, DeletionPolicy: snapshotv1.VolumeSnapshotContentRetain,
			VolumeSnapshotRef: corev1.ObjectReference{Namespace: e.ns, Name: name, UID: vs.UID},
			Source:            snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: ptr.To("snap-not-cut-yet")}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.snapshots.SnapshotV1().VolumeSnapshotContents().Delete(context.Background(), content, metav1.DeleteOptions{})
	})
	vs.Status = &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To(content), ReadyToUse: ptr.To(false)}
	if _, err := e.snapshots.SnapshotV1().VolumeSnapshots(e.ns).UpdateStatus(ctx, vs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// serviceAccount creates a ServiceAccount; allowed binds it to a Role that may get
// volumesnapshots in the namespace.
func (e *env) serviceAccount(t *testing.T, name string, allowed bool) {
	t.Helper()
	testenv.Create(t, e.kube.CoreV1().ServiceAccounts(e.ns), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !allowed {
		return
	}
	testenv.Create(t, e.kube.RbacV1().Roles(e.ns), &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots"}, Verbs: []string{"get"}}}})
	testenv.Create(t, e.kube.RbacV1().RoleBindings(e.ns), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: e.ns}}})
}

func writeRanges(t *testing.T, path string, ranges [][2]int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, r := range ranges {
		buf := make([]byte, r[1])
		_, _ = rand.Read(buf)
		if _, err := f.WriteAt(buf, r[0]); err != nil {
			t.Fatal(err)
		}
	}
}

func digest(t *testing.T, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

func flatten(batches []changedblocks.Batch) [][2]int64 {
	var out [][2]int64
	for _, b := range batches {
		for _, r := range b.Ranges {
			out = append(out, [2]int64{r.Offset, r.Size})
		}
	}
	return out
}
