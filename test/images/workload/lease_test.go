package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shutter-csi/shutter/internal/kubehttp"
)

// leaseServer answers GETs of Leases in namespace ns with the JSON that body returns for the
// lease's name and the number of the request (from 1); 404 when body returns "".
func leaseServer(t *testing.T, body func(name string, n int) string) *kubehttp.Server {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		b := body(name, int(calls.Add(1)))
		if b == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, b)
	}))
	t.Cleanup(srv.Close)
	return &kubehttp.Server{Base: srv.URL, Token: "secret", Client: srv.Client()}
}

func leaseJSON(holder string, renewed time.Time) string {
	return fmt.Sprintf(`{"kind":"Lease","spec":{"holderIdentity":%q,"leaseDurationSeconds":15,"renewTime":%q}}`,
		holder, renewed.UTC().Format("2006-01-02T15:04:05.000000Z07:00"))
}

func TestLeasesHeldAndFresh(t *testing.T) {
	a := leaseServer(t, func(name string, _ int) string { return leaseJSON(name+"-holder", time.Now().Add(-2*time.Second)) })
	var out bytes.Buffer
	if err := checkLeases(context.Background(), a, "ns", []string{"one", "two"}, &out, 5*time.Second, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"lease ns/one: held by one-holder", "lease ns/two: held by two-holder"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
}

// A Lease that appears and gets a holder only after a few requests (a controller that is still
// starting) passes once it does.
func TestLeaseWaitedFor(t *testing.T) {
	a := leaseServer(t, func(_ string, n int) string {
		switch {
		case n == 1:
			return ""
		case n < 4:
			return leaseJSON("", time.Now())
		}
		return leaseJSON("late", time.Now())
	})
	var out bytes.Buffer
	if err := checkLeases(context.Background(), a, "ns", []string{"x"}, &out, 5*time.Second, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "held by late") {
		t.Errorf("output %q", out.String())
	}
}

func TestLeaseNotLive(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{name: "missing", body: "", want: "404"},
		{name: "expired", body: leaseJSON("gone", time.Now().Add(-time.Minute)), want: "held by gone, last renewed 1m0s ago"},
		{name: "free", body: leaseJSON("", time.Now()), want: "nobody holds it"},
		{name: "garbage", body: "{", want: "lease ns/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := leaseServer(t, func(string, int) string { return tc.body })
			err := checkLeases(context.Background(), a, "ns", []string{"x"}, &bytes.Buffer{}, 100*time.Millisecond, 10*time.Millisecond)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestLeaseUsage(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, args := range [][]string{{"lease", "ns"}, {"lease", "ns", "x"}} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%q: want an error", args)
		}
	}
}
