package csi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Outcome
	}{
		{name: "nil", err: nil, want: Succeeded},
		{name: "OK status", err: status.Error(codes.OK, ""), want: Succeeded},
		{name: "invalid argument", err: status.Error(codes.InvalidArgument, "bad"), want: Failed},
		{name: "already exists", err: status.Error(codes.AlreadyExists, "other source"), want: Failed},
		{name: "failed precondition", err: status.Error(codes.FailedPrecondition, "x"), want: Failed},
		{name: "not found", err: status.Error(codes.NotFound, "x"), want: Failed},
		{name: "out of range", err: status.Error(codes.OutOfRange, "x"), want: Failed},
		{name: "permission denied", err: status.Error(codes.PermissionDenied, "x"), want: Failed},
		{name: "unauthenticated", err: status.Error(codes.Unauthenticated, "x"), want: Failed},
		{name: "unimplemented", err: status.Error(codes.Unimplemented, "x"), want: Failed},
		{name: "internal", err: status.Error(codes.Internal, "x"), want: Failed},
		{name: "unknown", err: status.Error(codes.Unknown, "x"), want: Failed},
		{name: "data loss", err: status.Error(codes.DataLoss, "x"), want: Failed},
		{name: "deadline exceeded", err: status.Error(codes.DeadlineExceeded, "x"), want: InProgress},
		{name: "unavailable", err: status.Error(codes.Unavailable, "x"), want: InProgress},
		{name: "canceled", err: status.Error(codes.Canceled, "x"), want: InProgress},
		{name: "aborted", err: status.Error(codes.Aborted, "x"), want: Busy},
		{name: "resource exhausted", err: status.Error(codes.ResourceExhausted, "x"), want: InProgress},
		{name: "wrapped status", err: fmt.Errorf("create: %w", status.Error(codes.InvalidArgument, "x")), want: Failed},
		{name: "not a status", err: errors.New("connection reset"), want: InProgress},
		{name: "context deadline", err: context.DeadlineExceeded, want: InProgress},
		{name: "not supported", err: fmt.Errorf("list: %w", errNotSupported), want: Failed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
}
