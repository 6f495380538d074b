// Package diagnose checks `kubectl shutter` on a real control plane: each test writes one stuck
// situation straight into the API (objects and the statuses a controller or sidecar would have
// written; no controller runs) and compares what describe and stuck say about it.
package diagnose

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/diagnose"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is one test's namespace, its own driver name and clients.
type fixture struct {
	t          *testing.T
	ctx        context.Context
	kubeconfig string
	kube       kubernetes.Interface
	snap       clientset.Interface
	ns         string
	driver     string
}

func newFixture(t *testing.T) *fixture {
	env := testenv.Start(t)
	testenv.InstallCRDs(t, env.Config)
	f := &fixture{t: t, ctx: context.Background(), kubeconfig: env.Kubeconfig}
	f.kube = kubernetes.NewForConfigOrDie(env.Config)
	f.snap = clientset.NewForConfigOrDie(env.Config)
	f.ns = testenv.Namespace(t, f.kube)
	f.driver = "diag-" + rand.String(6) + ".csi.example.com"
	// The fixture's namespace is where the driver's sidecar runs: its ServiceAccount may write
	// contents' status, so its Leases count.
	f.snapshotterRBAC(f.ns, []rbacv1.PolicyRule{contentStatusRule}, nil)
	return f
}

// contentStatusRule is what a csi-snapshotter needs and a tenant never gets.
var contentStatusRule = rbacv1.PolicyRule{APIGroups: []string{snapshotv1.GroupName},
	Resources: []string{"volumesnapshotcontents/status"}, Verbs: []string{"update", "patch"}}

// snapshotterRBAC makes a ClusterRole with rules (or aggregated from the ClusterRoles labelled
// aggregate) and binds it to the ServiceAccount csi-snapshotter of ns, as a driver's installation
// does; both are deleted when the test ends. It returns the role's name.
func (f *fixture) snapshotterRBAC(ns string, rules []rbacv1.PolicyRule, aggregate map[string]string) string {
	f.t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "diag-snapshotter-" + ns}, Rules: rules}
	if aggregate != nil {
		role.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: aggregate}}}
	}
	_, err := f.kube.RbacV1().ClusterRoles().Create(f.ctx, role, metav1.CreateOptions{})
	f.check(err)
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "csi-snapshotter", Namespace: ns}}}
	_, err = f.kube.RbacV1().ClusterRoleBindings().Create(f.ctx, binding, metav1.CreateOptions{})
	f.check(err)
	f.t.Cleanup(func() {
		_ = f.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		_ = f.kube.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	return role.Name
}

// run runs the plugin and returns its output.
func (f *fixture) run(args ...string) string {
	f.t.Helper()
	var out, errOut bytes.Buffer
	opts := diagnose.Options{Out: &out, Err: &errOut}
	fs := pflag.NewFlagSet("kubectl-shutter", pflag.ContinueOnError)
	opts.AddFlags(fs)
	f.check(fs.Parse(append([]string{"--kubeconfig", f.kubeconfig, "-n", f.ns}, args...)))
	opts.Args = fs.Args()
	if err := diagnose.Run(f.ctx, opts); err != nil {
		f.t.Fatalf("kubectl shutter %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// describe runs describe in text and in JSON.
func (f *fixture) describe(kind, name string) (string, diagnose.Diagnosis) {
	f.t.Helper()
	text := f.run("describe", kind, name)
	var d diagnose.Diagnosis
	if err := json.Unmarshal([]byte(f.run("describe", kind, name, "-o", "json")), &d); err != nil {
		f.t.Fatal(err)
	}
	return text, d
}

// stuck runs `stuck -o json` in the fixture's namespace.
func (f *fixture) stuck() []diagnose.Item {
	f.t.Helper()
	var list diagnose.StuckList
	if err := json.Unmarshal([]byte(f.run("stuck", "--for=0", "-o", "json")), &list); err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

// lease creates the Lease a sidecar of the fixture's driver holds, last renewed ago.
func (f *fixture) lease(name string, ago time.Duration) {
	f.t.Helper()
	f.leaseIn(f.ns, name, time.Now().Add(-ago))
}

// leaseIn creates a Lease in ns held by sidecar-0, renewed at renewed.
func (f *fixture) leaseIn(ns, name string, at time.Time) {
	f.t.Helper()
	renewed := metav1.NewMicroTime(at)
	_, err := f.kube.CoordinationV1().Leases(ns).Create(f.ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("sidecar-0"), LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime: &renewed, RenewTime: &renewed},
	}, metav1.CreateOptions{})
	f.check(err)
}

func (f *fixture) check(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

// boundClaim creates a CSI volume of the fixture's driver and a claim bound to it.
func (f *fixture) boundClaim(name string) *corev1.PersistentVolumeClaim {
	f.t.Helper()
	pvName := "pv-" + f.ns + "-" + name
	size := resource.MustParse("1Gi")
	pv, err := f.kube.CoreV1().PersistentVolumes().Create(f.ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			ClaimRef:                      &corev1.ObjectReference{Namespace: f.ns, Name: name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: f.driver, VolumeHandle: "vol-" + name}},
		},
	}, metav1.CreateOptions{})
	f.check(err)
	f.t.Cleanup(func() {
		_ = f.kube.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
	})
	// Patches, not updates: kube-controller-manager adds its protection finalizers meanwhile.
	bound := func(phase string) []byte { return []byte(`{"status":{"phase":"` + phase + `"}}`) }
	_, err = f.kube.CoreV1().PersistentVolumes().Patch(f.ctx, pv.Name, types.MergePatchType, bound("Bound"), metav1.PatchOptions{}, "status")
	f.check(err)
	pvc := f.claim(name, pvName, ptr.To(""))
	pvc, err = f.kube.CoreV1().PersistentVolumeClaims(f.ns).Patch(f.ctx, pvc.Name, types.MergePatchType, bound("Bound"), metav1.PatchOptions{}, "status")
	f.check(err)
	return pvc
}

// claim creates a claim; volumeName "" leaves it unbound.
func (f *fixture) claim(name, volumeName string, storageClass *string, opts ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	f.t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "diag"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			VolumeName:       volumeName,
			StorageClassName: storageClass,
		},
	}
	for _, o := range opts {
		o(pvc)
	}
	pvc, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Create(f.ctx, pvc, metav1.CreateOptions{})
	f.check(err)
	return pvc
}

// class creates a VolumeSnapshotClass of the fixture's driver.
func (f *fixture) class() string {
	f.t.Helper()
	name := "class-" + f.ns
	_, err := f.snap.SnapshotV1().VolumeSnapshotClasses().Create(f.ctx, &snapshotv1.VolumeSnapshotClass{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Driver: f.driver, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete,
	}, metav1.CreateOptions{})
	f.check(err)
	f.t.Cleanup(func() {
		_ = f.snap.SnapshotV1().VolumeSnapshotClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// snapshot creates a VolumeSnapshot of claim with class and, when given, a status.
func (f *fixture) snapshot(name, claim, class string, status *snapshotv1.VolumeSnapshotStatus, finalizers ...string) *snapshotv1.VolumeSnapshot {
	f.t.Helper()
	vs, err := f.snap.SnapshotV1().VolumeSnapshots(f.ns).Create(f.ctx, &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers},
		Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: &claim},
			VolumeSnapshotClassName: &class},
	}, metav1.CreateOptions{})
	f.check(err)
	if len(finalizers) > 0 {
		f.t.Cleanup(func() { f.dropFinalizers(name) })
	}
	if status != nil {
		vs.Status = status
		vs, err = f.snap.SnapshotV1().VolumeSnapshots(f.ns).UpdateStatus(f.ctx, vs, metav1.UpdateOptions{})
		f.check(err)
	}
	return vs
}

func (f *fixture) dropFinalizers(name string) {
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	_, _ = f.snap.SnapshotV1().VolumeSnapshots(f.ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
}

// content creates the dynamic content of vs with the given policy and status.
func (f *fixture) content(vs *snapshotv1.VolumeSnapshot, class string, policy snapshotv1.DeletionPolicy,
	status *snapshotv1.VolumeSnapshotContentStatus) *snapshotv1.VolumeSnapshotContent {
	f.t.Helper()
	return f.contentNamed(protocol.ContentName(vs.UID), vs.Name, vs.UID, class, policy, status)
}

func (f *fixture) contentNamed(name, snapshot string, uid types.UID, class string, policy snapshotv1.DeletionPolicy,
	status *snapshotv1.VolumeSnapshotContentStatus) *snapshotv1.VolumeSnapshotContent {
	f.t.Helper()
	content, err := f.snap.SnapshotV1().VolumeSnapshotContents().Create(f.ctx, &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef:       corev1.ObjectReference{Namespace: f.ns, Name: snapshot, UID: uid},
			DeletionPolicy:          policy,
			Driver:                  f.driver,
			VolumeSnapshotClassName: &class,
			Source:                  snapshotv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To("vol-" + snapshot)},
		},
	}, metav1.CreateOptions{})
	f.check(err)
	f.t.Cleanup(func() {
		_ = f.snap.SnapshotV1().VolumeSnapshotContents().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if status != nil {
		content.Status = status
		content, err = f.snap.SnapshotV1().VolumeSnapshotContents().UpdateStatus(f.ctx, content, metav1.UpdateOptions{})
		f.check(err)
	}
	return content
}

// group creates a VolumeGroupSnapshot selecting the claims labelled app=diag.
func (f *fixture) group(name, class string) *groupv1.VolumeGroupSnapshot {
	f.t.Helper()
	vgs, err := f.snap.GroupsnapshotV1().VolumeGroupSnapshots(f.ns).Create(f.ctx, &groupv1.VolumeGroupSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: groupv1.VolumeGroupSnapshotSpec{VolumeGroupSnapshotClassName: &class,
			Source: groupv1.VolumeGroupSnapshotSource{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "diag"}}}},
	}, metav1.CreateOptions{})
	f.check(err)
	return vgs
}

// item finds an object in a stuck list.
func item(items []diagnose.Item, kind, name string) (diagnose.Item, bool) {
	for _, it := range items {
		if it.Kind == kind && it.Name == name {
			return it, true
		}
	}
	return diagnose.Item{}, false
}

// mustContain fails unless text holds every part.
func mustContain(t *testing.T, text string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(text, p) {
			t.Errorf("output lacks %q:\n%s", p, text)
		}
	}
}
