package snapshot

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	snapfake "github.com/shutter-csi/shutter/client/clientset/versioned/fake"
	"github.com/shutter-csi/shutter/pkg/metrics"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// The group side on the fake clientset: a VolumeGroupSnapshot's selection of volumes and
// provisioning (groupprovision.go), and its members made, looked up and let go (groupmembers.go).

const groupUID = "g-uid"

// groupContentName is the dynamic content of the group newGroup builds.
var groupContentName = protocol.GroupContentName(groupUID)

func newGroup(opts ...func(*groupv1.VolumeGroupSnapshot)) *groupv1.VolumeGroupSnapshot {
	vgs := &groupv1.VolumeGroupSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "group", Namespace: "ns", UID: groupUID, ResourceVersion: "1"},
		Spec: groupv1.VolumeGroupSnapshotSpec{Source: groupv1.VolumeGroupSnapshotSource{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}},
	}
	for _, o := range opts {
		o(vgs)
	}
	return vgs
}

func groupBound(vgs *groupv1.VolumeGroupSnapshot) {
	vgs.Status = &groupv1.VolumeGroupSnapshotStatus{BoundVolumeGroupSnapshotContentName: ptr.To(groupContentName), ReadyToUse: ptr.To(false)}
	vgs.Finalizers = []string{protocol.GroupSnapshotBoundFinalizer}
}

func groupDeleting(vgs *groupv1.VolumeGroupSnapshot) {
	groupBound(vgs)
	vgs.DeletionTimestamp = ptr.To(metav1.Now())
}

func newGroupContent(opts ...func(*groupv1.VolumeGroupSnapshotContent)) *groupv1.VolumeGroupSnapshotContent {
	c := &groupv1.VolumeGroupSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: groupContentName, ResourceVersion: "1", Finalizers: []string{protocol.GroupContentBoundFinalizer},
			CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour))},
		Spec: groupv1.VolumeGroupSnapshotContentSpec{
			VolumeGroupSnapshotRef: corev1.ObjectReference{Namespace: "ns", Name: "group", UID: groupUID},
			DeletionPolicy:         snapshotv1.VolumeSnapshotContentDelete, Driver: testDriver,
			Source: groupv1.VolumeGroupSnapshotContentSource{VolumeHandles: []string{"vol-a", "vol-b"}},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// reporting is the status the sidecar writes once the backend has cut the group: one entry per
// volume handle, each snapshot ready, with handle "snap-<volume handle>".
func reporting(handles ...string) func(*groupv1.VolumeGroupSnapshotContent) {
	return func(c *groupv1.VolumeGroupSnapshotContent) {
		c.Status = &groupv1.VolumeGroupSnapshotContentStatus{VolumeGroupSnapshotHandle: ptr.To("gh"), ReadyToUse: ptr.To(true)}
		for _, h := range handles {
			c.Status.VolumeSnapshotInfoList = append(c.Status.VolumeSnapshotInfoList, groupv1.VolumeSnapshotInfo{
				VolumeHandle: h, SnapshotHandle: "snap-" + h, ReadyToUse: ptr.To(true), RestoreSize: ptr.To(int64(1024))})
		}
	}
}

func retainGroup(c *groupv1.VolumeGroupSnapshotContent) {
	c.Spec.DeletionPolicy = snapshotv1.VolumeSnapshotContentRetain
}

// member is the member snapshot of a volume handle as its group made it.
func member(handle string, opts ...func(*snapshotv1.VolumeSnapshot)) *snapshotv1.VolumeSnapshot {
	vs := &snapshotv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: protocol.MemberSnapshotName(groupUID, handle), Namespace: "ns",
			UID: types.UID("uid-" + handle), ResourceVersion: "1",
			Finalizers: []string{protocol.SnapshotInGroupFinalizer, protocol.SnapshotAsSourceFinalizer, protocol.SnapshotBoundFinalizer},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: groupv1.SchemeGroupVersion.String(), Kind: "VolumeGroupSnapshot",
				Name: "group", UID: groupUID, Controller: ptr.To(true)}}},
		Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{
			PersistentVolumeClaimName: ptr.To("pvc-" + strings.TrimPrefix(handle, "vol-"))}},
	}
	for _, o := range opts {
		o(vs)
	}
	return vs
}

func memberReady(vs *snapshotv1.VolumeSnapshot) {
	vs.Status = &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To(memberContentName(vs)),
		ReadyToUse: ptr.To(true), VolumeGroupSnapshotName: ptr.To("group")}
}

func memberDeleting(vs *snapshotv1.VolumeSnapshot) { vs.DeletionTimestamp = ptr.To(metav1.Now()) }

func memberReleased(vs *snapshotv1.VolumeSnapshot) {
	vs.Finalizers = slices.DeleteFunc(slices.Clone(vs.Finalizers), func(f string) bool { return f == protocol.SnapshotInGroupFinalizer })
}

// memberContent is the content of a member as its group made it, with the status it copied from
// the group content's report.
func memberContent(handle string, opts ...func(*snapshotv1.VolumeSnapshotContent)) *snapshotv1.VolumeSnapshotContent {
	c := &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: protocol.MemberContentName(groupUID, handle), ResourceVersion: "1",
			Finalizers:  []string{protocol.ContentBoundFinalizer},
			Annotations: map[string]string{protocol.AnnGroupSnapshotHandle: "gh"}},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef: corev1.ObjectReference{Namespace: "ns", Name: protocol.MemberSnapshotName(groupUID, handle),
				UID: types.UID("uid-" + handle)},
			DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete, Driver: testDriver,
			Source: snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: ptr.To("snap-" + handle)},
		},
		Status: &snapshotv1.VolumeSnapshotContentStatus{SnapshotHandle: ptr.To("snap-" + handle), ReadyToUse: ptr.To(true),
			VolumeGroupSnapshotHandle: ptr.To("gh")},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// groupClaim is a bound claim the group's selector picks, of volume pv.
func groupClaim(name, pv string, opts ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	return newClaim(append([]func(*corev1.PersistentVolumeClaim){func(p *corev1.PersistentVolumeClaim) {
		p.Name, p.Spec.VolumeName, p.Labels = name, pv, map[string]string{"app": "db"}
	}}, opts...)...)
}

// csiVolume is a CSI volume of driver with handle.
func csiVolume(name, driver, handle string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}}}}
}

// boundVolume is a CSI volume of the test driver bound to claim in namespace ns.
func boundVolume(name, handle, claim string) *corev1.PersistentVolume {
	pv := csiVolume(name, testDriver, handle)
	pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: claim}
	return pv
}

// newGroupClass is newClass for groups.
func newGroupClass(name string, isDefault bool, params map[string]string) *groupv1.VolumeGroupSnapshotClass {
	single := newClass(name, false, params)
	c := &groupv1.VolumeGroupSnapshotClass{ObjectMeta: single.ObjectMeta, Driver: single.Driver,
		DeletionPolicy: single.DeletionPolicy, Parameters: single.Parameters}
	if isDefault {
		c.Annotations = map[string]string{protocol.AnnGroupDefaultClass: "true"}
	}
	return c
}

// testGroupController is testController with the group reconciler enabled on the same informers;
// the objects listed are in their stores. Unlisted objects are only in the fake API server
// and in the own-write caches: this controller wrote them and the informers have not seen them.
func testGroupController(t *testing.T, listed []runtime.Object, unlisted ...runtime.Object) (*Controller, *groups,
	*kubefake.Clientset, *snapfake.Clientset, *record.FakeRecorder) {
	t.Helper()
	c, kube, snap, recorder, sf := testControllerInformers(t, listed...)
	g, err := c.newGroups(sf)
	if err != nil {
		t.Fatal(err)
	}
	c.groups.Store(g)
	g.r.clock = c.singles.clock
	for _, o := range unlisted {
		if err := snap.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
		switch o := o.(type) {
		case *snapshotv1.VolumeSnapshot:
			c.writes.snapshots.Cache().Record(o)
		case *snapshotv1.VolumeSnapshotContent:
			c.writes.contents.Cache().Record(o)
		}
	}
	return c, g, kube, snap, recorder
}

// created is the object of the n-th create of resource among actions (n from 0), nil for none.
func created[T runtime.Object](actions []k8stesting.Action, resource string, n int) T {
	var zero T
	for _, a := range actions {
		if c, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == resource {
			if n == 0 {
				obj, _ := c.GetObject().(T)
				return obj
			}
			n--
		}
	}
	return zero
}

// lastGroupStatus is the group's status as the last status write of actions left it, nil for none.
func lastGroupStatus(actions []k8stesting.Action) *groupv1.VolumeGroupSnapshotStatus {
	var st *groupv1.VolumeGroupSnapshotStatus
	for _, a := range actions {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "status" {
			if vgs, ok := u.GetObject().(*groupv1.VolumeGroupSnapshot); ok {
				st = vgs.Status
			}
		}
	}
	return st
}

func TestSyncGroupTransitions(t *testing.T) {
	selected := []runtime.Object{
		groupClaim("pvc-b", "pv-b"), csiVolume("pv-b", testDriver, "vol-b"),
		groupClaim("pvc-a", "pv-a"), csiVolume("pv-a", testDriver, "vol-a"),
		newGroupClass("gcls", true, nil),
	}
	with := func(objs ...runtime.Object) []runtime.Object {
		return append(append([]runtime.Object{}, selected...), objs...)
	}
	bound := []runtime.Object{newGroupContent()}
	boundWith := func(opts ...func(*groupv1.VolumeGroupSnapshotContent)) []runtime.Object {
		return []runtime.Object{newGroupContent(opts...)}
	}
	const memberWrites = "create volumesnapshots,create volumesnapshotcontents,patch volumesnapshotcontents/status"
	tests := []struct {
		name     string
		vgs      *groupv1.VolumeGroupSnapshot
		objs     []runtime.Object
		unlisted []runtime.Object
		writes   string // comma-separated, in order
		outcome  string // "", "final", "requeue"
		event    string // a reason expected among the events
		// ready is what the group's last status write says, when it makes one.
		ready bool
		// woken is how many member snapshots are queued for the single-snapshot sync.
		woken int
		check func(t *testing.T, actions []k8stesting.Action)
	}{
		// Provisioning: the selection of volumes and the class.
		{name: "dynamic: finalizer, content with the claims' sorted handles, status at once",
			vgs: newGroup(), objs: selected,
			writes: "patch volumegroupsnapshots,create volumegroupsnapshotcontents,update volumegroupsnapshots/status",
			check: func(t *testing.T, actions []k8stesting.Action) {
				c := created[*groupv1.VolumeGroupSnapshotContent](actions, "volumegroupsnapshotcontents", 0)
				if c == nil || !slices.Equal(c.Spec.Source.VolumeHandles, []string{"vol-a", "vol-b"}) || c.Spec.Driver != testDriver ||
					ptr.Deref(c.Spec.VolumeGroupSnapshotClassName, "") != "gcls" || c.Name != "groupsnapcontent-g-uid" {
					t.Errorf("created group content %+v", c)
				}
			}},
		{name: "five claims: their handles sorted, whatever order the lister lists them in", vgs: newGroup(),
			objs: with(groupClaim("pvc-e", "pv-e"), csiVolume("pv-e", testDriver, "vol-e"), groupClaim("pvc-c", "pv-c"),
				csiVolume("pv-c", testDriver, "vol-c"), groupClaim("pvc-d", "pv-d"), csiVolume("pv-d", testDriver, "vol-d")),
			writes: "patch volumegroupsnapshots,create volumegroupsnapshotcontents,update volumegroupsnapshots/status",
			check: func(t *testing.T, actions []k8stesting.Action) {
				c := created[*groupv1.VolumeGroupSnapshotContent](actions, "volumegroupsnapshotcontents", 0)
				if want := []string{"vol-a", "vol-b", "vol-c", "vol-d", "vol-e"}; c == nil || !slices.Equal(c.Spec.Source.VolumeHandles, want) {
					t.Errorf("created group content %+v, want handles %v", c, want)
				}
			}},
		{name: "named class", vgs: newGroup(func(vgs *groupv1.VolumeGroupSnapshot) { vgs.Spec.VolumeGroupSnapshotClassName = ptr.To("named") }),
			objs:   with(newGroupClass("named", false, nil)),
			writes: "patch volumegroupsnapshots,create volumegroupsnapshotcontents,update volumegroupsnapshots/status"},
		{name: "selector matches no claim", vgs: newGroup(func(vgs *groupv1.VolumeGroupSnapshot) {
			vgs.Spec.Source.Selector.MatchLabels = map[string]string{"app": "web"}
		}), objs: selected, writes: "update volumegroupsnapshots/status", outcome: "final", event: ReasonGroupInvalid},
		{name: "invalid selector", vgs: newGroup(func(vgs *groupv1.VolumeGroupSnapshot) {
			vgs.Spec.Source.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}
		}), objs: selected, writes: "update volumegroupsnapshots/status", outcome: "final", event: ReasonGroupInvalid},
		{name: "a claim not bound", vgs: newGroup(),
			objs:   with(groupClaim("pvc-c", "", func(p *corev1.PersistentVolumeClaim) { p.Status.Phase = corev1.ClaimPending })),
			writes: "update volumegroupsnapshots/status", outcome: "final", event: ReasonGroupInvalid},
		{name: "a claim's volume missing", vgs: newGroup(), objs: with(groupClaim("pvc-c", "pv-c")),
			writes: "update volumegroupsnapshots/status", outcome: "final", event: ReasonGroupInvalid},
		{name: "a volume not CSI", vgs: newGroup(), objs: with(groupClaim("pvc-c", "pv"), newVolume(false)),
			writes: "update volumegroupsnapshots/status", outcome: "final", event: ReasonGroupInvalid},
		{name: "volumes of two drivers", vgs: newGroup(), objs: with(groupClaim("pvc-c", "pv-c"), csiVolume("pv-c", "other.example.com", "vol-c")),
			writes: "update volumegroupsnapshots/status", outcome: "final", event: ReasonGroupInvalid},
		{name: "no default group class", vgs: newGroup(), objs: append(slices.Clone(selected[:4]), newGroupClass("gcls", false, nil)),
			writes: "update volumegroupsnapshots/status", outcome: "final", event: ReasonGroupInvalid},
		{name: "named class of another driver", vgs: newGroup(func(vgs *groupv1.VolumeGroupSnapshot) { vgs.Spec.VolumeGroupSnapshotClassName = ptr.To("foreign") }),
			objs:   with(&groupv1.VolumeGroupSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "foreign"}, Driver: "other", DeletionPolicy: "Delete"}),
			writes: "update volumegroupsnapshots/status", outcome: "final", event: ReasonGroupInvalid},
		{name: "invalid secret template", vgs: newGroup(), objs: append(slices.Clone(selected[:4]), newGroupClass("gcls", true, map[string]string{
			protocol.ParamGroupSecretName: "${nope}", protocol.ParamGroupSecretNamespace: "ns"})),
			writes: "update volumegroupsnapshots/status", outcome: "final", event: ReasonGroupInvalid},
		{name: "same error again writes nothing", vgs: newGroup(func(vgs *groupv1.VolumeGroupSnapshot) {
			vgs.Status = &groupv1.VolumeGroupSnapshotStatus{Error: &snapshotv1.VolumeSnapshotError{
				Message: ptr.To("the selector app=web matches no PersistentVolumeClaim in namespace ns")}}
			vgs.Spec.Source.Selector.MatchLabels = map[string]string{"app": "web"}
		}), objs: selected, outcome: "final"},

		// Bound: members made from the group content's report, and looked up again.
		{name: "content not reported yet, no status yet: no members, status not ready",
			vgs: newGroup(func(vgs *groupv1.VolumeGroupSnapshot) {
				vgs.Finalizers = []string{protocol.GroupSnapshotBoundFinalizer}
			}),
			objs: bound, writes: "update volumegroupsnapshots/status"},
		{name: "content not reported yet, status current: nothing", vgs: newGroup(groupBound), objs: bound},
		{name: "content reports two members: each one's snapshot, content and content status, then the group's status",
			vgs: newGroup(groupBound), objs: append(boundWith(reporting("vol-a", "vol-b")), boundVolume("pv-a", "vol-a", "pvc-a")),
			writes: memberWrites + "," + memberWrites, woken: 2, // the group's status stays not ready
			check: func(t *testing.T, actions []k8stesting.Action) {
				vs := created[*snapshotv1.VolumeSnapshot](actions, "volumesnapshots", 0)
				if want := []string{protocol.SnapshotInGroupFinalizer, protocol.SnapshotAsSourceFinalizer, protocol.SnapshotBoundFinalizer}; vs == nil ||
					!slices.Equal(vs.Finalizers, want) || groupOf(vs) != "group" || groupOwner(vs).UID != groupUID {
					t.Fatalf("created member snapshot %+v", vs)
				}
				// Its claim as its source, as upstream's members have; none known for vol-b.
				if claim := ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, "?"); claim != "pvc-a" || vs.Spec.Source.VolumeSnapshotContentName != nil {
					t.Errorf("member of vol-a has source %+v, want claim pvc-a", vs.Spec.Source)
				}
				if b := created[*snapshotv1.VolumeSnapshot](actions, "volumesnapshots", 1); b == nil || ptr.Deref(b.Spec.Source.PersistentVolumeClaimName, "?") != "" {
					t.Errorf("member of vol-b (no volume known) %+v, want an empty claim name", b)
				}
				c := created[*snapshotv1.VolumeSnapshotContent](actions, "volumesnapshotcontents", 0)
				if c == nil || c.Name != memberContentName(vs) || c.Spec.VolumeSnapshotRef.Name != vs.Name ||
					c.Annotations[protocol.AnnGroupSnapshotHandle] != "gh" || ptr.Deref(c.Spec.Source.SnapshotHandle, "") != "snap-vol-a" {
					t.Errorf("created member content %+v", c)
				}
				if n := len(slices.DeleteFunc(slices.Clone(actions), func(a k8stesting.Action) bool {
					p, ok := a.(k8stesting.PatchAction)
					return !ok || p.GetSubresource() != "status" || !strings.Contains(string(p.GetPatch()), `"readyToUse":true`) ||
						!strings.Contains(string(p.GetPatch()), `"volumeGroupSnapshotHandle":"gh"`)
				})); n != 2 {
					t.Errorf("%d member content status patches say ready in group gh, want 2", n)
				}
			}},
		{name: "members made and ready: no member writes, group ready", vgs: newGroup(groupBound),
			objs: append(boundWith(reporting("vol-a", "vol-b")), member("vol-a", memberReady), memberContent("vol-a"),
				member("vol-b", memberReady), memberContent("vol-b")),
			writes: "update volumegroupsnapshots/status", ready: true, event: ReasonGroupReady},
		{name: "pre-provisioned group reported: no members made (its importer makes them), group ready", vgs: newGroup(groupBound),
			objs: boundWith(reporting("vol-a", "vol-b"), func(c *groupv1.VolumeGroupSnapshotContent) {
				c.Spec.Source = groupv1.VolumeGroupSnapshotContentSource{GroupSnapshotHandles: &groupv1.GroupSnapshotHandles{
					VolumeGroupSnapshotHandle: "gh", VolumeSnapshotHandles: []string{"snap-vol-a", "snap-vol-b"}}}
			}),
			writes: "update volumegroupsnapshots/status", ready: true, event: ReasonGroupReady},
		{name: "a member not ready yet: group not ready", vgs: newGroup(groupBound),
			objs: append(boundWith(reporting("vol-a", "vol-b")), member("vol-a", memberReady), memberContent("vol-a"),
				member("vol-b"), memberContent("vol-b"))},
		{name: "member snapshot the informer has not shown: found among own writes, not made again", vgs: newGroup(groupBound),
			objs: boundWith(reporting("vol-a")), unlisted: []runtime.Object{member("vol-a")},
			writes: "create volumesnapshotcontents,patch volumesnapshotcontents/status", woken: 1},
		{name: "member content the informer has not shown: found among own writes, not made again", vgs: newGroup(groupBound),
			objs: append(boundWith(reporting("vol-a")), member("vol-a", memberReady)), unlisted: []runtime.Object{memberContent("vol-a")},
			writes: "update volumegroupsnapshots/status", ready: true},
		{name: "member content without its status (a write that failed): status written", vgs: newGroup(groupBound),
			objs:   append(boundWith(reporting("vol-a")), member("vol-a"), memberContent("vol-a", func(c *snapshotv1.VolumeSnapshotContent) { c.Status = nil })),
			writes: "patch volumesnapshotcontents/status", woken: 1},
		{name: "member content being deleted: left alone", vgs: newGroup(groupBound),
			objs: append(boundWith(reporting("vol-a")), member("vol-a"), memberContent("vol-a", func(c *snapshotv1.VolumeSnapshotContent) {
				c.Status, c.DeletionTimestamp = nil, ptr.To(metav1.Now())
			}))},
		{name: "pre-provisioned group without volume handles: members named by snapshot handle", vgs: newGroup(groupBound),
			objs: boundWith(func(c *groupv1.VolumeGroupSnapshotContent) {
				reporting("vol-a")(c)
				c.Status.VolumeSnapshotInfoList[0].VolumeHandle = ""
			}),
			writes: memberWrites, woken: 1,
			check: func(t *testing.T, actions []k8stesting.Action) {
				if vs := created[*snapshotv1.VolumeSnapshot](actions, "volumesnapshots", 0); vs == nil ||
					vs.Name != protocol.MemberSnapshotName(groupUID, "snap-vol-a") {
					t.Errorf("created member snapshot %+v, want it named after snapshot handle snap-vol-a", vs)
				}
			}},

		// Deletion: members let go first, then the group content, then the group.
		{name: "deleting with two members: each loses its in-group finalizer and is deleted; the group waits",
			vgs: newGroup(groupDeleting), objs: append(boundWith(reporting("vol-a", "vol-b")), member("vol-a"), member("vol-b")),
			writes: "patch volumesnapshots,delete volumesnapshots,patch volumesnapshots,delete volumesnapshots", woken: 2},
		{name: "member being deleted already: only its finalizer", vgs: newGroup(groupDeleting),
			objs: append(boundWith(reporting("vol-a")), member("vol-a", memberDeleting)), writes: "patch volumesnapshots", woken: 1},
		{name: "member released but not deleted: deleted", vgs: newGroup(groupDeleting),
			objs: append(boundWith(reporting("vol-a")), member("vol-a", memberReleased)), writes: "delete volumesnapshots"},
		{name: "member the informer has not shown, in the content's report: let go too", vgs: newGroup(groupDeleting),
			objs: boundWith(reporting("vol-a")), unlisted: []runtime.Object{member("vol-a")},
			writes: "patch volumesnapshots,delete volumesnapshots", woken: 1},
		{name: "member the informer shows without the content's report: let go", vgs: newGroup(groupDeleting),
			objs: append(bound, member("vol-a")), writes: "patch volumesnapshots,delete volumesnapshots", woken: 1},
		{name: "no member left, Delete: content to the sidecar, then the group's finalizer", vgs: newGroup(groupDeleting),
			objs:   boundWith(reporting("vol-a")),
			writes: "patch volumegroupsnapshotcontents,delete volumegroupsnapshotcontents,patch volumegroupsnapshots"},
		{name: "no member left, Retain: only the group's finalizer", vgs: newGroup(groupDeleting),
			objs: boundWith(reporting("vol-a"), retainGroup), writes: "patch volumegroupsnapshots"},
		{name: "no member left, content gone: the group's finalizer", vgs: newGroup(groupDeleting), writes: "patch volumegroupsnapshots"},
		{name: "group without its finalizer: nothing", vgs: newGroup(groupDeleting, func(vgs *groupv1.VolumeGroupSnapshot) { vgs.Finalizers = nil }),
			objs: append(bound, member("vol-a"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, g, kube, snap, recorder := testGroupController(t, append([]runtime.Object{tc.vgs}, tc.objs...), tc.unlisted...)
			g.r.readyEvents = true
			err := g.r.syncSnapshot(context.Background(), tc.vgs)
			checkSync(t, c, err, kube, snap, recorder, syncWant{outcome: tc.outcome, writes: tc.writes, event: tc.event})
			if st := lastGroupStatus(snap.Actions()); st != nil && ptr.Deref(st.ReadyToUse, false) != tc.ready {
				t.Errorf("group status says ready %v, want %v", ptr.Deref(st.ReadyToUse, false), tc.ready)
			}
			if n := c.singles.snapshotQueue.Len(); n != tc.woken {
				t.Errorf("%d member snapshots queued, want %d", n, tc.woken)
			}
			if tc.check != nil {
				tc.check(t, snap.Actions())
			}
		})
	}
}

// TestSyncMemberTransitions: a member snapshot through the single-snapshot sync waits for its
// group, wakes it, and is held by it until the group lets it go or is gone.
func TestSyncMemberTransitions(t *testing.T) {
	tests := []struct {
		name    string
		vs      *snapshotv1.VolumeSnapshot
		objs    []runtime.Object
		writes  string
		reads   int // live GETs of the group
		wakes   bool
		outcome string
	}{
		{name: "a new member waits for its group to make its content", vs: member("vol-a"), objs: []runtime.Object{newGroup(groupBound)}},
		{name: "a member that becomes ready: its status, and its group woken",
			vs: member("vol-a", func(vs *snapshotv1.VolumeSnapshot) {
				memberReady(vs)
				vs.Status.ReadyToUse = ptr.To(false)
			}), objs: []runtime.Object{newGroup(groupBound), memberContent("vol-a")},
			writes: "update volumesnapshots/status", wakes: true},
		{name: "a deleted member whose group exists is held", vs: member("vol-a", memberReady, memberDeleting),
			objs: []runtime.Object{newGroup(groupBound), memberContent("vol-a")}},
		{name: "a deleted member whose group is gone lets itself go, asking the API server first",
			vs: member("vol-a", memberReady, memberDeleting), objs: []runtime.Object{memberContent("vol-a")}, reads: 1,
			writes: "patch volumesnapshotcontents,delete volumesnapshotcontents,patch volumesnapshots"},
		{name: "a deleted member whose group is another one now lets itself go",
			vs: member("vol-a", memberReady, memberDeleting), objs: []runtime.Object{memberContent("vol-a"),
				newGroup(groupBound, func(vgs *groupv1.VolumeGroupSnapshot) { vgs.UID = "another" })},
			writes: "patch volumesnapshotcontents,delete volumesnapshotcontents,patch volumesnapshots"},
		{name: "a deleted member the group released: content to the sidecar, finalizers dropped",
			vs: member("vol-a", memberReady, memberDeleting, memberReleased), objs: []runtime.Object{newGroup(groupBound), memberContent("vol-a")},
			writes: "patch volumesnapshotcontents,delete volumesnapshotcontents,patch volumesnapshots"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, g, kube, snap, recorder := testGroupController(t, append([]runtime.Object{tc.vs}, tc.objs...))
			err := c.singles.syncSnapshot(context.Background(), tc.vs)
			checkSync(t, c, err, kube, snap, recorder, syncWant{outcome: tc.outcome, writes: tc.writes})
			reads := 0
			for _, a := range snap.Actions() {
				if a.GetVerb() == "get" && a.GetResource().Resource == "volumegroupsnapshots" {
					reads++
				}
			}
			if reads != tc.reads {
				t.Errorf("%d live GETs of the group, want %d", reads, tc.reads)
			}
			if woken := g.r.snapshotQueue.Len() == 1; woken != tc.wakes {
				t.Errorf("group queued %v, want %v", woken, tc.wakes)
			}
		})
	}
}

// TestFailuresReported: what each kind makes of bad input and of a content that reports an
// error, in events and in the failed-create count.
func TestFailuresReported(t *testing.T) {
	failedContent := func(c *snapshotv1.VolumeSnapshotContent) {
		c.Status = &snapshotv1.VolumeSnapshotContentStatus{ReadyToUse: ptr.To(false),
			Error: &snapshotv1.VolumeSnapshotError{Message: ptr.To("backend full")}}
	}
	failedGroupContent := func(c *groupv1.VolumeGroupSnapshotContent) {
		c.Status = &groupv1.VolumeGroupSnapshotContentStatus{ReadyToUse: ptr.To(false),
			Error: &snapshotv1.VolumeSnapshotError{Message: ptr.To("backend full")}}
	}
	single := func(objs ...runtime.Object) func(t *testing.T) (*Controller, *record.FakeRecorder, error) {
		return func(t *testing.T) (*Controller, *record.FakeRecorder, error) {
			c, _, _, recorder := testController(t, objs...)
			return c, recorder, c.singles.syncSnapshot(context.Background(), objs[0].(*snapshotv1.VolumeSnapshot))
		}
	}
	group := func(objs ...runtime.Object) func(t *testing.T) (*Controller, *record.FakeRecorder, error) {
		return func(t *testing.T) (*Controller, *record.FakeRecorder, error) {
			c, g, _, _, recorder := testGroupController(t, objs)
			return c, recorder, g.r.syncSnapshot(context.Background(), objs[0].(*groupv1.VolumeGroupSnapshot))
		}
	}
	tests := []struct {
		name    string
		sync    func(t *testing.T) (*Controller, *record.FakeRecorder, error)
		op      string
		counted bool   // a failed create observed for op
		event   string // the Warning's reason, "" for none
	}{
		{name: "snapshot, bad input: a Warning, not counted", sync: single(newSnapshot()),
			op: metrics.OperationCreate, event: ReasonInvalidSource},
		{name: "snapshot, content failed: a Warning, counted", op: metrics.OperationCreate, counted: true, event: ReasonSnapshotFailed,
			sync: single(newSnapshot(boundTo(protocol.ContentName("vs-uid"))), newContent(protocol.ContentName("vs-uid"), failedContent))},
		{name: "group, bad input: a Warning, counted", sync: group(newGroup()),
			op: metrics.OperationCreateGroup, counted: true, event: ReasonGroupInvalid},
		{name: "group, content failed: status only", op: metrics.OperationCreateGroup,
			sync: group(newGroup(groupBound), newGroupContent(failedGroupContent))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := failures(t, tc.op)
			_, recorder, _ := tc.sync(t)
			if counted := failures(t, tc.op) > before; counted != tc.counted {
				t.Errorf("failed create counted %v, want %v", counted, tc.counted)
			}
			var events []string
			for len(recorder.Events) > 0 {
				events = append(events, <-recorder.Events)
			}
			if tc.event == "" && len(events) > 0 || tc.event != "" && (len(events) != 1 || !strings.Contains(events[0], "Warning "+tc.event)) {
				t.Errorf("events %q, want one Warning %q", events, tc.event)
			}
		})
	}
}

// failures is how many failed operations op the metrics have observed.
func failures(t *testing.T, op string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := metrics.Operations.WithLabelValues(op, metrics.StatusFailure).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
