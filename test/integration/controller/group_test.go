package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/metrics"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/test/testenv"
)

func (f *fixture) groupClass(t *testing.T, name, driver string, policy snapshotv1.DeletionPolicy) {
	_, err := f.client.GroupsnapshotV1().VolumeGroupSnapshotClasses().Create(context.Background(), &groupv1.VolumeGroupSnapshotClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{protocol.AnnGroupDefaultClass: "true"}},
		Driver:     driver, DeletionPolicy: policy,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.client.GroupsnapshotV1().VolumeGroupSnapshotClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func (f *fixture) groupSnapshot(t *testing.T, name string, labels map[string]string) *groupv1.VolumeGroupSnapshot {
	return testenv.CreateGroupSnapshot(t, f.client, f.ns, name, labels)
}

// waitGroup waits until ok holds for the group snapshot (nil once it is gone).
func (f *fixture) waitGroup(t *testing.T, name string, ok func(*groupv1.VolumeGroupSnapshot) bool) *groupv1.VolumeGroupSnapshot {
	t.Helper()
	return testenv.WaitFor(t, "group snapshot "+name, 30*time.Second, func(ctx context.Context) (*groupv1.VolumeGroupSnapshot, error) {
		return f.client.GroupsnapshotV1().VolumeGroupSnapshots(f.ns).Get(ctx, name, metav1.GetOptions{})
	}, ok)
}

func groupAbsent(vgs *groupv1.VolumeGroupSnapshot) bool { return vgs == nil }

func groupReady(vgs *groupv1.VolumeGroupSnapshot) bool {
	return protocol.Ready(vgs)
}

func groupError(substr string) func(*groupv1.VolumeGroupSnapshot) bool {
	return func(vgs *groupv1.VolumeGroupSnapshot) bool {
		return vgs != nil && vgs.Status != nil && vgs.Status.Error != nil && strings.Contains(*vgs.Status.Error.Message, substr)
	}
}

// groupDriver is the start of the group tests: a default VolumeGroupSnapshotClass called name
// for the driver name.csi.test with policy and an actor playing its sidecar.
func (f *fixture) groupDriver(t *testing.T, name string, policy snapshotv1.DeletionPolicy) (string, *actor) {
	driver := name + ".csi.test"
	f.groupClass(t, name, driver, policy)
	return driver, startActor(t, f.client, driver)
}

// labelledClaims creates bound claims of driver with labels and returns their volume handles.
func (f *fixture) labelledClaims(t *testing.T, driver string, labels map[string]string, names ...string) []string {
	var handles []string
	for _, name := range names {
		f.volume(t, name, driver)
		f.labelClaim(t, name, labels)
		handles = append(handles, "vol-"+f.ns+"-"+name)
	}
	return handles
}

// labelClaim puts labels on a claim.
func (f *fixture) labelClaim(t *testing.T, name string, labels map[string]string) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pvc, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pvc.Labels = labels
		_, err = f.kube.CoreV1().PersistentVolumeClaims(f.ns).Update(context.Background(), pvc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGroupSnapshotLifecycle snapshots three claims together, checks the members, refuses to let
// a member go alone, and deletes the group.
func TestGroupSnapshotLifecycle(t *testing.T) {
	t.Parallel()
	f := setup(t)
	driver, a := f.groupDriver(t, "group", snapshotv1.VolumeSnapshotContentDelete)
	labels := map[string]string{"app": "db"}
	handles := f.labelledClaims(t, driver, labels, "data", "log", "wal")
	vgs := f.waitGroup(t, f.groupSnapshot(t, "db", labels).Name, groupReady)
	if *vgs.Status.BoundVolumeGroupSnapshotContentName != protocol.GroupContentName(vgs.UID) || vgs.Status.CreationTime == nil {
		t.Errorf("group status %+v", vgs.Status)
	}
	if !slices.Contains(vgs.Finalizers, protocol.GroupSnapshotBoundFinalizer) {
		t.Errorf("group finalizers %v", vgs.Finalizers)
	}
	content, err := f.client.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(context.Background(), protocol.GroupContentName(vgs.UID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(content.Spec.Source.VolumeHandles, handles) || content.Spec.VolumeGroupSnapshotRef.UID != vgs.UID {
		t.Errorf("group content spec %+v", content.Spec)
	}
	for _, h := range handles {
		member := f.waitSnapshot(t, protocol.MemberSnapshotName(vgs.UID, h), ready)
		if member.Status.VolumeGroupSnapshotName == nil || *member.Status.VolumeGroupSnapshotName != "db" ||
			!slices.Contains(member.Finalizers, protocol.SnapshotInGroupFinalizer) ||
			*member.Status.BoundVolumeSnapshotContentName != protocol.MemberContentName(vgs.UID, h) {
			t.Errorf("member %s: status %+v finalizers %v", member.Name, member.Status, member.Finalizers)
		}
		// Its claim is its source, as upstream's members name theirs.
		if claim := strings.TrimPrefix(h, "vol-"+f.ns+"-"); ptr.Deref(member.Spec.Source.PersistentVolumeClaimName, "") != claim {
			t.Errorf("member %s: source %+v, want claim %s", member.Name, member.Spec.Source, claim)
		}
	}

	// A member cannot go while its group exists.
	first := protocol.MemberSnapshotName(vgs.UID, handles[0])
	looked := processed.After(t, snapshotQueue, f.key(first))
	f.deleteSnapshot(t, first)
	var held *snapshotv1.VolumeSnapshot
	looked.Until(t, "it saw the member being deleted", func(controller.Result) bool {
		held = f.waitSnapshot(t, first, func(vs *snapshotv1.VolumeSnapshot) bool { return vs != nil })
		return held.DeletionTimestamp != nil
	})
	if !ready(held) || !slices.Contains(held.Finalizers, protocol.SnapshotInGroupFinalizer) {
		t.Errorf("member deleted alone changed: finalizers %v, status %+v", held.Finalizers, held.Status)
	}
	if _, err := f.client.SnapshotV1().VolumeSnapshotContents().Get(context.Background(), protocol.MemberContentName(vgs.UID, handles[0]), metav1.GetOptions{}); err != nil {
		t.Errorf("member content went with a member deleted alone: %v", err)
	}

	if err := f.client.GroupsnapshotV1().VolumeGroupSnapshots(f.ns).Delete(context.Background(), "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitGroup(t, "db", groupAbsent)
	for _, h := range handles {
		f.waitSnapshot(t, protocol.MemberSnapshotName(vgs.UID, h), absent)
		f.waitContentGone(t, protocol.MemberContentName(vgs.UID, h))
	}
	f.waitGroupContentGone(t, content.Name)
	if got := a.deletedHandles(); !slices.Equal(got, []string{"group-" + string(vgs.UID)}) {
		t.Errorf("backend deletions %v, want the group snapshot once", got)
	}
	for _, op := range []string{metrics.OperationCreateGroup, metrics.OperationDeleteGroup} {
		var m dto.Metric
		if err := metrics.Operations.WithLabelValues(op, metrics.StatusSuccess).(prometheus.Histogram).Write(&m); err != nil || m.GetHistogram().GetSampleCount() == 0 {
			t.Errorf("no %s latency observed: %v", op, err)
		}
	}
}

// TestGroupDefaultClass: a group that names no class takes its driver's one default class, which
// is recorded in its spec, as upstream's controller does; none or two defaults are errors in
// upstream's words (Kubernetes' VolumeGroupSnapshotClass e2e suite checks all three).
func TestGroupDefaultClass(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.labelledClaims(t, "groupnodefault.csi.test", map[string]string{"app": "nodefault"}, "alone")
	f.groupSnapshot(t, "classless", map[string]string{"app": "nodefault"})
	f.waitGroup(t, "classless", groupError("cannot find default group snapshot class"))

	driver := "groupdefault.csi.test"
	startActor(t, f.client, driver)
	f.groupClass(t, "groupdefault-a", driver, snapshotv1.VolumeSnapshotContentDelete)
	f.groupClass(t, "groupdefault-b", driver, snapshotv1.VolumeSnapshotContentDelete)
	labels := map[string]string{"app": "defaults"}
	f.labelledClaims(t, driver, labels, "one", "two")
	f.groupSnapshot(t, "g", labels)
	f.waitGroup(t, "g", groupError("2 default snapshot classes were found"))

	if err := f.client.GroupsnapshotV1().VolumeGroupSnapshotClasses().Delete(context.Background(), "groupdefault-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	vgs := f.waitGroup(t, "g", groupReady)
	if c := vgs.Spec.VolumeGroupSnapshotClassName; c == nil || *c != "groupdefault-a" {
		t.Errorf("the default class was not recorded in the group's spec: %v", c)
	}
}

func TestGroupSelectorErrors(t *testing.T) {
	t.Parallel()
	f := setup(t)
	driver, _ := f.groupDriver(t, "grouperr", snapshotv1.VolumeSnapshotContentDelete)
	f.groupSnapshot(t, "nothing", map[string]string{"app": "none"})
	f.waitGroup(t, "nothing", groupError("matches no PersistentVolumeClaim"))

	f.labelledClaims(t, driver, map[string]string{"app": "db"}, "one")
	f.groupSnapshot(t, "selected", map[string]string{"app": "db"})
	f.waitGroup(t, "selected", groupReady)
}

// TestGroupRetain deletes a Retain group: the member snapshots go, while the member contents, the
// group content and the backend group snapshot stay.
func TestGroupRetain(t *testing.T) {
	t.Parallel()
	f := setup(t)
	driver, a := f.groupDriver(t, "groupretain", snapshotv1.VolumeSnapshotContentRetain)
	labels := map[string]string{"app": "kept"}
	f.labelledClaims(t, driver, labels, "a")
	vgs := f.waitGroup(t, f.groupSnapshot(t, "kept", labels).Name, groupReady)
	member := protocol.MemberSnapshotName(vgs.UID, "vol-"+f.ns+"-a")
	f.waitSnapshot(t, member, ready)
	memberContent := processed.After(t, contentQueue, clusterKey(protocol.MemberContentName(vgs.UID, "vol-"+f.ns+"-a")))
	groupContent := processed.After(t, groupContentQueue, clusterKey(protocol.GroupContentName(vgs.UID)))
	if err := f.client.GroupsnapshotV1().VolumeGroupSnapshots(f.ns).Delete(context.Background(), vgs.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitGroup(t, vgs.Name, groupAbsent)
	f.waitSnapshot(t, member, absent)
	memberContent.Until(t, "its snapshot is gone", func(controller.Result) bool { return gone(f.getSnapshot(context.Background(), member)) })
	groupContent.Until(t, "its group is gone", func(controller.Result) bool {
		_, err := f.client.GroupsnapshotV1().VolumeGroupSnapshots(f.ns).Get(context.Background(), vgs.Name, metav1.GetOptions{})
		return gone(err)
	})
	if _, err := f.client.SnapshotV1().VolumeSnapshotContents().Get(context.Background(), protocol.MemberContentName(vgs.UID, "vol-"+f.ns+"-a"), metav1.GetOptions{}); err != nil {
		t.Errorf("retained member content: %v", err)
	}
	if _, err := f.client.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(context.Background(), protocol.GroupContentName(vgs.UID), metav1.GetOptions{}); err != nil {
		t.Errorf("retained group content: %v", err)
	}
	if len(a.deletedHandles()) != 0 {
		t.Errorf("backend deletions with Retain: %v", a.deletedHandles())
	}
}

// TestPreProvisionedGroup binds a group snapshot to an existing group content. As upstream's
// controller, it makes no members for it: the importer imports them as pre-provisioned snapshots
// owned by the group (as Kubernetes' e2e suite does), which become ready and go with the group.
func TestPreProvisionedGroup(t *testing.T) {
	t.Parallel()
	f := setup(t)
	driver := "grouppre.csi.test"
	startActor(t, f.client, driver)
	name := "imported-" + f.ns
	testenv.Create(t, f.client.GroupsnapshotV1().VolumeGroupSnapshotContents(), &groupv1.VolumeGroupSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: groupv1.VolumeGroupSnapshotContentSpec{
			VolumeGroupSnapshotRef: corev1.ObjectReference{Name: "imported", Namespace: f.ns},
			DeletionPolicy:         snapshotv1.VolumeSnapshotContentDelete, Driver: driver,
			Source: groupv1.VolumeGroupSnapshotContentSource{GroupSnapshotHandles: &groupv1.GroupSnapshotHandles{
				VolumeGroupSnapshotHandle: "g-7", VolumeSnapshotHandles: []string{"s-1", "s-2"},
			}},
		},
	})
	testenv.Create(t, f.client.GroupsnapshotV1().VolumeGroupSnapshots(f.ns), &groupv1.VolumeGroupSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "imported"},
		Spec:       groupv1.VolumeGroupSnapshotSpec{Source: groupv1.VolumeGroupSnapshotSource{VolumeGroupSnapshotContentName: &name}},
	})
	vgs := f.waitGroup(t, "imported", groupReady)
	content, err := f.client.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || content.Spec.VolumeGroupSnapshotRef.UID != vgs.UID || !slices.Contains(content.Finalizers, protocol.GroupContentBoundFinalizer) {
		t.Fatalf("group content not bound: %v %+v", err, content)
	}
	// The sync that found the group ready would have made members before.
	if list, err := f.client.SnapshotV1().VolumeSnapshots(f.ns).List(context.Background(), metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Fatalf("snapshots made for a pre-provisioned group: %v %d", err, len(list.Items))
	}

	var members []string
	for i, handle := range []string{"s-1", "s-2"} {
		vs, vsc := fmt.Sprintf("member-%d", i), fmt.Sprintf("member-%d-%s", i, f.ns)
		members = append(members, vs)
		testenv.Create(t, f.client.SnapshotV1().VolumeSnapshotContents(), &snapshotv1.VolumeSnapshotContent{
			ObjectMeta: metav1.ObjectMeta{Name: vsc},
			Spec: snapshotv1.VolumeSnapshotContentSpec{
				VolumeSnapshotRef: corev1.ObjectReference{Name: vs, Namespace: f.ns},
				DeletionPolicy:    snapshotv1.VolumeSnapshotContentDelete, Driver: driver,
				Source: snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: ptr.To(handle)},
			},
		})
		testenv.Create(t, f.client.SnapshotV1().VolumeSnapshots(f.ns), &snapshotv1.VolumeSnapshot{
			ObjectMeta: metav1.ObjectMeta{Name: vs, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: groupv1.SchemeGroupVersion.String(), Kind: "VolumeGroupSnapshot", Name: vgs.Name, UID: vgs.UID}}},
			Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{VolumeSnapshotContentName: &vsc}},
		})
		f.waitSnapshot(t, vs, ready)
	}
	if err := f.client.GroupsnapshotV1().VolumeGroupSnapshots(f.ns).Delete(context.Background(), vgs.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, vs := range members {
		waitGone(t, "member "+vs, func(ctx context.Context) error { return f.getSnapshot(ctx, vs) })
	}
	waitGone(t, "group content "+name, func(ctx context.Context) error {
		_, err := f.client.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(ctx, name, metav1.GetOptions{})
		return err
	})
}
