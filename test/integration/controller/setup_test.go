// Package controller tests the snapshot-controller on a real control plane of its own, with a
// small test actor playing the sidecar's part of the protocol.
package controller

import (
	"context"
	"flag"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/test/testenv"
)

func TestMain(m *testing.M) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", os.Getenv("KLOG_V"))
	testenv.Main(m)
}

var (
	controllerOnce sync.Once
	writes         = &writeCounter{}
)

// fixture is what a test needs: admin clients, and the controller running for the package.
type fixture struct {
	kube   kubernetes.Interface
	client clientset.Interface
	ns     string
}

func setup(t *testing.T) *fixture {
	env := testenv.StartDedicated(t)
	testenv.InstallCRDs(t, env.Config)
	controllerOnce.Do(func() { running.start(t, env.Config) })
	kube := kubernetes.NewForConfigOrDie(env.Config)
	return &fixture{kube: kube, client: clientset.NewForConfigOrDie(env.Config), ns: testenv.Namespace(t, kube)}
}

// volume creates a bound CSI volume and claim of driver in ns.
func (f *fixture) volume(t *testing.T, name, driver string) *corev1.PersistentVolumeClaim {
	ctx := context.Background()
	pvName := f.ns + "-" + name
	_, err := f.kube.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: "vol-" + pvName,
			}},
			ClaimRef: &corev1.ObjectReference{Namespace: f.ns, Name: name},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.kube.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
	})
	pvc, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(""), VolumeName: pvName,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return f.waitClaim(t, pvc.Name, bound)
}

func bound(pvc *corev1.PersistentVolumeClaim) bool { return pvc.Status.Phase == corev1.ClaimBound }

// waitClaim waits until ok holds for the claim, which must exist.
func (f *fixture) waitClaim(t *testing.T, name string, ok func(*corev1.PersistentVolumeClaim) bool) *corev1.PersistentVolumeClaim {
	t.Helper()
	return testenv.WaitFor(t, "claim "+name, 30*time.Second, func(ctx context.Context) (*corev1.PersistentVolumeClaim, error) {
		return f.kube.CoreV1().PersistentVolumeClaims(f.ns).Get(ctx, name, metav1.GetOptions{})
	}, func(pvc *corev1.PersistentVolumeClaim) bool { return pvc != nil && ok(pvc) })
}

func (f *fixture) class(t *testing.T, name, driver string, policy snapshotv1.DeletionPolicy, isDefault bool, params map[string]string) {
	class := &snapshotv1.VolumeSnapshotClass{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Driver: driver, DeletionPolicy: policy, Parameters: params,
	}
	if isDefault {
		class.Annotations = map[string]string{"snapshot.storage.kubernetes.io/is-default-class": "true"}
	}
	if _, err := f.client.SnapshotV1().VolumeSnapshotClasses().Create(context.Background(), class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.client.SnapshotV1().VolumeSnapshotClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func (f *fixture) snapshot(t *testing.T, name string, source snapshotv1.VolumeSnapshotSource, class string) *snapshotv1.VolumeSnapshot {
	vs := &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: snapshotv1.VolumeSnapshotSpec{Source: source}}
	if class != "" {
		vs.Spec.VolumeSnapshotClassName = &class
	}
	created, err := f.client.SnapshotV1().VolumeSnapshots(f.ns).Create(context.Background(), vs, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// waitSnapshot waits until ok holds for the snapshot (nil once it is gone).
func (f *fixture) waitSnapshot(t *testing.T, name string, ok func(*snapshotv1.VolumeSnapshot) bool) *snapshotv1.VolumeSnapshot {
	t.Helper()
	return testenv.WaitFor(t, "snapshot "+name, 30*time.Second, func(ctx context.Context) (*snapshotv1.VolumeSnapshot, error) {
		return f.client.SnapshotV1().VolumeSnapshots(f.ns).Get(ctx, name, metav1.GetOptions{})
	}, ok)
}

// dataClaim is the claim most tests snapshot, dataSnapshot the snapshot of it.
const dataClaim, dataSnapshot = "data", "snap"

// driverWithClaim is the start of most tests: a default VolumeSnapshotClass called name for the
// driver name.csi.test with policy, an actor playing that driver's sidecar, and a bound claim
// "data" of the driver.
func (f *fixture) driverWithClaim(t *testing.T, name string, policy snapshotv1.DeletionPolicy) *actor {
	t.Helper()
	driver := name + ".csi.test"
	f.class(t, name, driver, policy, true, nil)
	a := startActor(t, f.client, driver)
	f.volume(t, dataClaim, driver)
	return a
}

// heldSnapshotOfData is the start of the tests of deletions while the backend is cutting: a
// Delete-policy driverWithClaim whose actor holds every snapshot being created, and the snapshot
// of the claim "data".
func (f *fixture) heldSnapshotOfData(t *testing.T, name string) (*actor, *snapshotv1.VolumeSnapshot) {
	t.Helper()
	a := f.driverWithClaim(t, name, snapshotv1.VolumeSnapshotContentDelete)
	a.setHold(true)
	return a, f.snapshotData(t)
}

// snapshotData creates the snapshot "snap" of the claim "data" with the default class.
func (f *fixture) snapshotData(t *testing.T) *snapshotv1.VolumeSnapshot {
	return f.snapshot(t, dataSnapshot, snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To(dataClaim)}, "")
}

// readySnapshotOfData snapshots the claim "data" and waits until the snapshot is ready.
func (f *fixture) readySnapshotOfData(t *testing.T) *snapshotv1.VolumeSnapshot {
	t.Helper()
	return f.waitSnapshot(t, f.snapshotData(t).Name, ready)
}

// waitGone waits until get answers NotFound for the object named in what.
func waitGone(t *testing.T, what string, get func(ctx context.Context) error) {
	t.Helper()
	testenv.WaitGone(t, what, 60*time.Second, get)
}

func (f *fixture) getContent(ctx context.Context, name string) error {
	_, err := f.client.SnapshotV1().VolumeSnapshotContents().Get(ctx, name, metav1.GetOptions{})
	return err
}

func (f *fixture) getSnapshot(ctx context.Context, name string) error {
	_, err := f.client.SnapshotV1().VolumeSnapshots(f.ns).Get(ctx, name, metav1.GetOptions{})
	return err
}

func (f *fixture) waitContentGone(t *testing.T, name string) {
	t.Helper()
	waitGone(t, "content "+name, func(ctx context.Context) error { return f.getContent(ctx, name) })
}

// waitBackendDeleted waits until the contents of Delete policy are gone and checks that the
// actor deleted a backend snapshot for each.
func (f *fixture) waitBackendDeleted(t *testing.T, a *actor, contents ...string) {
	t.Helper()
	for _, c := range contents {
		f.waitContentGone(t, c)
	}
	if got := a.deletedHandles(); len(got) != len(contents) {
		t.Errorf("backend snapshots deleted: %v, want %d", got, len(contents))
	}
}

// gone tells whether the answer of a get says that the object is gone.
func gone(err error) bool { return apierrors.IsNotFound(err) }

// Queues of the snapshot-controller, as its processed signal names them.
const (
	snapshotQueue     = "volumesnapshot"
	contentQueue      = "volumesnapshotcontent"
	groupQueue        = "volumegroupsnapshot"
	groupContentQueue = "volumegroupsnapshotcontent"
)

// clusterKey is the queue key of a cluster-scoped object.
func clusterKey(name string) controller.Key { return controller.Key{Name: name} }

// key is the queue key of an object in the fixture's namespace.
func (f *fixture) key(name string) controller.Key { return controller.Key{Namespace: f.ns, Name: name} }
