//go:build tools

// Package tools records the mains of the upstream external-snapshotter that `make bench-scale`
// measures beside Shutter's (hack/build-tools.sh builds them as upstream-snapshot-controller and
// upstream-csi-snapshotter).
package tools

import (
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller"
)
