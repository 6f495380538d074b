package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

// TestChaosShort is the short seeded chaos run of `make test`: every fault kind once during a
// minute and a half of workload, then convergence and every invariant.
func TestChaosShort(t *testing.T) {
	rep := runShort(t, func(ctx context.Context) (*report, error) {
		return runChaos(ctx, config{N: 60, Seed: 1, Duration: 90 * time.Second, PerKind: 1, Converge: 2 * time.Minute, Log: t.Logf})
	})
	for _, v := range rep.Violations {
		t.Errorf("violation: %s %s: %v", v.Invariant, v.Detail, v.Objects)
	}
	for _, k := range faultKinds {
		if f := rep.Faults[k.kind]; f != nil && f.Injected == 0 {
			t.Errorf("fault %s was never injected", k.kind)
		}
	}
	if rep.ConvergeSeconds > 120 {
		t.Errorf("converged %.0fs after the last fault, want within 2 minutes", rep.ConvergeSeconds)
	}
}

// TestSoakShort is the two-minute soak of `make test`: steady churn, then the slope check.
func TestSoakShort(t *testing.T) {
	rep := runShort(t, func(ctx context.Context) (*soakReport, error) {
		return runSoak(ctx, soakConfig{Duration: 2 * time.Minute, Rate: 5, Seed: 1, Log: t.Logf})
	})
	for _, f := range rep.Failures {
		t.Error(f)
	}
	if rep.Deleted == 0 {
		t.Error("the churn deleted no snapshot")
	}
}

// runShort runs a harness for a short run of `make test`, logs its report and returns it.
func runShort[R interface{ print(io.Writer) }](t *testing.T, run func(context.Context) (R, error)) R {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a control plane and the components; skipped with -short")
	}
	rep, err := run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	rep.print(&out)
	t.Log("\n" + out.String())
	return rep
}

func TestScheduleRepeats(t *testing.T) {
	a := schedule(7, 10*time.Minute, 10, nil)
	b := schedule(7, 10*time.Minute, 10, nil)
	if !reflect.DeepEqual(a, b) {
		t.Error("the same seed gave two schedules")
	}
	if c := schedule(8, 10*time.Minute, 10, nil); reflect.DeepEqual(a, c) {
		t.Error("two seeds gave the same schedule")
	}
	n := 0
	for _, fs := range a {
		for _, f := range fs {
			n++
			if f.At < 30*time.Second || f.At > 9*time.Minute {
				t.Errorf("%s at %s, outside [30s, 9m]", f.Kind, f.At)
			}
		}
	}
	if n != 160 {
		t.Errorf("%d faults, want 16 kinds x 10", n)
	}
	if skipped := schedule(7, time.Minute, 1, map[string]bool{"disk-full": true}); len(skipped["disk"]) != 0 {
		t.Errorf("skipped kind scheduled: %v", skipped["disk"])
	}
}

func TestFit(t *testing.T) {
	tr := fit([]float64{0, 10, 20, 30}, []float64{100, 101, 102, 103})
	if tr.PerHour != 360 || tr.Rise != 3 || tr.Mean != 101.5 || tr.Max != 103 {
		t.Errorf("fit = %+v, want slope 360/h, rise 3, mean 101.5, max 103", tr)
	}
	if flat := fit([]float64{0, 10, 20}, []float64{5, 5, 5}); flat.Rise != 0 {
		t.Errorf("flat series rises %v", flat.Rise)
	}
}

func TestHolderAt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	terms := []term{{Replica: "a", Acquired: t0}, {Replica: "b", Acquired: t0.Add(10 * time.Second)}}
	for _, tc := range []struct {
		at   time.Duration
		want string
	}{{-time.Second, ""}, {0, "a"}, {9 * time.Second, "a"}, {10 * time.Second, "b"}, {time.Hour, "b"}} {
		if got := holderAt(terms, t0.Add(tc.at)); got != tc.want {
			t.Errorf("holderAt(+%s) = %q, want %q", tc.at, got, tc.want)
		}
	}
}

func TestComponentOf(t *testing.T) {
	if got := componentOf("snapshot-controller/v1 " + userAgentTag + "snapshot-controller-1"); got != "snapshot-controller-1" {
		t.Errorf("componentOf = %q", got)
	}
	if got := componentOf("kubectl/v1.34"); got != "" {
		t.Errorf("componentOf(kubectl) = %q, want empty", got)
	}
}

func TestRetryCreep(t *testing.T) {
	steady := []sample{{At: 0, Retries: 0}, {At: 10, Retries: 10}, {At: 20, Retries: 20}, {At: 30, Retries: 30}}
	if msg := retryCreep(steady); msg != "" {
		t.Errorf("steady retries flagged: %s", msg)
	}
	creeping := []sample{{At: 0, Retries: 0}, {At: 10, Retries: 1}, {At: 20, Retries: 30}, {At: 30, Retries: 100}}
	if msg := retryCreep(creeping); msg == "" {
		t.Error("creeping retries not flagged")
	}
}

// TestContentChecks: a content bound to a gone snapshot is an orphan unless Retain; a
// pre-provisioned content never bound (empty ref uid) whose snapshot is gone is counted apart.
func TestContentChecks(t *testing.T) {
	content := func(name, ref string, uid types.UID, policy snapshotv1.DeletionPolicy) snapshotv1.VolumeSnapshotContent {
		return snapshotv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: snapshotv1.VolumeSnapshotContentSpec{VolumeSnapshotRef: corev1.ObjectReference{Name: ref, UID: uid},
				DeletionPolicy: policy, Source: snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: ptr.To("h-" + name)}}}
	}
	s := &state{snaps: map[string]snapshotv1.VolumeSnapshot{}, backend: map[string]bool{"h-a": true, "h-b": true, "h-c": true}}
	s.contents = []snapshotv1.VolumeSnapshotContent{
		content("a", "gone-a", "uid-a", snapshotv1.VolumeSnapshotContentDelete),
		content("b", "gone-b", "", snapshotv1.VolumeSnapshotContentDelete),
		content("c", "gone-c", "uid-c", snapshotv1.VolumeSnapshotContentRetain),
	}
	got := s.contentChecks()
	if len(got) != 1 || got[0].Invariant != "no content without its snapshot (except Retain)" ||
		len(got[0].Objects) != 1 || got[0].Objects[0] != "VolumeSnapshotContent a of gone-a" {
		t.Errorf("violations %+v", got)
	}
	if len(s.unbound) != 1 || s.unbound[0] != "VolumeSnapshotContent b of gone-b" {
		t.Errorf("never bound %v", s.unbound)
	}
}

// TestDeposedWrites: a write received after the successor acquired the Lease is a violation
// unless the writer's fence found its Lease fresh before that (late), or the API refused it. An
// access review a standby asks at start stores nothing and is no violation.
func TestDeposedWrites(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 22, 28, 0, time.UTC)
	terms := []term{{Replica: "snapshot-controller-1", Acquired: t0.Add(-time.Minute)}, {Replica: "snapshot-controller-0", Acquired: t0}}
	entry := func(name string, received time.Time, checked time.Time, code int, resource ...string) string {
		res := "volumesnapshots"
		if len(resource) > 0 {
			res = resource[0]
		}
		ua := "snapshot-controller/v1"
		if !checked.IsZero() {
			ua += " " + leaseCheckedTag + strconv.FormatInt(checked.UnixNano(), 10)
		}
		ua += " " + userAgentTag + "snapshot-controller-1"
		return fmt.Sprintf(`{"stage":"ResponseComplete","verb":"patch","userAgent":%q,"requestReceivedTimestamp":%q,"objectRef":{"resource":%q,"namespace":"ns","name":%q},"responseStatus":{"code":%d}}`,
			ua, received.Format(time.RFC3339Nano), res, name, code)
	}
	lines := []string{
		entry("before", t0.Add(-time.Second), t0.Add(-2*time.Second), 200),
		entry("late", t0.Add(4*time.Second), t0.Add(-8*time.Second), 200),
		entry("decided-deposed", t0.Add(4*time.Second), t0.Add(3*time.Second), 200),
		entry("unfenced", t0.Add(4*time.Second), time.Time{}, 200),
		entry("refused", t0.Add(4*time.Second), t0.Add(3*time.Second), 409),
		entry("review", t0.Add(4*time.Second), time.Time{}, 201, "selfsubjectaccessreviews"), // a question, not a write
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	accepted, refused, late, err := deposedWrites(path, terms)
	if err != nil {
		t.Fatal(err)
	}
	names := func(list []string) string {
		var out []string
		for _, l := range list {
			out = append(out, strings.Fields(l)[3])
		}
		return strings.Join(out, ",")
	}
	if got := names(accepted); got != "ns/decided-deposed,ns/unfenced" {
		t.Errorf("violations %s", got)
	}
	if got := names(late); got != "ns/late" {
		t.Errorf("late %s", got)
	}
	if got := names(refused); got != "ns/refused" {
		t.Errorf("refused %s", got)
	}
}

// TestTally: a kind's convergence time is counted from its last injection, not its first.
func TestTally(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	lanes := map[string][]*fault{"process": {
		{Kind: "kill-driver", Ended: t0, Injected: true},
		{Kind: "kill-driver", Ended: t0.Add(50 * time.Second), Injected: true},
		{Kind: "kill-driver", Ended: t0.Add(60 * time.Second)},
	}}
	r := &report{Faults: map[string]*kindReport{}}
	r.tally(lanes, t0.Add(80*time.Second))
	if got := *r.Faults["kill-driver"]; got != (kindReport{Injected: 2, Failed: 1, ConvergedAfterLast: 30}) {
		t.Errorf("tally %+v", got)
	}
}
