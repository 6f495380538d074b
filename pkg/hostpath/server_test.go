//go:build linux

package hostpath

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr/funcr"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/test/testenv"
)

func TestLogUnaryStripsSecrets(t *testing.T) {
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 5})
	req := &csi.CreateVolumeRequest{Name: "v", Secrets: map[string]string{"password": "hunter2"}}
	info := &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Controller/CreateVolume"}
	var handlerLogger bool
	_, err := logUnary(logger)(context.Background(), req, info, func(ctx context.Context, _ any) (any, error) {
		handlerLogger = klog.FromContext(ctx).GetSink() != nil
		return nil, status.Error(codes.NotFound, "gone")
	})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("interceptor changed the error: %v", err)
	}
	out := strings.Join(lines, "\n")
	for _, want := range []string{`"method"="/csi.v1.Controller/CreateVolume"`, `"code"="NotFound"`, `"duration"=`, `***stripped***`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("secret reached the log:\n%s", out)
	}
	if !handlerLogger {
		t.Error("handler got no contextual logger")
	}
}

// TestCloseWaitsForHandlers: after a forced stop gRPC no longer waits for
// handlers, so Close must, or a late handler writes to a closed record log.
func TestCloseWaitsForHandlers(t *testing.T) {
	waiting := make(chan struct{})
	d := &Driver{closeWaits: func() { close(waiting) }}
	release, running := make(chan struct{}), make(chan struct{})
	handlerDone := make(chan struct{})
	go func() {
		defer close(handlerDone)
		_, _ = countUnary(&d.calls)(context.Background(), nil, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) {
			close(running)
			<-release
			return nil, nil
		})
	}()
	<-running
	closed := make(chan struct{})
	go func() { _ = d.Close(); close(closed) }()
	// Close has looked: it waits for the handler, which cannot end before
	// release.
	select {
	case <-waiting:
	case <-closed:
		t.Fatal("Close returned while a handler still ran")
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not start waiting for the running handler")
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a handler still ran")
	default:
	}
	close(release)
	<-handlerDone
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the handler ended")
	}
}

// TestRunSharesSocketWithGroup: with SocketGroup the socket belongs to that
// group with mode 0660, so sidecars that run as that group, not as root,
// can connect.
func TestRunSharesSocketWithGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving the socket to another group needs root")
	}
	dir := t.TempDir()
	o := testOptions(dir)
	o.SocketGroup = 65532
	sock := filepath.Join(dir, "csi.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	testenv.WaitUntil(t, "a socket of group 65532 with mode 0660", 10*time.Second, func(context.Context) bool {
		var st unix.Stat_t
		return unix.Stat(sock, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK && st.Gid == 65532 && st.Mode&0o777 == 0o660
	})
}
