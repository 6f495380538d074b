//go:build linux

package hostpath

import (
	"context"
	"sync"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// countUnary counts unary calls in calls while their handlers run.
func countUnary(calls *sync.WaitGroup) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		calls.Add(1)
		defer calls.Done()
		return handler(ctx, req)
	}
}

// countStream does for streaming calls what countUnary does for unary ones.
func countStream(calls *sync.WaitGroup) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		calls.Add(1)
		defer calls.Done()
		return handler(srv, ss)
	}
}

// logUnary is the one interceptor that logs every unary CSI call: method,
// duration and status code, and at V(5) the request and response with
// secrets stripped. Handlers get a contextual logger with the method set.
func logUnary(base klog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		logger := base.WithValues("method", info.FullMethod)
		ctx = klog.NewContext(ctx, logger)
		if v := logger.V(5); v.Enabled() {
			v.Info("CSI request", "request", protosanitizer.StripSecrets(req))
		}
		start := time.Now()
		resp, err := handler(ctx, req)
		logCall(logger, start, err)
		if v := logger.V(5); v.Enabled() && err == nil {
			v.Info("CSI response", "response", protosanitizer.StripSecrets(resp))
		}
		return resp, err
	}
}

// logStream does for streaming calls (SnapshotMetadata) what logUnary does
// for unary ones.
func logStream(base klog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		logger := base.WithValues("method", info.FullMethod)
		start := time.Now()
		err := handler(srv, &loggedStream{ServerStream: ss, ctx: klog.NewContext(ss.Context(), logger)})
		logCall(logger, start, err)
		return err
	}
}

func logCall(logger klog.Logger, start time.Time, err error) {
	code := status.Code(err)
	if err != nil {
		logger.V(2).Info("CSI call failed", "duration", time.Since(start), "code", code.String(), "err", err.Error())
		return
	}
	logger.V(2).Info("CSI call done", "duration", time.Since(start), "code", code.String())
}

// loggedStream carries the contextual logger into stream handlers.
type loggedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *loggedStream) Context() context.Context { return s.ctx }

// RecvMsg logs incoming stream messages at V(5) with secrets stripped.
func (s *loggedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if v := klog.FromContext(s.ctx).V(5); v.Enabled() && err == nil {
		v.Info("CSI request", "request", protosanitizer.StripSecrets(m))
	}
	return err
}
