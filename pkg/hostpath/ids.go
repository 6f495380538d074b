package hostpath

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxIDLength is the longest volume, snapshot, group snapshot or node ID the
// driver accepts; the CSI spec asks plugins to handle at least 128 bytes.
const maxIDLength = 128

// maxNameLength is the longest request name the driver accepts.
const maxNameLength = 128

// ID prefixes keep the kinds apart so that a snapshot ID never names a volume.
const (
	volumePrefix   = "vol-"
	snapshotPrefix = "snap-"
	groupPrefix    = "group-"
)

// deriveID returns the ID for an object of the given prefix and request name.
// It is a hash of the name, so a retry after a crash finds the object the
// first attempt created, and no name ever reaches a path.
func deriveID(prefix string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return prefix + hex.EncodeToString(h.Sum(nil)[:16])
}

// checkID rejects IDs that could escape the data directory or are otherwise
// malformed: empty, over maxIDLength, a leading dot, or any byte other than
// ASCII letters, digits, '.', '_' and '-'. The error is InvalidArgument.
func checkID(field, id string) error {
	if id == "" {
		return status.Errorf(codes.InvalidArgument, "%s is required", field)
	}
	if len(id) > maxIDLength {
		return status.Errorf(codes.InvalidArgument, "%s is longer than %d bytes", field, maxIDLength)
	}
	if id[0] == '.' {
		return status.Errorf(codes.InvalidArgument, "%s must not start with a dot", field)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return status.Errorf(codes.InvalidArgument, "%s contains the invalid byte %q", field, c)
		}
	}
	return nil
}

// checkName validates a request name: required, at most maxNameLength bytes
// of valid UTF-8 without the control characters the CSI spec bans.
func checkName(name string) error {
	if name == "" {
		return status.Error(codes.InvalidArgument, "name is required")
	}
	if len(name) > maxNameLength {
		return status.Errorf(codes.InvalidArgument, "name is longer than %d bytes", maxNameLength)
	}
	if !utf8.ValidString(name) {
		return status.Error(codes.InvalidArgument, "name is not valid UTF-8")
	}
	for _, r := range name {
		if r <= 0x08 || r == 0x0b || r == 0x0c || (r >= 0x0e && r <= 0x1f) || (r >= 0x7f && r <= 0x9f) {
			return status.Error(codes.InvalidArgument, "name contains a control character")
		}
	}
	return nil
}

// maxPathLength bounds a staging or target path (PATH_MAX).
const maxPathLength = 4096

// checkTargetPath validates a node path from a request: absolute, clean,
// without NUL and outside the driver's data directory.
func checkTargetPath(field, path, dataDir string) error {
	if path == "" {
		return status.Errorf(codes.InvalidArgument, "%s is required", field)
	}
	if len(path) > maxPathLength {
		return status.Errorf(codes.InvalidArgument, "%s is longer than %d bytes", field, maxPathLength)
	}
	if strings.IndexByte(path, 0) >= 0 {
		return status.Errorf(codes.InvalidArgument, "%s contains NUL", field)
	}
	if !filepath.IsAbs(path) {
		return status.Errorf(codes.InvalidArgument, "%s must be absolute", field)
	}
	clean := filepath.Clean(path)
	if clean == dataDir || strings.HasPrefix(clean, dataDir+"/") {
		return status.Errorf(codes.InvalidArgument, "%s must not be inside the driver's data directory", field)
	}
	return nil
}
