package sidecar

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/csi"
	"github.com/shutter-csi/shutter/pkg/csi/csitest"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

var (
	defaultClass = newClass(map[string]string{"tier": "gold"})
	secretClass  = newClass(map[string]string{
		"tier":                                   "gold",
		protocol.ParamSnapshotterSecretName:      "${volumesnapshot.name}-creds",
		protocol.ParamSnapshotterSecretNamespace: "${volumesnapshot.namespace}",
	})
)

// contentCase is one transition: a content in some state, the driver's behaviour, and what
// one sync must do.
type contentCase struct {
	name    string
	cfg     config
	content content
	objs    []runtime.Object
	driver  func(*csitest.Fake)

	wantRoute   string   // done, wait, final, retry
	wantCalls   []string // CSI methods called
	wantPatches []string // "" for metadata, "status"
	wantEvent   string   // reason of the one Warning event expected; "" for none
	check       func(t *testing.T, got content, f *fixture)
}

func hasStatus(handle string, ready bool) func(*testing.T, content, *fixture) {
	return func(t *testing.T, got content, _ *fixture) {
		t.Helper()
		if got.Status == nil || ptr.Deref(got.Status.SnapshotHandle, "") != handle || ptr.Deref(got.Status.ReadyToUse, false) != ready {
			t.Errorf("status = %+v, want handle %q ready %v", got.Status, handle, ready)
		}
		if handle != "" && got.Status.Error != nil {
			t.Errorf("status.error = %s, want none", ptr.Deref(got.Status.Error.Message, ""))
		}
		if _, ok := got.Annotations[protocol.AnnBeingCreated]; ok {
			t.Error("being-created left set")
		}
	}
}

func hasError(substr string, creating bool) func(*testing.T, content, *fixture) {
	return func(t *testing.T, got content, _ *fixture) {
		t.Helper()
		if got.Status == nil || got.Status.Error == nil || !strings.Contains(ptr.Deref(got.Status.Error.Message, ""), substr) {
			t.Errorf("status = %+v, want an error with %q", got.Status, substr)
		}
		if _, ok := got.Annotations[protocol.AnnBeingCreated]; ok != creating {
			t.Errorf("being-created set = %v, want %v", ok, creating)
		}
	}
}

// stillCreating: the create's outcome is unknown, so being-created stays and no status is written.
func stillCreating(t *testing.T, got content, _ *fixture) {
	t.Helper()
	if got.Annotations[protocol.AnnBeingCreated] != "yes" || got.Status != nil {
		t.Errorf("got %+v", got)
	}
}

// failCreate makes the driver answer the next CreateSnapshot with code.
func failCreate(code codes.Code, msg string) func(*csitest.Fake) {
	return func(d *csitest.Fake) { d.Errors["CreateSnapshot"] = []error{status.Error(code, msg)} }
}

func released(t *testing.T, got content, _ *fixture) {
	t.Helper()
	if slices.Contains(got.Finalizers, protocol.ContentBoundFinalizer) {
		t.Error("finalizer not removed")
	}
}

func unchanged(t *testing.T, got content, _ *fixture) {
	t.Helper()
	if got.ResourceVersion != "1" {
		t.Errorf("content was written: %+v", got)
	}
}

func TestContentTransitions(t *testing.T) {
	name := "snapcontent-1"
	backendName := "snapshot-" + string(testUID)
	tests := []contentCase{
		{name: "dynamic: created and ready in three writes", content: newContent(name), objs: []runtime.Object{defaultClass},
			wantRoute: "done", wantCalls: []string{"CreateSnapshot"}, wantPatches: []string{"", "status", ""},
			check: func(t *testing.T, got content, f *fixture) {
				hasStatus("snap-"+backendName, true)(t, got, f)
				req := f.csi.Requests[0]
				if req.Name != backendName || req.SourceVolumeID != "vol-1" || len(req.Parameters) != 1 || req.Parameters["tier"] != "gold" {
					t.Errorf("request = %+v", req)
				}
				if got.Status.CreationTime == nil || got.Status.RestoreSize == nil || *got.Status.RestoreSize != 1<<20 {
					t.Errorf("status = %+v", got.Status)
				}
			}},
		{name: "dynamic: extra metadata and a short name", cfg: config{extraCreateMetadata: true, namePrefix: "snap"},
			content: newContent(name), objs: []runtime.Object{secretClass, newSecret("ns", "snap-creds")},
			wantRoute: "done", wantCalls: []string{"CreateSnapshot"}, wantPatches: []string{"", "status", ""},
			check: func(t *testing.T, _ content, f *fixture) {
				req := f.csi.Requests[0]
				if req.Name != "snap-"+string(testUID) || req.Parameters[protocol.ParamSnapshotName] != "snap" ||
					req.Parameters[protocol.ParamSnapshotNamespace] != "ns" || req.Parameters[protocol.ParamSnapshotContentName] != name ||
					req.Parameters[protocol.ParamSnapshotterSecretName] != "" || req.Secrets["key"] != "ns/snap-creds" {
					t.Errorf("request = %+v", req)
				}
			}},
		{name: "dynamic: missing secret is a status error, retried", content: newContent(name), objs: []runtime.Object{secretClass},
			wantRoute: "retry", wantPatches: []string{"status"}, wantEvent: reasonInputError,
			check: hasError(`cannot read secret ns/snap-creds`, false)},
		{name: "dynamic: bad secret template is final", content: newContent(name),
			objs:      []runtime.Object{newClass(map[string]string{protocol.ParamSnapshotterSecretName: "${pvc.name}", protocol.ParamSnapshotterSecretNamespace: "ns"})},
			wantRoute: "final", wantPatches: []string{"status"}, wantEvent: reasonInputError, check: hasError("not allowed", false)},
		{name: "dynamic: missing class is retried", content: newContent(name),
			wantRoute: "retry", wantPatches: []string{"status"}, wantEvent: reasonInputError, check: hasError("VolumeSnapshotClass fast", false)},
		{name: "dynamic: unbound is final", content: newContent(name, unbound), objs: []runtime.Object{defaultClass},
			wantRoute: "final", wantPatches: []string{"status"}, wantEvent: reasonInputError, check: hasError("not bound", false)},
		{name: "dynamic: final driver error", content: newContent(name), objs: []runtime.Object{defaultClass},
			driver:    failCreate(codes.InvalidArgument, "bad tier"),
			wantRoute: "final", wantCalls: []string{"CreateSnapshot"}, wantPatches: []string{"", "status", ""}, wantEvent: reasonCreateFailed,
			check: hasError("bad tier", false)},
		{name: "dynamic: timeout keeps being-created", content: newContent(name), objs: []runtime.Object{defaultClass},
			driver:    failCreate(codes.DeadlineExceeded, "slow"),
			wantRoute: "retry", wantCalls: []string{"CreateSnapshot"}, wantPatches: []string{""},
			check: stillCreating},
		{name: "dynamic: busy driver keeps being-created and asks again soon", content: newContent(name), objs: []runtime.Object{defaultClass},
			driver:    failCreate(codes.Aborted, "volume busy"),
			wantRoute: "wait", wantCalls: []string{"CreateSnapshot"}, wantPatches: []string{""},
			check: stillCreating},
		{name: "dynamic: retry of a timed-out create", content: newContent(name, withAnn(protocol.AnnBeingCreated, "yes")),
			objs: []runtime.Object{defaultClass}, wantRoute: "done", wantCalls: []string{"CreateSnapshot"},
			wantPatches: []string{"status", ""}, check: hasStatus("snap-"+backendName, true)},
		{name: "dynamic: not ready waits", content: newContent(name), objs: []runtime.Object{defaultClass},
			driver:    func(d *csitest.Fake) { d.NotReady = true },
			wantRoute: "wait", wantCalls: []string{"CreateSnapshot"}, wantPatches: []string{"", "status", ""},
			check: hasStatus("snap-"+backendName, false)},
		{name: "dynamic: ready is left alone", content: newContent(name, withStatus("h", true)), objs: []runtime.Object{defaultClass},
			wantRoute: "done", check: unchanged},
		{name: "other driver is ignored", content: newContent(name, withDriver("other")), wantRoute: "done", check: unchanged},
		{name: "node deployment: other node is ignored", cfg: config{node: "n1"}, content: newContent(name, withLabel(protocol.LabelManagedBy, "n2")),
			wantRoute: "done", check: unchanged},
		{name: "node deployment: own node", cfg: config{node: "n1"}, content: newContent(name, withLabel(protocol.LabelManagedBy, "n1")),
			objs: []runtime.Object{defaultClass}, wantRoute: "done", wantCalls: []string{"CreateSnapshot"}, wantPatches: []string{"", "status", ""}},
		{name: "group member gets no CSI call", content: newContent(name, withAnn(protocol.AnnGroupSnapshotHandle, "g")),
			objs: []runtime.Object{defaultClass}, wantRoute: "done", check: unchanged},
		{name: "pre-provisioned: known handle", content: newContent(name, preProvisioned("snap-x")),
			driver:    func(d *csitest.Fake) { d.AddSnapshot(csi.Snapshot{ID: "snap-x", SizeBytes: 5, ReadyToUse: true}) },
			wantRoute: "done", wantCalls: []string{"GetSnapshot"}, wantPatches: []string{"status"}, check: hasStatus("snap-x", true)},
		{name: "pre-provisioned: a group's member snapshot: the group's handle recorded", content: newContent(name, preProvisioned("snap-x")),
			driver: func(d *csitest.Fake) {
				d.AddSnapshot(csi.Snapshot{ID: "snap-x", GroupID: "g-1", SizeBytes: 5, ReadyToUse: true})
			},
			wantRoute: "done", wantCalls: []string{"GetSnapshot"}, wantPatches: []string{"status"},
			check: func(t *testing.T, got content, f *fixture) {
				hasStatus("snap-x", true)(t, got, f)
				if ptr.Deref(got.Status.VolumeGroupSnapshotHandle, "") != "g-1" {
					t.Errorf("status %+v, want the group handle g-1", got.Status)
				}
			}},
		{name: "pre-provisioned: unknown handle", content: newContent(name, preProvisioned("snap-x")),
			wantRoute: "final", wantCalls: []string{"GetSnapshot"}, wantPatches: []string{"status"}, wantEvent: reasonCheckFailed,
			check: hasError("does not know", false)},
		{name: "pre-provisioned: driver unavailable is retried", content: newContent(name, preProvisioned("snap-x")),
			driver:    func(d *csitest.Fake) { d.Errors["GetSnapshot"] = []error{status.Error(codes.Unavailable, "down")} },
			wantRoute: "retry", wantCalls: []string{"GetSnapshot"}, check: unchanged},
		{name: "delete: backend snapshot deleted with the annotated secret", content: newContent(name, markedDeleted, withStatus("h", true),
			withAnn(protocol.AnnDeletionSecretName, "del"), withAnn(protocol.AnnDeletionSecretNamespace, "ns")),
			objs:      []runtime.Object{newSecret("ns", "del")},
			wantRoute: "done", wantCalls: []string{"DeleteSnapshot"}, wantPatches: []string{""},
			check: func(t *testing.T, got content, f *fixture) {
				released(t, got, f)
				if f.csi.Secrets["DeleteSnapshot"]["key"] != "ns/del" {
					t.Errorf("secrets %v", f.csi.Secrets["DeleteSnapshot"])
				}
			}},
		{name: "delete: handle cleared first when another finalizer keeps the object",
			content:   newContent(name, markedDeleted, withStatus("h", true), withAnn(protocol.AnnDeletionSecretName, "del"), withAnn(protocol.AnnDeletionSecretNamespace, "ns"), withOtherFinalizer),
			objs:      []runtime.Object{newSecret("ns", "del")},
			wantRoute: "done", wantCalls: []string{"DeleteSnapshot"}, wantPatches: []string{"status", ""},
			check: func(t *testing.T, got content, f *fixture) {
				if got.Status.SnapshotHandle != nil || !slices.Equal(got.Finalizers, []string{otherFinalizer}) {
					t.Errorf("status %+v, finalizers %v", got.Status, got.Finalizers)
				}
			}},
		{name: "delete: waits for being-deleted", content: newContent(name, deleting, withStatus("h", true)), wantRoute: "done", check: unchanged},
		{name: "delete: never while being-created", content: newContent(name, markedDeleted, withAnn(protocol.AnnBeingCreated, "yes")),
			objs: []runtime.Object{defaultClass}, wantRoute: "done", wantCalls: []string{"CreateSnapshot"}, wantPatches: []string{"status", ""},
			check: hasStatus("snap-"+backendName, true)},
		{name: "delete: retain only releases", content: newContent(name, markedDeleted, retained, withStatus("h", true)),
			wantRoute: "done", wantPatches: []string{""}, check: released},
		{name: "delete: group member only releases", content: newContent(name, markedDeleted, withStatus("h", true), withAnn(protocol.AnnGroupSnapshotHandle, "g")),
			wantRoute: "done", wantPatches: []string{""}, check: released},
		{name: "delete: a snapshot of a group (pre-provisioned member) only releases: it goes with its group",
			content: newContent(name, markedDeleted, preProvisioned("h"), withStatus("h", true), func(c content) {
				c.Status.VolumeGroupSnapshotHandle = ptr.To("g-1")
			}),
			wantRoute: "done", wantPatches: []string{""}, check: released},
		{name: "delete: unbound pre-provisioned only releases", content: newContent(name, deleting, preProvisioned("h"), unbound),
			wantRoute: "done", wantPatches: []string{""}, check: released},
		{name: "delete: never created only releases", content: newContent(name, markedDeleted),
			wantRoute: "done", wantPatches: []string{""}, check: released},
		{name: "delete: final driver error is reported and retried", content: newContent(name, markedDeleted, withStatus("h", true)),
			driver: func(d *csitest.Fake) {
				d.Errors["DeleteSnapshot"] = []error{status.Error(codes.FailedPrecondition, "in use")}
			},
			wantRoute: "retry", wantCalls: []string{"DeleteSnapshot"}, wantPatches: []string{"status"}, wantEvent: reasonDeleteFailed,
			check: hasError("in use", false)},
		{name: "delete: busy driver is asked again soon", content: newContent(name, markedDeleted, withStatus("h", true)),
			driver:    func(d *csitest.Fake) { d.Errors["DeleteSnapshot"] = []error{status.Error(codes.Aborted, "restoring")} },
			wantRoute: "wait", wantCalls: []string{"DeleteSnapshot"}, check: unchanged},
		{name: "pre-provisioned: busy driver is asked again soon", content: newContent(name, preProvisioned("snap-x")),
			driver:    func(d *csitest.Fake) { d.Errors["GetSnapshot"] = []error{status.Error(codes.Aborted, "busy")} },
			wantRoute: "wait", wantCalls: []string{"GetSnapshot"}, check: unchanged},
		{name: "delete: missing deletion secret", content: newContent(name, markedDeleted, withStatus("h", true),
			withAnn(protocol.AnnDeletionSecretName, "del"), withAnn(protocol.AnnDeletionSecretNamespace, "ns")),
			wantRoute: "retry", wantPatches: []string{"status"}, wantEvent: reasonInputError, check: hasError("cannot read secret ns/del", false)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runContentCase(t, tc) })
	}
}

func runContentCase(t *testing.T, tc contentCase) {
	f := newFixture(t, tc.cfg, append([]runtime.Object{tc.content}, tc.objs...)...)
	if tc.driver != nil {
		tc.driver(f.csi)
	}
	err := f.syncContent(t, tc.content.Name)
	if got := routed(err); got != tc.wantRoute {
		t.Errorf("routed %s (%v), want %s", got, err, tc.wantRoute)
	}
	if !slices.Equal(f.csi.Calls, tc.wantCalls) {
		t.Errorf("CSI calls %v, want %v", f.csi.Calls, tc.wantCalls)
	}
	if got := f.patches(); !slices.Equal(got, tc.wantPatches) {
		t.Errorf("patches %q, want %q", got, tc.wantPatches)
	}
	events := f.events()
	switch {
	case tc.wantEvent == "" && len(events) > 0:
		t.Errorf("unexpected events %v", events)
	case tc.wantEvent != "" && (len(events) != 1 || !strings.HasPrefix(events[0], "Warning "+tc.wantEvent)):
		t.Errorf("events %v, want one Warning %s", events, tc.wantEvent)
	}
	if tc.check != nil {
		tc.check(t, f.getContent(t, tc.content.Name), f)
	}
}

// TestBusyRetriesSoon: a busy driver is asked again within half a second, spread by jitter, and
// not after a failure's backoff.
func TestBusyRetriesSoon(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 20 {
		err := retrySoon("busy", status.Error(codes.Aborted, "x"))
		if routed(err) != "wait" {
			t.Fatalf("routed %s (%v), want wait", routed(err), err)
		}
		wait, ok := controller.AsRequeue(err)
		if !ok || wait.After < 250*time.Millisecond || wait.After >= 500*time.Millisecond {
			t.Errorf("retry after %v, want [250ms, 500ms)", err)
		}
		seen[wait.After] = true
	}
	if len(seen) < 2 {
		t.Error("no jitter")
	}
}

// TestSettled: of a first list, only this driver's ready contents that are not being deleted are
// settled (queued paced); the others are queued at once, or not at all when not this driver's.
func TestSettled(t *testing.T) {
	f := newFixture(t, config{})
	for _, tc := range []struct {
		name string
		c    content
		want bool
	}{
		{"ready", newContent("c", withStatus("h", true)), true},
		{"not ready", newContent("c", withStatus("h", false)), false},
		{"no status", newContent("c"), false},
		{"ready, being deleted", newContent("c", withStatus("h", true), deleting), false},
		{"ready, another driver's", newContent("c", withStatus("h", true), withDriver("other.example.com")), false},
	} {
		if got := f.content.settled(tc.c); got != tc.want {
			t.Errorf("%s: settled %v, want %v", tc.name, got, tc.want)
		}
	}
}
