package csi

import (
	"context"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// loggedConn routes every RPC of the sidecar's stubs through logUnary and
// bounds each by timeout.
type loggedConn struct {
	grpc.ClientConnInterface
	timeout time.Duration
}

// Invoke implements grpc.ClientConnInterface.
func (c *loggedConn) Invoke(ctx context.Context, method string, req, reply any, opts ...grpc.CallOption) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return logUnary(ctx, method, req, reply, nil, func(ctx context.Context, method string, req, reply any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
		return c.ClientConnInterface.Invoke(ctx, method, req, reply, opts...)
	}, opts...)
}

// logUnary is the one interceptor that logs the sidecar's CSI calls, with the caller's contextual
// logger: the outcome at V(4) (V(2) for errors), the request and response at V(5) with every
// secret field stripped by protosanitizer. (csi-lib-utils' connection adds its own sanitized
// payload logging at V(5) as well.)
func logUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	logger := klog.FromContext(ctx).WithValues("method", method)
	if v := logger.V(5); v.Enabled() {
		v.Info("CSI request", "request", protosanitizer.StripSecrets(req))
	}
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil {
		logger.V(2).Info("CSI call failed", "duration", time.Since(start), "code", status.Code(err).String(),
			"outcome", Classify(err).String(), "err", err.Error())
		return err
	}
	logger.V(4).Info("CSI call done", "duration", time.Since(start))
	if v := logger.V(5); v.Enabled() {
		v.Info("CSI response", "response", protosanitizer.StripSecrets(reply))
	}
	return nil
}
