package app

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/shutter-csi/shutter/test/testenv"
)

// stallOnce holds, once armed, the next Lease update until its context ends: a renewal that
// never reaches the API server in time, as for a frozen process or an unreachable server.
type stallOnce struct {
	mu      sync.Mutex
	armed   bool
	reached chan struct{}
}

func (s *stallOnce) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed, s.reached = true, make(chan struct{})
}

func (s *stallOnce) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTrip(func(req *http.Request) (*http.Response, error) {
		s.mu.Lock()
		hit := s.armed && req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/leases/")
		if hit {
			s.armed = false
			close(s.reached)
		}
		s.mu.Unlock()
		if hit {
			<-req.Context().Done()
			return nil, req.Context().Err()
		}
		return rt.RoundTrip(req)
	})
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestDeposedLeaderLeavesSuccessorsLease: a leader's renewal stalls past its deadline while
// another replica takes the Lease. The deposed leader's term ends and it exits, and the Lease
// stays with the successor: client-go's release alone would write an empty holder over it (it
// checks the record it observed last, which still names the deposed leader), and a third
// replica could then lead beside the successor.
func TestDeposedLeaderLeavesSuccessorsLease(t *testing.T) {
	env := testenv.Start(t)
	admin := kubernetes.NewForConfigOrDie(env.Config)
	ns := testenv.Namespace(t, admin)
	stall := &stallOnce{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(stall.wrap)
	e := NewElector(LeaderElectionOptions{Enabled: true, Namespace: ns,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}, "stalled")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading := make(chan struct{})
	returned := make(chan error, 1)
	go func() {
		returned <- e.Run(ctx, kubernetes.NewForConfigOrDie(cfg), func(ctx context.Context) {
			close(leading)
			<-ctx.Done()
		})
	}()
	select {
	case <-leading:
	case <-time.After(time.Minute):
		t.Fatal("never became leader")
	}
	stall.arm()
	select {
	case <-stall.reached:
	case <-time.After(30 * time.Second):
		t.Fatal("no renewal")
	}
	leases := admin.CoordinationV1().Leases(ns)
	lease, err := leases.Get(context.Background(), "stalled", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.HolderIdentity, lease.Spec.AcquireTime, lease.Spec.RenewTime = ptr.To("successor"), &now, &now
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(60))
	if _, err := leases.Update(context.Background(), lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-returned:
		if err == nil {
			t.Error("Run = nil after the Lease was lost, want an error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the deposed leader's Run did not return")
	}
	if lease, err = leases.Get(context.Background(), "stalled", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h != "successor" {
		t.Errorf("Lease holder %q after the deposed leader stopped, want the successor's", h)
	}
}
