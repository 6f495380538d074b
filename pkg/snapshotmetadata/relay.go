package snapshotmetadata

import (
	"context"
	"errors"
	"io"
	"sync/atomic"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errMaxDuration is the cause of a call's context that lasted the maximum stream duration.
var errMaxDuration = errors.New("the stream lasted the maximum streaming duration (--max-streaming-duration-min)")

// relayed counts what a call passed on to its client. The relay goroutine writes it while the
// handler may already read it, hence the atomics.
type relayed struct {
	messages, ranges, covered atomic.Int64
}

// blockResponse is what both CSI responses have in common.
type blockResponse interface {
	GetBlockMetadata() []*csi.BlockMetadata
}

// relay passes the driver's messages to the client, one at a time, until the driver's stream
// ends or ctx does. It returns when ctx ends even while a send is blocked on a client that
// stopped reading: the handler's return closes the client's stream, which ends that send, and
// the caller's cancel of ctx ends the driver's stream; the goroutine then exits.
func relay[R blockResponse](ctx context.Context, sent *relayed, recv func() (R, error), send func(R) error) error {
	done := make(chan error, 1)
	go func() { done <- pump(ctx, sent, recv, send) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ended(ctx)
	}
}

func pump[R blockResponse](ctx context.Context, sent *relayed, recv func() (R, error), send func(R) error) error {
	for {
		r, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if ctx.Err() != nil {
			return ended(ctx)
		}
		if err != nil {
			return driverError(err)
		}
		if err := send(r); err != nil {
			if ctx.Err() != nil {
				return ended(ctx)
			}
			return err
		}
		sent.messages.Add(1)
		for _, b := range r.GetBlockMetadata() {
			sent.ranges.Add(1)
			sent.covered.Add(b.GetSizeBytes())
		}
	}
}

// ended is the status of a call whose context ended: the maximum duration, the client's
// deadline, or the client's cancel.
func ended(ctx context.Context) error {
	switch {
	case errors.Is(context.Cause(ctx), errMaxDuration):
		return status.Error(codes.DeadlineExceeded, errMaxDuration.Error())
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "the client's deadline passed")
	default:
		return status.Error(codes.Canceled, "the client cancelled the call")
	}
}
