//go:build linux

package hostpath

import (
	"encoding/json"
	"errors"
	"math"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shutter-csi/shutter/pkg/hostpath/state"
)

// Bounds on what a request may have the driver store. Every input that ends
// up in a record is bounded when it arrives, with InvalidArgument, so that
// no record comes near the record log's frame limit (state.MaxValueBytes):
// the log refuses a larger record, and a record it took would make the next
// start drop every record written after it. Secrets are never stored.
const (
	// maxParameters and maxParametersBytes bound a volume's parameters and,
	// apart, its mutable parameters, as Kubernetes bounds a StorageClass's:
	// 512 entries of 256 KiB together. Size counts as stored (JSON), where
	// escaping may make one byte six.
	maxParameters      = 512
	maxParametersBytes = 256 << 10
	// maxGroupMembers bounds the volumes of one group snapshot.
	maxGroupMembers = 256
	// maxVolumeRecordBytes bounds a volume record as stored: both kinds of
	// parameters at their limits leave room for many publications.
	maxVolumeRecordBytes = 768 << 10
)

// checkParameters bounds a parameter map by entries and stored size.
func checkParameters(field string, params map[string]string) error {
	if len(params) > maxParameters {
		return status.Errorf(codes.InvalidArgument, "%s has %d entries, at most %d are accepted", field, len(params), maxParameters)
	}
	if n := storedSize(params); n > maxParametersBytes {
		return status.Errorf(codes.InvalidArgument, "%s take %d bytes as stored, at most %d are accepted", field, n, maxParametersBytes)
	}
	return nil
}

// checkVolumeRecord refuses a change that would make a volume's record
// larger than maxVolumeRecordBytes as stored.
func checkVolumeRecord(v state.Volume) error {
	if n := storedSize(v); n > maxVolumeRecordBytes {
		return status.Errorf(codes.InvalidArgument, "volume %s would take %d bytes as stored, at most %d are accepted (too many publications?)", v.ID, n, maxVolumeRecordBytes)
	}
	return nil
}

// storedSize is the size of v encoded as the record log stores it.
func storedSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return math.MaxInt
	}
	return len(b)
}

// storeErr turns an error from writing a record or data into a gRPC
// status: ResourceExhausted for a full disk (the request succeeds once
// space is free; the record log is usable again then), InvalidArgument
// for a record over the log's limit (inputs are bounded before that),
// Internal otherwise.
func storeErr(what string, err error) error {
	switch {
	case errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT):
		return status.Errorf(codes.ResourceExhausted, "%s: no space left on the driver's disk: %v", what, err)
	case errors.Is(err, state.ErrRecordTooLarge):
		return status.Errorf(codes.InvalidArgument, "%s: %v", what, err)
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}
