package csi

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Outcome is what a CSI call's error means for the object that caused it.
type Outcome int

const (
	// Succeeded: the call returned no error.
	Succeeded Outcome = iota
	// Failed: the driver has finished with the request and refused it; retrying the same
	// request gives the same answer. The backend holds nothing for it.
	Failed
	// InProgress: the call did not finish, or the driver asked to be called again; the backend
	// may still be working on it, so whatever it might have made must be tracked.
	InProgress
	// Busy: the driver refused the call for now because an operation on the same volume or
	// snapshot is in flight (codes.Aborted). Like InProgress the backend may be working on it (a
	// create from an earlier try), but the answer is "try again soon", not a failure: callers
	// retry after a short delay instead of backing off.
	Busy
)

func (o Outcome) String() string {
	switch o {
	case Succeeded:
		return "Succeeded"
	case Failed:
		return "Failed"
	case Busy:
		return "Busy"
	default:
		return "InProgress"
	}
}

// Classify is the one decision whether a CSI call's error is final. Errors that are not gRPC
// statuses (the call may or may not have reached the driver) count as InProgress.
func Classify(err error) Outcome {
	if err == nil {
		return Succeeded
	}
	if errors.Is(err, errNotSupported) {
		return Failed
	}
	st, ok := status.FromError(err)
	if !ok {
		return InProgress
	}
	switch st.Code() {
	case codes.OK:
		return Succeeded
	case codes.Aborted:
		return Busy
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled, codes.ResourceExhausted:
		return InProgress
	default:
		// InvalidArgument, AlreadyExists, FailedPrecondition, NotFound, OutOfRange,
		// PermissionDenied, Unauthenticated, Unimplemented, Internal, Unknown, DataLoss.
		return Failed
	}
}

// errNotSupported marks calls the driver's capabilities rule out; such calls are final.
var errNotSupported = errors.New("not supported by the driver")
