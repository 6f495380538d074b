package snapshotmetadata

import (
	"context"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shutter-csi/shutter/pkg/changedblocks"
	"github.com/shutter-csi/shutter/pkg/snapshotmetadata/smtest"

	"github.com/shutter-csi/shutter/test/testenv"
)

func TestAllocatedAndDelta(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name string
		req  changedblocks.Request
		want [][2]int64
		// batches is the number of messages the driver's batches of 2 (or max_results) make.
		batches int
	}{
		{name: "allocated", req: changedblocks.Request{Token: tokenBackup, Snapshot: "a"},
			want: [][2]int64{{0, 4096}, {1 << 20, 8192}, {512 << 20, 65536}}, batches: 2},
		{name: "max_results 0 lets the driver choose", req: changedblocks.Request{Token: tokenBackup, Snapshot: "a", MaxResults: 0},
			want: [][2]int64{{0, 4096}, {1 << 20, 8192}, {512 << 20, 65536}}, batches: 2},
		{name: "allocated one per message", req: changedblocks.Request{Token: tokenBackup, Snapshot: "a", MaxResults: 1},
			want: [][2]int64{{0, 4096}, {1 << 20, 8192}, {512 << 20, 65536}}, batches: 3},
		{name: "allocated from an offset", req: changedblocks.Request{Token: tokenBackup, Snapshot: "a", StartingOffset: 2 << 20},
			want: [][2]int64{{512 << 20, 65536}}, batches: 1},
		{name: "delta", req: changedblocks.Request{Token: tokenBackup, Snapshot: "b", BaseID: "h-a"},
			want: [][2]int64{{4096, 4096}, {300 << 20, 65536}, {900 << 20, 1 << 20}}, batches: 2},
		{name: "offset at the end", req: changedblocks.Request{Token: tokenBackup, Snapshot: "a", StartingOffset: 1 << 30}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := f.list(t, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(flatten(got), tt.want) || len(got) != tt.batches {
				t.Errorf("got %v in %d messages, want %v in %d", flatten(got), len(got), tt.want, tt.batches)
			}
			for _, b := range got {
				if b.Type != "VARIABLE_LENGTH" || b.Capacity != 1<<30 {
					t.Errorf("message type %s capacity %d", b.Type, b.Capacity)
				}
			}
		})
	}
	if got := f.driver.LastSecrets(); got["password"] != "s3cret" {
		t.Errorf("the driver got secrets %v, want the class's snapshotter secret", got)
	}
	if got := testutil.ToFloat64(f.metrics.calls.WithLabelValues(OpAllocated, "OK")); got != 5 {
		t.Errorf("calls_total{MetadataAllocated,OK} = %v, want 5", got)
	}
}

func TestRefusals(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name string
		req  changedblocks.Request
		code codes.Code
		msg  string
	}{
		{"no token", changedblocks.Request{Snapshot: "a"}, codes.InvalidArgument, "security_token"},
		{"no snapshot name", changedblocks.Request{Token: tokenBackup}, codes.InvalidArgument, "snapshot_name"},
		{"wrong audience", changedblocks.Request{Token: tokenAudience, Snapshot: "a"}, codes.Unauthenticated, testAudience},
		{"unknown token", changedblocks.Request{Token: "forged", Snapshot: "a"}, codes.Unauthenticated, ""},
		{"no RBAC", changedblocks.Request{Token: tokenNobody, Snapshot: "a"}, codes.PermissionDenied, "may not get volumesnapshots"},
		{"other namespace", changedblocks.Request{Token: tokenBackup, Snapshot: "a", Namespace: "kube-system"}, codes.PermissionDenied, ""},
		{"unknown snapshot", changedblocks.Request{Token: tokenBackup, Snapshot: "nope"}, codes.NotFound, "apps/nope"},
		{"not ready", changedblocks.Request{Token: tokenBackup, Snapshot: "pending"}, codes.Unavailable, "not ready"},
		{"another driver's snapshot", changedblocks.Request{Token: tokenBackup, Snapshot: "foreign"}, codes.InvalidArgument, "other.csi.example"},
		{"different volumes", changedblocks.Request{Token: tokenBackup, Snapshot: "b", BaseID: "h-c"}, codes.InvalidArgument, "two snapshots of one volume"},
		{"deleted base", changedblocks.Request{Token: tokenBackup, Snapshot: "b", BaseID: "h-gone"}, codes.NotFound, "h-gone"},
		{"huge starting offset", changedblocks.Request{Token: tokenBackup, Snapshot: "a", StartingOffset: 1 << 62}, codes.OutOfRange, ""},
		{"negative starting offset", changedblocks.Request{Token: tokenBackup, Snapshot: "a", StartingOffset: -1}, codes.OutOfRange, "negative"},
		{"negative max_results", changedblocks.Request{Token: tokenBackup, Snapshot: "a", MaxResults: -5}, codes.InvalidArgument, "max_results"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.list(t, tt.req)
			if st := status.Convert(err); st.Code() != tt.code || !strings.Contains(st.Message(), tt.msg) {
				t.Errorf("got %v, want %v containing %q", err, tt.code, tt.msg)
			}
		})
	}
}

func TestAudienceFlag(t *testing.T) {
	f := newFixture(t, func(o *Options, _ *smtest.Driver) { o.Audience = "other" })
	if _, err := f.list(t, changedblocks.Request{Token: tokenAudience, Snapshot: "a"}); err != nil {
		t.Errorf("--audience other: a token for other got %v", err)
	}
	if _, err := f.list(t, changedblocks.Request{Token: tokenBackup, Snapshot: "a"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("--audience other: a token for the service object's audience got %v, want Unauthenticated", err)
	}
}

// TestStreamEnds checks that the driver's stream ends, and no goroutine is left, when the
// client cancels and when a client that stopped reading reaches the maximum duration.
func TestStreamEnds(t *testing.T) {
	t.Run("client cancels", func(t *testing.T) {
		f := newFixture(t, func(_ *Options, d *smtest.Driver) { d.Endless = true })
		base := warm(t, f)
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		err := f.svc.List(ctx, changedblocks.Request{Token: tokenBackup, Namespace: testNS, Snapshot: "a"}, func(changedblocks.Batch) error {
			if n++; n == 100 {
				cancel()
			}
			return nil
		})
		if status.Code(err) != codes.Canceled {
			t.Errorf("got %v, want Canceled", err)
		}
		waitEnded(t, f)
		testenv.WaitGoroutines(t, base, 20*time.Second)
	})
	t.Run("client stops reading", func(t *testing.T) {
		f := newFixture(t, func(o *Options, d *smtest.Driver) { d.Endless = true; o.MaxStreamDuration = time.Second })
		base := warm(t, f)
		read := make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			n := 0
			errc <- f.svc.List(context.Background(), changedblocks.Request{Token: tokenBackup, Namespace: testNS, Snapshot: "a"}, func(changedblocks.Batch) error {
				if n++; n == 1 {
					<-read // stop reading until the driver's stream has ended
				}
				return nil
			})
		}()
		waitEnded(t, f)
		close(read)
		if err := <-errc; status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "maximum streaming duration") {
			t.Errorf("got %v, want DeadlineExceeded for the maximum streaming duration", err)
		}
		testenv.WaitGoroutines(t, base, 20*time.Second)
	})
}

// warm makes one call so the connections' goroutines exist, and returns the goroutine count.
func warm(t *testing.T, f *fixture) int {
	t.Helper()
	if _, err := f.list(t, changedblocks.Request{Token: tokenBackup, Snapshot: "missing"}); status.Code(err) != codes.NotFound {
		t.Fatalf("warm-up call: %v", err)
	}
	return runtime.NumGoroutine()
}

func waitEnded(t *testing.T, f *fixture) {
	t.Helper()
	select {
	case <-f.driver.Ended:
	case <-time.After(30 * time.Second):
		t.Fatalf("the driver's stream did not end (%d open)", f.driver.Open.Load())
	}
	if n := f.driver.Open.Load(); n != 0 {
		t.Errorf("%d driver streams still open", n)
	}
}
