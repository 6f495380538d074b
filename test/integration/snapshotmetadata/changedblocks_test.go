package snapshotmetadata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	api "github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shutter-csi/shutter/pkg/changedblocks"
	"github.com/shutter-csi/shutter/test/testenv"
)

var (
	written = [][2]int64{{0, 8192}, {3 << 20, 4096}, {(9 << 20) + 4096, 12288}}
	changed = [][2]int64{{4096, 4096}, {(5 << 20) + 8192, 65536}, {(13 << 20) + 8192, 4096}}
)

// TestChangedBlocks is the whole flow: a volume written, snapshot A, three scattered ranges
// changed, snapshot B; a ServiceAccount allowed to get the namespace's VolumeSnapshots gets
// exactly the written ranges of A and the changed ranges from A to B, and applying the delta read
// from a restore of B onto a restore of A makes the two equal. Callers without RBAC, with a token
// for another audience, and deltas across volumes are refused with their codes.
func TestChangedBlocks(t *testing.T) {
	e := start(t)
	ctx := t.Context()
	vol, file := e.volume(t, e.ns+"-vol", "")
	writeRanges(t, file, written)
	handleA := e.snapshot(t, "a", vol)
	writeRanges(t, file, changed)
	handleB := e.snapshot(t, "b", vol)
	other, _ := e.volume(t, e.ns+"-other", "")
	handleC := e.snapshot(t, "c", other)
	handleGone := e.snapshot(t, "gone", vol)
	e.deleteSnapshot(t, "gone", handleGone)
	e.pendingSnapshot(t, "pending")
	e.serviceAccount(t, "backup", true)
	e.serviceAccount(t, "nobody", false)

	svc, err := changedblocks.Dial(ctx, e.snapshots, driverName)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	token := func(sa, aud string) string {
		tok, err := changedblocks.Token(ctx, e.kube, e.ns, sa, aud)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	backup := token("backup", audience)
	list := func(req changedblocks.Request) ([]changedblocks.Batch, error) {
		req.Namespace = e.ns
		var out []changedblocks.Batch
		err := svc.List(ctx, req, func(b changedblocks.Batch) error { out = append(out, b); return nil })
		return out, err
	}
	alloc, err := list(changedblocks.Request{Token: backup, Snapshot: "a"})
	if err != nil || !reflect.DeepEqual(flatten(alloc), written) {
		t.Fatalf("allocated of A = %v, %v; want %v", flatten(alloc), err, written)
	}
	delta, err := list(changedblocks.Request{Token: backup, Snapshot: "b", BaseID: handleA})
	if err != nil || !reflect.DeepEqual(flatten(delta), changed) {
		t.Fatalf("delta A→B = %v, %v; want %v", flatten(delta), err, changed)
	}

	_, restoredA := e.volume(t, e.ns+"-restore-a", handleA)
	_, restoredB := e.volume(t, e.ns+"-restore-b", handleB)
	if digest(t, restoredA) == digest(t, restoredB) {
		t.Fatal("the restores of A and B are equal before applying the delta")
	}
	applyDelta(t, restoredB, restoredA, delta)
	if digest(t, restoredA) != digest(t, restoredB) {
		t.Error("A with the delta applied differs from B")
	}

	// Upstream's hostpath driver answers an offset past the volume's end (but within what its
	// filesystem can seek to) with an empty stream, not the OutOfRange the CSI spec asks for.
	pastEnd := codes.OutOfRange
	if os.Getenv(upstreamHostpathEnv) != "" {
		pastEnd = codes.OK
	}
	for _, tt := range []struct {
		name string
		req  changedblocks.Request
		code codes.Code
	}{
		{"no RBAC", changedblocks.Request{Token: token("nobody", audience), Snapshot: "b", BaseID: handleA}, codes.PermissionDenied},
		{"wrong audience", changedblocks.Request{Token: token("backup", "someone-else"), Snapshot: "b", BaseID: handleA}, codes.Unauthenticated},
		{"different volumes", changedblocks.Request{Token: backup, Snapshot: "b", BaseID: handleC}, codes.InvalidArgument},
		{"unknown snapshot", changedblocks.Request{Token: backup, Snapshot: "nope"}, codes.NotFound},
		{"unknown base", changedblocks.Request{Token: backup, Snapshot: "b", BaseID: "snap-gone"}, codes.NotFound},
		{"deleted base", changedblocks.Request{Token: backup, Snapshot: "b", BaseID: handleGone}, codes.NotFound},
		{"not ready", changedblocks.Request{Token: backup, Snapshot: "pending"}, codes.Unavailable},
		{"huge starting_offset", changedblocks.Request{Token: backup, Snapshot: "b", BaseID: handleA, StartingOffset: 1 << 62}, codes.OutOfRange},
		{"starting_offset past the end", changedblocks.Request{Token: backup, Snapshot: "a", StartingOffset: volumeSize + 1}, pastEnd},
		{"negative starting_offset", changedblocks.Request{Token: backup, Snapshot: "a", StartingOffset: -1}, codes.OutOfRange},
		{"negative max_results", changedblocks.Request{Token: backup, Snapshot: "b", BaseID: handleA, MaxResults: -1}, codes.InvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := list(tt.req); status.Code(err) != tt.code {
				t.Errorf("got %v, want %v", err, tt.code)
			}
		})
	}

	t.Run("max_results 0 lets the driver choose", func(t *testing.T) {
		delta, err := list(changedblocks.Request{Token: backup, Snapshot: "b", BaseID: handleA, MaxResults: 0})
		if err != nil || len(delta) != 1 || !reflect.DeepEqual(flatten(delta), changed) {
			t.Errorf("delta A→B with max_results 0 = %v in %d messages, %v; want %v in one", flatten(delta), len(delta), err, changed)
		}
	})

	t.Run("client stops reading", func(t *testing.T) {
		stopsReading(t, e, svc, backup, vol)
	})

	t.Run("kubectl shutter changed-blocks", func(t *testing.T) {
		kubeconfig := testenv.Start(t).Kubeconfig
		var out, errOut strings.Builder
		err := changedblocks.Run(ctx, []string{"--kubeconfig", kubeconfig, e.ns + "/b", "--base", "a",
			"--service-account", e.ns + "/backup", "-o", "json", "--max-results", "1"}, &out, &errOut)
		if err != nil {
			t.Fatalf("%v\n%s", err, errOut.String())
		}
		var got [][2]int64
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var b changedblocks.Batch
			if err := json.Unmarshal([]byte(line), &b); err != nil || len(b.Ranges) != 1 {
				t.Fatalf("line %q: %v, want one range per message with --max-results 1", line, err)
			}
			got = append(got, [2]int64{b.Ranges[0].Offset, b.Ranges[0].Size})
		}
		if merged := mergeRanges(got); !reflect.DeepEqual(merged, changed) {
			t.Errorf("changed-blocks -o json listed %v (merged %v), want %v", got, merged, changed)
		}
		_, baseCopy := e.volume(t, e.ns+"-verify-a", handleA)
		_, targetCopy := e.volume(t, e.ns+"-verify-b", handleB)
		out.Reset()
		err = changedblocks.Run(ctx, []string{"--kubeconfig", kubeconfig, e.ns + "/b", "--base", "a",
			"--service-account", e.ns + "/backup", "--source", targetCopy, "--verify", baseCopy}, &out, &errOut)
		if err != nil || !strings.Contains(out.String(), "verified: equal") {
			t.Errorf("--verify: %v\n%s%s", err, out.String(), errOut.String())
		}
	})

	t.Run("upstream iterator", func(t *testing.T) {
		clients, err := iterator.BuildClients(testenv.Start(t).Config)
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			name string
			prev string
			want [][2]int64
		}{{"allocated", "", written}, {"delta by name", "a", changed}} {
			t.Run(tt.name, func(t *testing.T) {
				rec := &recorder{}
				err := iterator.GetSnapshotMetadata(ctx, iterator.Args{Clients: clients, Emitter: rec, Namespace: e.ns,
					SnapshotName: "b", PrevSnapshotName: tt.prev, SANamespace: e.ns, SAName: "backup"})
				want := tt.want
				if tt.prev == "" {
					want = merged()
				}
				if err != nil || !reflect.DeepEqual(rec.ranges, want) || !rec.done {
					t.Errorf("upstream iterator: %v, done %v, %v; want %v", rec.ranges, rec.done, err, want)
				}
			})
		}
		if lister := os.Getenv(listerEnv); lister != "" {
			runLister(t, lister, e.ns)
		}
		rec := &recorder{}
		err = iterator.GetSnapshotMetadata(ctx, iterator.Args{Clients: clients, Emitter: rec, Namespace: e.ns,
			SnapshotName: "b", PrevSnapshotID: handleA, SANamespace: e.ns, SAName: "nobody"})
		if err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
			t.Errorf("upstream iterator as nobody: %v, want PermissionDenied", err)
		}
	})
}

// stopsReading asks for the allocated ranges of a new snapshot of vol, one a message, and stops
// reading after the first: meanwhile the snapshot can be deleted (the call holds nothing of it);
// when the client then cancels, the call ends with Canceled and no goroutine of the sidecar or
// the driver (both in this process) is left.
func stopsReading(t *testing.T, e *env, svc *changedblocks.Service, token, vol string) {
	handle := e.snapshot(t, "stall", vol)
	req := changedblocks.Request{Token: token, Namespace: e.ns, Snapshot: "stall", MaxResults: 1}
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first, done := make(chan struct{}), make(chan error, 1)
	go func() {
		n := 0
		done <- svc.List(ctx, req, func(changedblocks.Batch) error {
			if n++; n == 1 {
				close(first)
				<-ctx.Done() // the client stops reading, then gives up
				return ctx.Err()
			}
			return nil
		})
	}()
	select {
	case <-first:
	case err := <-done:
		t.Fatalf("the call ended before its first message: %v", err)
	}
	e.deleteSnapshot(t, "stall", handle)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) && status.Code(err) != codes.Canceled {
		t.Errorf("the stopped call ended with %v, want Canceled", err)
	}
	testenv.WaitGoroutines(t, base, 20*time.Second)
}

// listerEnv names a snapshot-metadata-lister binary of upstream's to run against the sidecar as
// well (by hand: upstream's tools are not Go modules the proxy serves).
const listerEnv = "SHUTTER_UPSTREAM_LISTER"

// runLister runs upstream's lister for the delta from a to b as the backup ServiceAccount and
// checks that its JSON output holds the changed ranges.
func runLister(t *testing.T, lister, ns string) {
	out, err := exec.CommandContext(t.Context(), lister, "-kubeconfig", testenv.Start(t).Kubeconfig, "-n", ns, "-s", "b", "-p", "a",
		"-service-account", "backup", "-service-account-namespace", ns, "-o", "json").CombinedOutput()
	t.Logf("%s:\n%s", lister, out)
	if err != nil {
		t.Fatalf("%s: %v", lister, err)
	}
	for _, r := range changed {
		if !strings.Contains(string(out), fmt.Sprintf(`"byte_offset":%d,"size_bytes":%d`, r[0], r[1])) {
			t.Errorf("the lister's output lacks the range %v", r)
		}
	}
}

// mergeRanges joins ranges that touch: a driver may split a range over several messages.
func mergeRanges(in [][2]int64) [][2]int64 {
	var out [][2]int64
	for _, r := range in {
		if n := len(out); n > 0 && out[n-1][0]+out[n-1][1] == r[0] {
			out[n-1][1] += r[1]
			continue
		}
		out = append(out, r)
	}
	return out
}

// merged is the allocated ranges of B: A's written ranges and the changed ones, merged.
func merged() [][2]int64 {
	return [][2]int64{{0, 8192}, {3 << 20, 4096}, {(5 << 20) + 8192, 65536}, {(9 << 20) + 4096, 12288}, {(13 << 20) + 8192, 4096}}
}

func applyDelta(t *testing.T, from, onto string, batches []changedblocks.Batch) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(onto, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	for _, b := range batches {
		if err := changedblocks.Apply(src, dst, b.Ranges); err != nil {
			t.Fatal(err)
		}
	}
}

// recorder is an iterator.IteratorEmitter that keeps the ranges.
type recorder struct {
	ranges [][2]int64
	done   bool
}

func (r *recorder) SnapshotMetadataIteratorRecord(_ int, m iterator.IteratorMetadata) error {
	if m.BlockMetadataType != api.BlockMetadataType_VARIABLE_LENGTH {
		return status.Errorf(codes.Internal, "block type %v", m.BlockMetadataType)
	}
	for _, b := range m.BlockMetadata {
		r.ranges = append(r.ranges, [2]int64{b.ByteOffset, b.SizeBytes})
	}
	return nil
}

func (r *recorder) SnapshotMetadataIteratorDone(int) error {
	r.done = true
	return nil
}
