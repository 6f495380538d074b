package snapshot

import (
	"context"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	snapfake "github.com/shutter-csi/shutter/client/clientset/versioned/fake"
	snapinformers "github.com/shutter-csi/shutter/client/informers/externalversions"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

const testDriver = "d.example.com"

// Object builders: a valid object, changed by options.

func newSnapshot(opts ...func(*snapshotv1.VolumeSnapshot)) *snapshotv1.VolumeSnapshot {
	vs := &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: "ns", UID: "vs-uid", ResourceVersion: "1"},
		Spec:       snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("pvc")}},
	}
	for _, o := range opts {
		o(vs)
	}
	return vs
}

// groupMember makes vs a member of group "group", as the group makes its members.
func groupMember(vs *snapshotv1.VolumeSnapshot) {
	vs.Name = protocol.MemberSnapshotName("group-uid", "vol-1")
	vs.OwnerReferences = []metav1.OwnerReference{{APIVersion: groupv1.SchemeGroupVersion.String(), Kind: "VolumeGroupSnapshot",
		Name: "group", UID: "group-uid", Controller: ptr.To(true)}}
}

func preProvisioned(vs *snapshotv1.VolumeSnapshot) {
	vs.Spec.Source = snapshotv1.VolumeSnapshotSource{VolumeSnapshotContentName: ptr.To("imported")}
}

func deleting(vs *snapshotv1.VolumeSnapshot) {
	vs.DeletionTimestamp = ptr.To(metav1.Now())
	vs.Finalizers = []string{protocol.SnapshotAsSourceFinalizer, protocol.SnapshotBoundFinalizer}
}

func boundTo(name string) func(*snapshotv1.VolumeSnapshot) {
	return func(vs *snapshotv1.VolumeSnapshot) {
		vs.Status = &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To(name), ReadyToUse: ptr.To(false)}
		vs.Finalizers = []string{protocol.SnapshotAsSourceFinalizer, protocol.SnapshotBoundFinalizer}
	}
}

func newContent(name string, opts ...func(*snapshotv1.VolumeSnapshotContent)) *snapshotv1.VolumeSnapshotContent {
	c := &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1", Finalizers: []string{protocol.ContentBoundFinalizer},
			CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour))},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{Namespace: "ns", Name: "snap", UID: "vs-uid"},
			DeletionPolicy:    snapshotv1.VolumeSnapshotContentDelete, Driver: testDriver,
			Source: snapshotv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To("vol-1")},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func readyContent(c *snapshotv1.VolumeSnapshotContent) {
	c.Status = &snapshotv1.VolumeSnapshotContentStatus{SnapshotHandle: ptr.To("s-1"), ReadyToUse: ptr.To(true), RestoreSize: ptr.To(int64(1024))}
}

func newClaim(opts ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc", Namespace: "ns", ResourceVersion: "1"},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: "pv"},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	for _, o := range opts {
		o(pvc)
	}
	return pvc
}

func newVolume(csi bool) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}}
	if csi {
		pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: "vol-1"}
	} else {
		pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/x"}
	}
	return pv
}

func newClass(name string, isDefault bool, params map[string]string) *snapshotv1.VolumeSnapshotClass {
	c := &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Driver: testDriver,
		DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete, Parameters: params}
	if isDefault {
		c.Annotations = map[string]string{protocol.AnnDefaultClass: "true"}
	}
	return c
}

// testController builds a Controller on fake clientsets whose informer stores hold objs.
func testController(t *testing.T, objs ...runtime.Object) (*Controller, *kubefake.Clientset, *snapfake.Clientset, *record.FakeRecorder) {
	c, kube, snap, recorder, _ := testControllerInformers(t, objs...)
	return c, kube, snap, recorder
}

// testControllerInformers is testController that also returns the snapshot informers, whose
// stores a test may change as a watch event would.
func testControllerInformers(t *testing.T, objs ...runtime.Object) (*Controller, *kubefake.Clientset, *snapfake.Clientset,
	*record.FakeRecorder, snapinformers.SharedInformerFactory) {
	var kubeObjs, snapObjs []runtime.Object
	for _, o := range objs {
		switch o.(type) {
		case *corev1.PersistentVolumeClaim, *corev1.PersistentVolume:
			kubeObjs = append(kubeObjs, o)
		default:
			snapObjs = append(snapObjs, o)
		}
	}
	kube, snap := kubefake.NewClientset(kubeObjs...), snapfake.NewClientset(snapObjs...)
	kf, sf := informers.NewSharedInformerFactory(kube, 0), snapinformers.NewSharedInformerFactory(snap, 0)
	recorder := record.NewFakeRecorder(10)
	c, err := New(Clients{Kube: kube, Snapshots: snap}, kf, sf, recorder, Options{PreventVolumeModeConversion: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *snapshotv1.VolumeSnapshot:
			err = sf.Snapshot().V1().VolumeSnapshots().Informer().GetStore().Add(o)
		case *snapshotv1.VolumeSnapshotContent:
			err = sf.Snapshot().V1().VolumeSnapshotContents().Informer().GetStore().Add(o)
		case *snapshotv1.VolumeSnapshotClass:
			err = sf.Snapshot().V1().VolumeSnapshotClasses().Informer().GetStore().Add(o)
		case *corev1.PersistentVolumeClaim:
			err = kf.Core().V1().PersistentVolumeClaims().Informer().GetStore().Add(o)
		case *corev1.PersistentVolume:
			err = kf.Core().V1().PersistentVolumes().Informer().GetStore().Add(o)
		case *groupv1.VolumeGroupSnapshot:
			err = sf.Groupsnapshot().V1().VolumeGroupSnapshots().Informer().GetStore().Add(o)
		case *groupv1.VolumeGroupSnapshotContent:
			err = sf.Groupsnapshot().V1().VolumeGroupSnapshotContents().Informer().GetStore().Add(o)
		case *groupv1.VolumeGroupSnapshotClass:
			err = sf.Groupsnapshot().V1().VolumeGroupSnapshotClasses().Informer().GetStore().Add(o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The fake API server stamps no creation time; a clock at the zero time makes new contents
	// look just created, as they would be.
	setClock(c, clocktesting.NewFakePassiveClock(time.Time{}))
	kube.ClearActions()
	snap.ClearActions()
	return c, kube, snap, recorder, sf
}

// setClock gives the controller and its reconcilers clk.
func setClock(c *Controller, clk clock.PassiveClock) {
	c.clock, c.singles.clock = clk, clk
	if g := c.groups.Load(); g != nil {
		g.r.clock = clk
	}
}

// counted is the number of writes the write layer counted.
func counted(t *testing.T, c *Controller) int {
	t.Helper()
	n := 0.0
	ch := make(chan prometheus.Metric, 100)
	c.writes.count.Collect(ch)
	close(ch)
	for m := range ch {
		var out dto.Metric
		if err := m.Write(&out); err != nil {
			t.Fatal(err)
		}
		n += out.GetCounter().GetValue()
	}
	return int(n)
}

// writes lists the write actions as "verb resource[/subresource]".
func writes(actions ...[]k8stesting.Action) []string {
	var out []string
	for _, list := range actions {
		for _, a := range list {
			if a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
				continue
			}
			name := a.GetVerb() + " " + a.GetResource().Resource
			if a.GetSubresource() != "" {
				name += "/" + a.GetSubresource()
			}
			out = append(out, name)
		}
	}
	return out
}

func TestSyncSnapshotTransitions(t *testing.T) {
	good := []runtime.Object{newClaim(), newVolume(true), newClass("cls", true, nil)}
	with := func(objs ...runtime.Object) []runtime.Object {
		return append(append([]runtime.Object{}, good...), objs...)
	}
	tests := []struct {
		name    string
		vs      *snapshotv1.VolumeSnapshot
		objs    []runtime.Object
		writes  string // comma-separated: the core API's in order, then the snapshot API's in order
		outcome string // "", "final", "requeue"
		event   string // a reason expected among the events
	}{
		{name: "dynamic: claim finalizer, snapshot finalizers, content; status waits for the sidecar",
			vs: newSnapshot(), objs: good, writes: "patch persistentvolumeclaims,patch volumesnapshots,create volumesnapshotcontents", outcome: "requeue"},
		{name: "claim missing", vs: newSnapshot(), objs: []runtime.Object{newClass("cls", true, nil)},
			writes: "update volumesnapshots/status", outcome: "final", event: ReasonInvalidSource},
		{name: "claim not bound", vs: newSnapshot(), objs: []runtime.Object{newClaim(func(p *corev1.PersistentVolumeClaim) { p.Status.Phase = corev1.ClaimPending }), newVolume(true), newClass("cls", true, nil)},
			writes: "update volumesnapshots/status", outcome: "final", event: ReasonInvalidSource},
		{name: "volume not CSI", vs: newSnapshot(), objs: []runtime.Object{newClaim(), newVolume(false), newClass("cls", true, nil)},
			writes: "update volumesnapshots/status", outcome: "final", event: ReasonInvalidSource},
		{name: "no default class", vs: newSnapshot(), objs: []runtime.Object{newClaim(), newVolume(true), newClass("cls", false, nil)},
			writes: "update volumesnapshots/status", outcome: "final", event: ReasonInvalidClass},
		{name: "two default classes", vs: newSnapshot(), objs: with(newClass("other", true, nil)),
			writes: "update volumesnapshots/status", outcome: "final", event: ReasonInvalidClass},
		{name: "named class of another driver", vs: newSnapshot(func(vs *snapshotv1.VolumeSnapshot) { vs.Spec.VolumeSnapshotClassName = ptr.To("foreign") }),
			objs:   with(&snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "foreign"}, Driver: "other", DeletionPolicy: "Delete"}),
			writes: "update volumesnapshots/status", outcome: "final", event: ReasonInvalidClass},
		{name: "invalid secret template", vs: newSnapshot(), objs: []runtime.Object{newClaim(), newVolume(true), newClass("cls", true, map[string]string{
			protocol.ParamSnapshotterSecretName: "${nope}", protocol.ParamSnapshotterSecretNamespace: "ns"})},
			writes: "update volumesnapshots/status", outcome: "final", event: ReasonInvalidSecret},
		{name: "same error again writes nothing",
			vs: newSnapshot(func(vs *snapshotv1.VolumeSnapshot) {
				vs.Status = &snapshotv1.VolumeSnapshotStatus{Error: &snapshotv1.VolumeSnapshotError{Message: ptr.To("source PersistentVolumeClaim pvc does not exist")}}
			}), outcome: "final"},
		{name: "content ready: status and event, claim released",
			vs: newSnapshot(boundTo(protocol.ContentName("vs-uid"))),
			objs: []runtime.Object{newContent(protocol.ContentName("vs-uid"), readyContent), newVolume(true),
				newClaim(func(p *corev1.PersistentVolumeClaim) { p.Finalizers = []string{protocol.PVCAsSourceFinalizer} })},
			writes: "patch persistentvolumeclaims,update volumesnapshots/status", event: ReasonSnapshotReady},
		{name: "pre-provisioned: bind content, finalizers, status",
			vs: newSnapshot(preProvisioned), objs: []runtime.Object{newContent("imported", readyContent, func(c *snapshotv1.VolumeSnapshotContent) {
				c.Finalizers, c.Spec.VolumeSnapshotRef.UID = nil, ""
			})},
			writes: "patch volumesnapshotcontents,patch volumesnapshots,update volumesnapshots/status", event: ReasonSnapshotReady},
		{name: "pre-provisioned content bound elsewhere",
			vs: newSnapshot(preProvisioned), objs: []runtime.Object{newContent("imported", func(c *snapshotv1.VolumeSnapshotContent) { c.Spec.VolumeSnapshotRef.Name = "other" })},
			writes: "update volumesnapshots/status", outcome: "final", event: ReasonBindingInvalid},
		{name: "pre-provisioned content missing", vs: newSnapshot(preProvisioned),
			writes: "update volumesnapshots/status", outcome: "final", event: ReasonContentMissing},
		{name: "deleting, Delete: annotate and delete content, drop finalizers",
			vs: newSnapshot(boundTo(protocol.ContentName("vs-uid")), deleting), objs: with(newContent(protocol.ContentName("vs-uid"), readyContent)),
			writes: "patch volumesnapshotcontents,delete volumesnapshotcontents,patch volumesnapshots"},
		{name: "deleting while the content is being created waits",
			vs: newSnapshot(boundTo(protocol.ContentName("vs-uid")), deleting), objs: with(newContent(protocol.ContentName("vs-uid"), func(c *snapshotv1.VolumeSnapshotContent) {
				c.Annotations = map[string]string{protocol.AnnBeingCreated: "yes"}
			})), outcome: "requeue"},
		{name: "deleting, Retain: only the finalizers",
			vs: newSnapshot(boundTo(protocol.ContentName("vs-uid")), deleting), objs: with(newContent(protocol.ContentName("vs-uid"), readyContent, func(c *snapshotv1.VolumeSnapshotContent) {
				c.Spec.DeletionPolicy = snapshotv1.VolumeSnapshotContentRetain
			})), writes: "patch volumesnapshots"},
		{name: "deleting while a claim restores from it waits",
			vs: newSnapshot(boundTo(protocol.ContentName("vs-uid")), deleting), objs: with(newContent(protocol.ContentName("vs-uid"), readyContent),
				&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "restore", Namespace: "ns"}, Spec: corev1.PersistentVolumeClaimSpec{
					DataSource: &corev1.TypedLocalObjectReference{APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: "snap"}},
					Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}})},
		{name: "a group's new member, naming its claim: waits for its group's content, never provisions",
			vs: newSnapshot(groupMember), objs: good},
		{name: "a group's member with its content: status, nothing written to its claim",
			vs: newSnapshot(groupMember, func(vs *snapshotv1.VolumeSnapshot) {
				vs.Finalizers = []string{protocol.SnapshotInGroupFinalizer, protocol.SnapshotAsSourceFinalizer, protocol.SnapshotBoundFinalizer}
			}), objs: with(newContent(memberContentName(newSnapshot(groupMember)), readyContent, func(c *snapshotv1.VolumeSnapshotContent) {
				c.Spec.VolumeSnapshotRef.Name = newSnapshot(groupMember).Name
			})), writes: "update volumesnapshots/status", event: ReasonSnapshotReady},
		{name: "a group member is held by its group",
			vs: newSnapshot(boundTo("m"), deleting, func(vs *snapshotv1.VolumeSnapshot) {
				vs.Finalizers = append(vs.Finalizers, protocol.SnapshotInGroupFinalizer)
			}), objs: with(newContent("m", readyContent))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, kube, snap, recorder := testController(t, append([]runtime.Object{tc.vs}, tc.objs...)...)
			c.singles.readyEvents = true
			err := c.singles.syncSnapshot(context.Background(), tc.vs)
			checkSync(t, c, err, kube, snap, recorder, syncWant{outcome: tc.outcome, writes: tc.writes, event: tc.event})
		})
	}
}

// syncWant is what a sync is expected to do: its outcome ("", "final", "requeue"), its writes
// (comma-separated, the core API's in order, then the snapshot API's in order) and a reason
// among its events ("" for none in particular).
type syncWant struct{ outcome, writes, event string }

// checkSync checks a sync's outcome err, the writes the fake API servers got, that the write
// layer counted each of them, and the events.
func checkSync(t *testing.T, c *Controller, err error, kube *kubefake.Clientset, snap *snapfake.Clientset,
	recorder *record.FakeRecorder, want syncWant) {
	t.Helper()
	if got := outcome(err); got != want.outcome {
		t.Errorf("outcome %q (%v), want %q", got, err, want.outcome)
	}
	got := writes(kube.Actions(), snap.Actions())
	if strings.Join(got, ",") != want.writes {
		t.Errorf("writes:\n got %s\nwant %s", strings.Join(got, ","), want.writes)
	}
	if n := counted(t, c); n != len(got) {
		t.Errorf("the write layer counted %d writes, the API server got %d", n, len(got))
	}
	if want.event != "" && !hasEvent(recorder, want.event) {
		t.Errorf("no %s event", want.event)
	}
}

func outcome(err error) string {
	switch {
	case err == nil:
		return ""
	case controller.IsFinal(err):
		return "final"
	case controller.OutcomeOf(err) == controller.OutcomeRequeueAfter:
		return "requeue"
	default:
		return fmt.Sprintf("error: %v", err)
	}
}

// TestReadyEventsOff: without --ready-events a snapshot becoming ready is one status write and
// no event.
func TestReadyEventsOff(t *testing.T) {
	vs := newSnapshot(boundTo(protocol.ContentName("vs-uid")))
	c, kube, snap, recorder := testController(t, vs, newContent(protocol.ContentName("vs-uid"), readyContent), newVolume(true),
		newClaim(func(p *corev1.PersistentVolumeClaim) { p.Finalizers = []string{protocol.PVCAsSourceFinalizer} }))
	if err := c.singles.syncSnapshot(context.Background(), vs); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(writes(kube.Actions(), snap.Actions()), ","); got != "patch persistentvolumeclaims,update volumesnapshots/status" {
		t.Errorf("writes %s", got)
	}
	if hasEvent(recorder, "") {
		t.Error("an event was recorded")
	}
}

func hasEvent(r *record.FakeRecorder, reason string) bool {
	for {
		select {
		case e := <-r.Events:
			if strings.Contains(e, reason) {
				return true
			}
		default:
			return false
		}
	}
}
