package schedule

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/test/testenv"
)

// tenant makes a ServiceAccount of the test's namespace that may create, read and list
// VolumeSnapshots but neither delete nor change them, and returns a client acting as it
// (impersonation, so the API server's RBAC decides).
func (e *env) tenant(t *testing.T) clientset.Interface {
	t.Helper()
	ctx := context.Background()
	if _, err := e.kube.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "snapshot-creator"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{snapshotv1.GroupName}, Resources: []string{"volumesnapshots"}, Verbs: []string{"create", "get", "list", "watch"},
	}}}
	if _, err := e.kube.RbacV1().Roles(e.ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "tenant", Namespace: e.ns}}}
	if _, err := e.kube.RbacV1().RoleBindings(e.ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(e.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + e.ns + ":tenant"}
	c := clientset.NewForConfigOrDie(cfg)
	if err := c.SnapshotV1().VolumeSnapshots(e.ns).Delete(ctx, "anything", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant's delete: %v, want Forbidden", err)
	}
	return c
}

// forge creates, as the tenant, a snapshot of claim that looks like one the schedule took: its
// label, an owner reference to it and the run time `at` (a far future one sorts first).
func forge(t *testing.T, tenant clientset.Interface, s *schedulev1alpha1.SnapshotSchedule, name, claim string, at time.Time) {
	t.Helper()
	vs := &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace,
			Labels:      map[string]string{schedulev1alpha1.LabelSchedule: s.Name},
			Annotations: map[string]string{schedulev1alpha1.AnnotationScheduledTime: at.UTC().Format(time.RFC3339)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: schedulev1alpha1.SchemeGroupVersion.String(),
				Kind: "SnapshotSchedule", Name: s.Name, UID: s.UID, Controller: ptr.To(true)}}},
		Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: &claim}},
	}
	if _, err := tenant.SnapshotV1().VolumeSnapshots(s.Namespace).Create(context.Background(), vs, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the tenant's snapshot %s: %v", name, err)
	}
}

// TestTenantCannotPruneBackups is the attack of a tenant who may create VolumeSnapshots but not
// delete them: snapshots dressed as the schedule's (its label, an owner reference, a run in
// 2099), ready, must not make retention delete the genuine backups, and names taken in advance
// (the next run's, in today's and in the old spelling) must neither stop the run nor be adopted
// as the schedule's.
func TestTenantCannotPruneBackups(t *testing.T) {
	e := setup(t)
	tenant := e.tenant(t)
	e.claim(t, "data", map[string]string{"app": "db"})
	s := e.schedule(t, "hourly", hourly(&schedulev1alpha1.Retention{MaxCount: int32p(2)}))
	e.resume(t, "hourly", start)
	e.startController(t)
	at := func(h int) time.Time { return start.Add(time.Duration(h) * time.Hour) }
	// Names spelled out: <schedule>-<claim>-<first 8 hex digits of sha256("hourly/data")>-<run>.
	name := func(h int) string { return "hourly-data-421878c7-" + stamp(at(h)) }
	for h := 1; h <= 2; h++ {
		e.run(t, "hourly", at(h))
		e.setStatus(t, name(h), true, "")
	}

	future := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	forged := []string{"fake-1", "fake-2", "fake-3"}
	for i, n := range forged {
		forge(t, tenant, s, n, "data", future.Add(time.Duration(i)*time.Hour))
		e.setStatus(t, n, true, "") // the snapshot controller would make them ready
	}
	squatted := []string{name(3), "hourly-data-" + stamp(at(3))}
	for _, n := range squatted {
		forge(t, tenant, s, n, "data", at(3))
	}

	e.run(t, "hourly", at(3))
	st := e.waitSchedule(t, "hourly", func(s *schedulev1alpha1.SnapshotSchedule) bool { return len(s.Status.Snapshots) == 3 }).Status
	run3 := st.Snapshots[2].Name
	if !strings.HasPrefix(run3, name(3)+"-") {
		t.Fatalf("run 3 took %q, want a name of its own beginning %s-", run3, name(3))
	}
	e.setStatus(t, run3, true, "")
	st = e.waitSchedule(t, "hourly", func(s *schedulev1alpha1.SnapshotSchedule) bool { return s.Status.PrunedSnapshots == 1 }).Status

	var recorded []string
	for _, r := range st.Snapshots {
		recorded = append(recorded, r.Name)
	}
	if want := []string{name(2), run3}; !reflect.DeepEqual(recorded, want) {
		t.Errorf("status.snapshots %q, want %q", recorded, want)
	}
	got := names(e.snapshots(t))
	for _, n := range []string{name(2), "fake-1", "fake-2", "fake-3", squatted[0], squatted[1], run3} {
		if !slices.Contains(got, n) {
			t.Errorf("%s is gone; left: %q", n, got)
		}
	}
	if slices.Contains(got, name(1)) {
		t.Errorf("%s, the oldest genuine backup, was not pruned (maxCount 2)", name(1))
	}
	if st.KeptSnapshots != 2 {
		t.Errorf("keptSnapshots %d, want 2", st.KeptSnapshots)
	}
}

// TestDeleteSnapshotsWithSchedule: deleting a schedule leaves its snapshots, unless it was
// created with deleteSnapshotsWithSchedule: true; turning the field on gives the snapshots taken
// before the owner reference too (the garbage collector of kube-controller-manager deletes them).
func TestDeleteSnapshotsWithSchedule(t *testing.T) {
	e := setup(t)
	e.claim(t, "data", map[string]string{"app": "db"})
	e.schedule(t, "kept", hourly(nil))
	e.schedule(t, "owned", hourly(nil))
	e.resume(t, "kept", start)
	e.resume(t, "owned", start)
	e.startController(t)
	e.run(t, "kept", start.Add(time.Hour))
	e.waitSchedule(t, "owned", lastSchedule(start.Add(time.Hour)))
	kept, owned := "kept-data-3228747b-"+stamp(start.Add(time.Hour)), "owned-data-968b4ec7-"+stamp(start.Add(time.Hour))
	for _, n := range []string{kept, owned} {
		if vs := e.snapshots(t)[n]; vs == nil || len(vs.OwnerReferences) != 0 {
			t.Fatalf("%s: %v, want it without owner references", n, vs)
		}
	}

	e.update(t, "owned", func(s *schedulev1alpha1.SnapshotSchedule) { s.Spec.DeleteSnapshotsWithSchedule = true })
	testenv.WaitFor(t, owned+" owned by its schedule", 30*time.Second, func(ctx context.Context) (*snapshotv1.VolumeSnapshot, error) {
		return e.client.SnapshotV1().VolumeSnapshots(e.ns).Get(ctx, owned, metav1.GetOptions{})
	}, func(vs *snapshotv1.VolumeSnapshot) bool { return vs != nil && len(vs.OwnerReferences) == 1 })

	ctx := context.Background()
	for _, n := range []string{"kept", "owned"} { // kept first: its deletion is processed first
		if err := e.client.ScheduleV1alpha1().SnapshotSchedules(e.ns).Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, owned+" deleted with its schedule", time.Minute, func(ctx context.Context) (*snapshotv1.VolumeSnapshot, error) {
		return e.client.SnapshotV1().VolumeSnapshots(e.ns).Get(ctx, owned, metav1.GetOptions{})
	}, func(vs *snapshotv1.VolumeSnapshot) bool { return vs == nil || vs.DeletionTimestamp != nil })
	if e.snapshots(t)[kept] == nil {
		t.Errorf("%s was deleted with its schedule", kept)
	}
}
