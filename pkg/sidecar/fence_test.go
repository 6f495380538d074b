package sidecar

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/shutter-csi/shutter/pkg/app"
)

// TestClientsFenced: while the sidecar does not hold a fresh Lease (here: leader election on,
// the election not won), its content patches and events are refused without reaching the API
// server; its reads pass, and so do the Lease client's writes, which must keep renewing.
func TestClientsFenced(t *testing.T) {
	var mu sync.Mutex
	var reached []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reached = append(reached, r.Method+" "+r.URL.Path)
		mu.Unlock()
		http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, http.StatusNotFound)
	}))
	defer srv.Close()
	elector := app.NewElector(app.LeaderElectionOptions{Enabled: true, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second}, "fence")
	c, err := newClients(&rest.Config{Host: srv.URL}, elector)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = c.snapshots.SnapshotV1().VolumeSnapshotContents().Patch(ctx, "c", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{}, "status")
	if !errors.Is(err, app.ErrNotLeading) {
		t.Errorf("content status patch: %v, want ErrNotLeading", err)
	}
	_, err = c.kube.CoreV1().Events("ns").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e"}}, metav1.CreateOptions{})
	if !errors.Is(err, app.ErrNotLeading) {
		t.Errorf("event: %v, want ErrNotLeading", err)
	}
	if _, err := c.kube.CoreV1().Secrets("ns").Get(ctx, "s", metav1.GetOptions{}); err == nil || errors.Is(err, app.ErrNotLeading) {
		t.Errorf("secret read: %v, want it to reach the server (404)", err)
	}
	_, err = c.lease.CoordinationV1().Leases("ns").Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "fence", Namespace: "ns"}}, metav1.UpdateOptions{})
	if err == nil || errors.Is(err, app.ErrNotLeading) {
		t.Errorf("Lease update: %v, want it to reach the server (404)", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(reached, ","); got != "GET /api/v1/namespaces/ns/secrets/s,PUT /apis/coordination.k8s.io/v1/namespaces/ns/leases/fence" {
		t.Errorf("requests that reached the API server: %s", got)
	}
}
