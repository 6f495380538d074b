// Package version is the build's version, set at link time with
// -ldflags "-X github.com/shutter-csi/shutter/pkg/version.Version=v1.2.3".
package version

// Version of this build.
var Version = "devel"
