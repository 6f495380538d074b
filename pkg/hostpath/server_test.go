package hostpath

import (
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
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
