// Package schedule tests the SnapshotSchedule reconciler on a real control plane with a fake
// clock: the tests step the clock from run to run and play the part of the snapshot controller
// and sidecar by writing the snapshots' status themselves. Each test's reconciler watches only the
// test's namespace, so the package can share the control plane of `make test`.
package schedule

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	schedulev1alpha1 "github.com/shutter-csi/shutter/client/apis/snapshotschedule/v1alpha1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	snapscheme "github.com/shutter-csi/shutter/client/clientset/versioned/scheme"
	snapinformers "github.com/shutter-csi/shutter/client/informers/externalversions"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/schedule"
	"github.com/shutter-csi/shutter/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// signal is fired after every sync; a waiter takes the channel before it looks, so no sync
// between its look and its wait is lost.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

func (s *signal) fire() {
	s.mu.Lock()
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}

func (s *signal) next() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

// env is one test's namespace and clients; controllers are started and stopped on it.
type env struct {
	cfg    *rest.Config
	kube   kubernetes.Interface
	client clientset.Interface
	ns     string
	synced *signal
	clock  *testingclock.FakeClock
}

func setup(t *testing.T) *env {
	e := testenv.Start(t)
	testenv.InstallCRDs(t, e.Config)
	kube := kubernetes.NewForConfigOrDie(e.Config)
	return &env{cfg: e.Config, kube: kube, client: clientset.NewForConfigOrDie(e.Config), ns: testenv.Namespace(t, kube), synced: newSignal()}
}

// startController runs a schedule reconciler for the test's namespace on the env's clock until
// the returned stop is called (or the test ends).
func (e *env) startController(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	kubeInf := informers.NewSharedInformerFactoryWithOptions(e.kube, 0, informers.WithNamespace(e.ns))
	snapInf := snapinformers.NewSharedInformerFactoryWithOptions(e.client, 0, snapinformers.WithNamespace(e.ns))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: e.kube.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(snapscheme.Scheme, corev1.EventSource{Component: "snapshot-controller"})
	r, err := schedule.New(schedule.Config{Client: e.client, KubeInformers: kubeInf, SnapInformers: snapInf, Recorder: recorder,
		Options: schedule.Options{Clock: e.clock, Synced: func(controller.Key) { e.synced.fire() },
			Retry: controller.Options{RetryStart: 20 * time.Millisecond, RetryMax: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	kubeInf.Start(ctx.Done())
	snapInf.Start(ctx.Done())
	if err := r.EnableGroups(ctx, snapInf); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			kubeInf.Shutdown()
			snapInf.Shutdown()
			broadcaster.Shutdown()
		})
	}
	t.Cleanup(stop)
	return stop
}

// claim creates an (unbound) claim with labels; the schedule controller only reads claims.
func (e *env) claim(t *testing.T, name string, labels map[string]string) {
	_, err := e.kube.CoreV1().PersistentVolumeClaims(e.ns).Create(context.Background(), &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// schedule creates a schedule and sets the env's clock to its creation time, the moment from
// which its runs count.
func (e *env) schedule(t *testing.T, name string, spec schedulev1alpha1.SnapshotScheduleSpec) *schedulev1alpha1.SnapshotSchedule {
	s, err := e.client.ScheduleV1alpha1().SnapshotSchedules(e.ns).Create(context.Background(),
		&schedulev1alpha1.SnapshotSchedule{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e.clock == nil {
		e.clock = testingclock.NewFakeClock(s.CreationTimestamp.Time)
	}
	return s
}

// waitSchedule waits, looking again after every sync, until ok holds for the schedule.
func (e *env) waitSchedule(t *testing.T, name string, ok func(*schedulev1alpha1.SnapshotSchedule) bool) *schedulev1alpha1.SnapshotSchedule {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		next := e.synced.next()
		s, err := e.client.ScheduleV1alpha1().SnapshotSchedules(e.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && ok(s) {
			return s
		}
		select {
		case <-next:
		case <-deadline:
			t.Fatalf("schedule %s: condition not met; last: %+v (err %v)", name, s.Status, err)
		}
	}
}

// waitSynced waits for one sync to finish after now: the positive signal that the reconciler
// looked, before a test asserts that nothing happened.
func (e *env) waitSynced(t *testing.T, trigger func()) {
	t.Helper()
	next := e.synced.next()
	trigger()
	select {
	case <-next:
	case <-time.After(30 * time.Second):
		t.Fatal("no sync")
	}
}

func lastSchedule(at time.Time) func(*schedulev1alpha1.SnapshotSchedule) bool {
	return func(s *schedulev1alpha1.SnapshotSchedule) bool {
		return s.Status != nil && s.Status.LastScheduleTime != nil && s.Status.LastScheduleTime.Equal(&metav1.Time{Time: at})
	}
}

// snapshots lists the namespace's VolumeSnapshots by name.
func (e *env) snapshots(t *testing.T) map[string]*snapshotv1.VolumeSnapshot {
	list, err := e.client.SnapshotV1().VolumeSnapshots(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*snapshotv1.VolumeSnapshot{}
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			out[list.Items[i].Name] = &list.Items[i]
		}
	}
	return out
}

// setReady writes a snapshot's status as the snapshot controller would: ready, or failed.
func (e *env) setStatus(t *testing.T, name string, ready bool, errMsg string) {
	t.Helper()
	vs, err := e.client.SnapshotV1().VolumeSnapshots(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vs.Status = &snapshotv1.VolumeSnapshotStatus{ReadyToUse: &ready}
	if errMsg != "" {
		vs.Status.Error = &snapshotv1.VolumeSnapshotError{Message: &errMsg}
	}
	if _, err := e.client.SnapshotV1().VolumeSnapshots(e.ns).UpdateStatus(context.Background(), vs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// readyActor marks every VolumeSnapshot created in the namespace ready, as controller and
// sidecar would, with a few writers at once, until the test ends.
func (e *env) readyActor(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	w, err := e.client.SnapshotV1().VolumeSnapshots(e.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	todo := make(chan *snapshotv1.VolumeSnapshot, 100)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); w.Stop(); wg.Wait() })
	wg.Go(func() {
		defer close(todo)
		for ev := range w.ResultChan() {
			if vs, ok := ev.Object.(*snapshotv1.VolumeSnapshot); ok && ev.Type == watch.Added && vs.Status == nil {
				todo <- vs
			}
		}
	})
	for range 4 {
		wg.Go(func() {
			for vs := range todo {
				vs.Status = &snapshotv1.VolumeSnapshotStatus{ReadyToUse: ptr.To(true)}
				if _, err := e.client.SnapshotV1().VolumeSnapshots(e.ns).UpdateStatus(ctx, vs, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
					t.Errorf("mark %s ready: %v", vs.Name, err)
				}
			}
		})
	}
}

func names(m map[string]*snapshotv1.VolumeSnapshot) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// logTable prints every snapshot the test saw and whether it is kept at the end; a stretch of
// pruned ones is one line.
func logTable(t *testing.T, seen []string, kept map[string]*snapshotv1.VolumeSnapshot, loc *time.Location) {
	var b strings.Builder
	runAt := func(n string) string {
		at, _ := time.Parse("20060102t1504z", n[strings.LastIndex(n, "-")+1:])
		return at.In(loc).Format("Mon 2006-01-02 15:04 MST")
	}
	fmt.Fprintf(&b, "\n  %-40s %-26s %s", "snapshot", "run ("+loc.String()+")", "verdict")
	nKept := 0
	for i := 0; i < len(seen); i++ {
		if kept[seen[i]] != nil {
			nKept++
			fmt.Fprintf(&b, "\n  %-40s %-26s kept", seen[i], runAt(seen[i]))
			continue
		}
		j := i
		for j+1 < len(seen) && kept[seen[j+1]] == nil {
			j++
		}
		if j == i {
			fmt.Fprintf(&b, "\n  %-40s %-26s pruned", seen[i], runAt(seen[i]))
		} else {
			fmt.Fprintf(&b, "\n  %-40s %-26s pruned (%d runs)", seen[i]+" .. "+seen[j][strings.LastIndex(seen[j], "-")+1:], runAt(seen[i])+" ..", j-i+1)
		}
		i = j
	}
	fmt.Fprintf(&b, "\n  %d taken, %d kept, %d pruned", len(seen), nKept, len(seen)-nKept)
	t.Log(b.String())
}

func int32p(v int32) *int32 { return &v }

// simulatedDays is how long TestEveryMinute runs its schedule: a week with
// SHUTTER_SCHEDULE_WEEK=1, a day otherwise (each simulated minute costs a few API writes).
func simulatedDays() int {
	if os.Getenv("SHUTTER_SCHEDULE_WEEK") == "1" {
		return 7
	}
	return 1
}
