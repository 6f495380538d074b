//go:build tools

// Package tools records the mains of the OCI runtime the local node's containerd shim runs built by hack/build-tools.sh.
package tools

import (
	_ "github.com/opencontainers/runc"
)
