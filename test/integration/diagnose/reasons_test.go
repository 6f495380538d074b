package diagnose

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/diagnose"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// expect checks that describe and stuck agree on the rule and the reason of one object.
func (f *fixture) expect(kind, describeKind, name string, rule diagnose.Rule, reason string) string {
	f.t.Helper()
	text, d := f.describe(describeKind, name)
	if d.Rule != rule || d.Reason != reason {
		f.t.Errorf("describe %s: got %s %q, want %s %q", name, d.Rule, d.Reason, rule, reason)
	}
	mustContain(f.t, text, "Why: "+reason)
	it, ok := item(f.stuck(), kind, name)
	if !ok {
		f.t.Fatalf("stuck does not list %s %s", kind, name)
	}
	if it.Rule != rule || it.Reason != reason || it.Namespace != d.Namespace || it.Age == "" {
		f.t.Errorf("stuck lists %+v, want rule %s and reason %q", it, rule, reason)
	}
	return text
}

// waitingForSidecar writes a snapshot "snap" of claim "data" whose content waits for the
// driver's sidecar, as the controller would have left it.
func (f *fixture) waitingForSidecar() *snapshotv1.VolumeSnapshot {
	f.t.Helper()
	class := f.class()
	f.boundClaim("data")
	vs := f.snapshot("snap", "data", class, nil)
	// The status names the content the controller would have made.
	vs.Status = &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To(protocol.ContentName(vs.UID)), ReadyToUse: ptr.To(false)}
	vs, err := f.snap.SnapshotV1().VolumeSnapshots(f.ns).UpdateStatus(f.ctx, vs, metav1.UpdateOptions{})
	f.check(err)
	f.content(vs, class, snapshotv1.VolumeSnapshotContentDelete, nil)
	return vs
}

// TestNoSidecar: the sidecar's Lease is twelve minutes old. From ten minutes on an age reads in
// whole minutes, so a slow machine (a second between writing the Lease and reading it) cannot turn
// "7m" into "7m1s".
func TestNoSidecar(t *testing.T) {
	f := newFixture(t)
	vs := f.waitingForSidecar()
	f.lease(protocol.LegacySidecarLeaseName(f.driver), 12*time.Minute)

	want := fmt.Sprintf("waiting for csi-snapshotter of driver %s: no sidecar for %s has renewed its lease for 12m", f.driver, f.driver)
	text := f.expect("VolumeSnapshot", "snapshot", "snap", diagnose.RuleNoSidecar, want)
	mustContain(t, text, "VolumeSnapshot "+f.ns+"/snap [Pending]", "PersistentVolumeClaim "+f.ns+"/data [Bound]",
		"csi driver "+f.driver+", volume handle vol-data", "Driver "+f.driver+" [NoSidecar]",
		"sidecar Lease "+f.ns+"/"+protocol.LegacySidecarLeaseName(f.driver)+" last held by sidecar-0, not renewed for 12m",
		"VolumeSnapshotContent "+protocol.ContentName(vs.UID)+" [Pending]", "BackendSnapshot <none> [NotCreated]")
	// The content is stuck for the same reason.
	if it, ok := item(f.stuck(), "VolumeSnapshotContent", protocol.ContentName(vs.UID)); !ok || it.Rule != diagnose.RuleNoSidecar {
		t.Errorf("content: got %+v", it)
	}

	// Once a sidecar of the reference implementation renews its Lease, the sidecar is at work.
	f.lease("external-snapshotter-leader-"+sanitize(f.driver), 0)
	_, d := f.describe("snapshot", "snap")
	if d.Rule != diagnose.RuleSidecarWorking {
		t.Errorf("with a live sidecar: got %s %q", d.Rule, d.Reason)
	}
}

// sanitize is the reference sidecar's Lease name rule for the drivers of these tests.
func sanitize(driver string) string {
	out := []byte(driver)
	for i, c := range out {
		if c == '.' {
			out[i] = '-'
		}
	}
	return string(out)
}

func TestMissingClass(t *testing.T) {
	f := newFixture(t)
	f.boundClaim("data")
	f.snapshot("snap", "data", "missing-"+f.ns, nil)
	text := f.expect("VolumeSnapshot", "snapshot", "snap", diagnose.RuleClassNotFound, "class missing-"+f.ns+" not found")
	mustContain(t, text, "VolumeSnapshotClass missing-"+f.ns+" [NotFound]")
}

func TestUnboundClaim(t *testing.T) {
	f := newFixture(t)
	class := f.class()
	f.claim("data", "", ptr.To("no-such-storage-class"))
	f.snapshot("snap", "data", class, nil)
	f.expect("VolumeSnapshot", "snapshot", "snap", diagnose.RuleClaimNotBound, "claim data is not bound (phase Pending)")
}

func TestFailingDriver(t *testing.T) {
	f := newFixture(t)
	class := f.class()
	f.boundClaim("data")
	vs := f.snapshot("snap", "data", class, nil)
	msg := "rpc error: code = ResourceExhausted desc = pool full"
	f.content(vs, class, snapshotv1.VolumeSnapshotContentDelete, &snapshotv1.VolumeSnapshotContentStatus{
		ReadyToUse: ptr.To(false), Error: &snapshotv1.VolumeSnapshotError{Message: &msg, Time: ptr.To(metav1.Now())}})
	f.lease(protocol.SidecarLeaseName(f.driver), 0)
	text := f.expect("VolumeSnapshot", "snapshot", "snap", diagnose.RuleBackendError, "backend error: "+msg)
	mustContain(t, text, "status.error: "+msg, "Driver "+f.driver+" [SidecarLive]")
}

func TestDeletionBlockedByRestore(t *testing.T) {
	f := newFixture(t)
	class := f.class()
	f.boundClaim("data")
	vs := f.snapshot("snap", "data", class, &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)},
		protocol.SnapshotAsSourceFinalizer)
	f.content(vs, class, snapshotv1.VolumeSnapshotContentDelete, &snapshotv1.VolumeSnapshotContentStatus{
		ReadyToUse: ptr.To(true), SnapshotHandle: ptr.To("snap-1")})
	f.claim("restored", "", ptr.To("no-such-storage-class"), func(pvc *corev1.PersistentVolumeClaim) {
		pvc.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: "snap"}
	})
	// A ready snapshot is not stuck, and describe says so.
	if _, ok := item(f.stuck(), "VolumeSnapshot", "snap"); ok {
		t.Error("stuck lists a ready snapshot")
	}
	if _, d := f.describe("snapshot", "snap"); d.Rule != diagnose.RuleReady {
		t.Errorf("ready snapshot: got %s %q", d.Rule, d.Reason)
	}
	f.check(f.snap.SnapshotV1().VolumeSnapshots(f.ns).Delete(f.ctx, "snap", metav1.DeleteOptions{}))
	text := f.expect("VolumeSnapshot", "snapshot", "snap", diagnose.RuleDeletionBlocked,
		"deletion waits for claim restored being restored from this snapshot")
	mustContain(t, text, "VolumeSnapshot "+f.ns+"/snap [Deleting]",
		"finalizer "+protocol.SnapshotAsSourceFinalizer+": removed by snapshot-controller once no claim is being restored from this snapshot",
		"PersistentVolumeClaim "+f.ns+"/restored [Pending]")
}

func TestRetainContentLeftBehind(t *testing.T) {
	f := newFixture(t)
	class := f.class()
	name := "retained-" + f.ns
	f.contentNamed(name, "gone", "0b0e6a42-6d6f-4a57-9b59-5b1d0a6f1c11", class, snapshotv1.VolumeSnapshotContentRetain,
		&snapshotv1.VolumeSnapshotContentStatus{ReadyToUse: ptr.To(true), SnapshotHandle: ptr.To("backend-42")})
	f.expect("VolumeSnapshotContent", "content", name, diagnose.RuleRetainLeftBehind,
		"Retain content left behind: VolumeSnapshot "+f.ns+"/gone is gone; backend snapshot backend-42 stays until this content is deleted by hand")
}

func TestGroupWithFailedMember(t *testing.T) {
	f := newFixture(t)
	groupClass := "gclass-" + f.ns
	_, err := f.snap.GroupsnapshotV1().VolumeGroupSnapshotClasses().Create(f.ctx, &groupv1.VolumeGroupSnapshotClass{
		ObjectMeta: metav1.ObjectMeta{Name: groupClass}, Driver: f.driver, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete,
	}, metav1.CreateOptions{})
	f.check(err)
	t.Cleanup(func() {
		_ = f.snap.GroupsnapshotV1().VolumeGroupSnapshotClasses().Delete(context.Background(), groupClass, metav1.DeleteOptions{})
	})
	f.boundClaim("a")
	f.boundClaim("b")
	vgs := f.group("group", groupClass)
	msg := "member volume vol-b is read-only"
	for _, m := range []struct {
		name   string
		status *snapshotv1.VolumeSnapshotStatus
	}{
		{"member-a", &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}},
		{"member-b", &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(false), Error: &snapshotv1.VolumeSnapshotError{Message: &msg}}},
	} {
		vs, err := f.snap.SnapshotV1().VolumeSnapshots(f.ns).Create(f.ctx, &snapshotv1.VolumeSnapshot{
			ObjectMeta: metav1.ObjectMeta{Name: m.name, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: groupv1.SchemeGroupVersion.String(), Kind: "VolumeGroupSnapshot", Name: vgs.Name, UID: vgs.UID}}},
			Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{VolumeSnapshotContentName: ptr.To("c-" + m.name + "-" + f.ns)}},
		}, metav1.CreateOptions{})
		f.check(err)
		vs.Status = m.status
		_, err = f.snap.SnapshotV1().VolumeSnapshots(f.ns).UpdateStatus(f.ctx, vs, metav1.UpdateOptions{})
		f.check(err)
	}
	text := f.expect("VolumeGroupSnapshot", "group", "group", diagnose.RuleMemberFailed, "member snapshot member-b failed: "+msg)
	mustContain(t, text, "VolumeGroupSnapshot "+f.ns+"/group [Pending]", "PersistentVolumeClaim "+f.ns+"/a [Bound]",
		"VolumeSnapshot "+f.ns+"/member-b [Failed]", "VolumeGroupSnapshotClass "+groupClass+" [Found]")
}

// TestStuckFilters checks --for, -A and the table output.
func TestStuckFilters(t *testing.T) {
	f := newFixture(t)
	f.boundClaim("data")
	f.snapshot("snap", "data", "missing-"+f.ns, nil)
	if out := f.run("stuck", "--for=1h"); out != "" {
		t.Errorf("--for=1h listed a new snapshot:\n%s", out)
	}
	f.run("stuck", "-A", "--for=0") // every namespace: must not fail on other tests' objects
	table := f.run("stuck", "--for=0", "-o", "wide")
	mustContain(t, table, "KIND", "REASON", "VolumeSnapshot", f.ns, "snap", string(diagnose.RuleClassNotFound), "class missing-"+f.ns+" not found")
	yaml := f.run("stuck", "--for=0", "-o", "yaml")
	mustContain(t, yaml, "kind: VolumeSnapshot", "name: snap", "reason: class missing-"+f.ns+" not found")
}
