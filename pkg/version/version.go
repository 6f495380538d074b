// Package version is the build's version, the one version source of every Shutter binary and
// image. The Makefile stamps it at link time (its LDFLAGS, used by `make build` and `make images`):
//
//	-X github.com/shutter-csi/shutter/pkg/version.Version=$(git describe --tags --always --dirty)
//	-X github.com/shutter-csi/shutter/pkg/version.Commit=$(git rev-parse HEAD)
package version

// Version of this build: `git describe` of the commit it was built from; "devel" when not stamped.
var Version = "devel"

// Commit is the full hash of the commit this build was made from; "unknown" when not stamped.
var Commit = "unknown"

// String is the version and commit as every binary's --version prints them after its name.
func String() string {
	return Version + " (commit " + Commit + ")"
}
