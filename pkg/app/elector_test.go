package app

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/shutter-csi/shutter/test/testenv"
)

// TestElectorHandsBackLeaseAfterRun stops a leading Elector while its work is under way: the
// Lease stays held until run has returned (no other replica may start meanwhile), then it is
// handed back and Run returns nil.
func TestElectorHandsBackLeaseAfterRun(t *testing.T) {
	env := testenv.Start(t)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ns := testenv.Namespace(t, cs)
	e := NewElector(LeaderElectionOptions{Enabled: true, Namespace: ns,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 100 * time.Millisecond}, "graceful")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading, stopping, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	returned := make(chan error, 1)
	go func() {
		returned <- e.Run(ctx, cs, func(ctx context.Context) {
			if !e.leadsFreshly() {
				t.Error("a leader that just renewed its Lease is not fresh: its writes would be fenced")
			}
			close(leading)
			<-ctx.Done()
			close(stopping)
			<-release
		})
	}()
	select {
	case <-leading:
	case <-time.After(time.Minute):
		t.Fatal("never became leader")
	}
	cancel()
	<-stopping
	holder := func() string {
		lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), "graceful", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ptr.Deref(lease.Spec.HolderIdentity, "")
	}
	// While run finishes its work, the Lease must stay held: watch it for ten retry periods,
	// in which a premature release (one API call after the context ended) would show.
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		if holder() == "" {
			t.Fatal("the Lease was handed back while run was still working")
		}
	}
	close(release)
	select {
	case err := <-returned:
		if err != nil {
			t.Fatalf("Run = %v, want nil after a stop", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after run did")
	}
	if h := holder(); h != "" {
		t.Errorf("Lease still held by %q after Run returned, want it handed back", h)
	}
}

// TestFencedRefusesWritesWhenNotFresh: a replica whose Lease is not freshly renewed (a paused
// leader that resumed) reads but cannot write; once fresh, it writes.
func TestFencedRefusesWritesWhenNotFresh(t *testing.T) {
	var reached atomic.Int32
	var checked atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		checked.Store(r.Header.Get(LeaseCheckedHeader))
	}))
	defer srv.Close()
	e := NewElector(LeaderElectionOptions{Enabled: true, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second}, "fence")
	var fresh atomic.Bool
	e.fresh = fresh.Load
	rt, err := rest.TransportFor(e.Fenced(&rest.Config{Host: srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	do := func(method string) error {
		req, _ := http.NewRequest(method, srv.URL+"/api/v1/namespaces/x/configmaps", nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := do(http.MethodGet); err != nil {
		t.Errorf("GET while not fresh: %v, want it through", err)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if err := do(m); !errors.Is(err, ErrNotLeading) {
			t.Errorf("%s while not fresh: %v, want ErrNotLeading", m, err)
		}
	}
	if n := reached.Load(); n != 1 {
		t.Errorf("%d requests reached the server, want only the GET", n)
	}
	fresh.Store(true)
	before := time.Now()
	if err := do(http.MethodPatch); err != nil {
		t.Errorf("PATCH while fresh: %v", err)
	}
	if ns, err := strconv.ParseInt(checked.Load().(string), 10, 64); err != nil || time.Unix(0, ns).Before(before) || time.Unix(0, ns).After(time.Now()) {
		t.Errorf("%s header %q, want the time of the check", LeaseCheckedHeader, checked.Load())
	}
	if n := reached.Load(); n != 2 {
		t.Errorf("%d requests reached the server, want 2", n)
	}
	if off := NewElector(LeaderElectionOptions{}, "off"); off.Fenced(&rest.Config{Host: srv.URL}).WrapTransport != nil {
		t.Error("without leader election the configuration must stay unwrapped")
	}
}

// TestElectorWaitsForPredecessor: a replica of an older release holds the Lease of the old name.
// The new replica takes its own Lease but runs nothing until the old one is handed back.
func TestElectorWaitsForPredecessor(t *testing.T) {
	env := testenv.Start(t)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	ns := testenv.Namespace(t, cs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	old := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "older", Namespace: ns}, Spec: coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To("old-replica"), LeaseDurationSeconds: ptr.To[int32](60), RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	old, err := cs.CoordinationV1().Leases(ns).Create(ctx, old, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := NewElector(LeaderElectionOptions{Enabled: true, Namespace: ns,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 100 * time.Millisecond}, "newer").After("older")
	running := make(chan struct{})
	go func() {
		_ = e.Run(ctx, cs, func(ctx context.Context) {
			close(running)
			<-ctx.Done()
		})
	}()
	// Two renewals of its own Lease: by then the replica leads and has read the old Lease.
	var renewals []time.Time
	testenv.WaitFor(t, "two renewals of the new Lease", time.Minute, func(ctx context.Context) (*coordinationv1.Lease, error) {
		return cs.CoordinationV1().Leases(ns).Get(ctx, "newer", metav1.GetOptions{})
	}, func(l *coordinationv1.Lease) bool {
		if l == nil || l.Spec.RenewTime == nil {
			return false
		}
		if n := len(renewals); n == 0 || !renewals[n-1].Equal(l.Spec.RenewTime.Time) {
			renewals = append(renewals, l.Spec.RenewTime.Time)
		}
		return len(renewals) >= 3
	})
	select {
	case <-running:
		t.Fatal("the new replica runs while the older release's Lease is live")
	default:
	}
	old.Spec.HolderIdentity = nil
	if _, err := cs.CoordinationV1().Leases(ns).Update(ctx, old, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-running:
	case <-time.After(time.Minute):
		t.Fatal("the new replica did not run after the older one handed back its Lease")
	}
}
