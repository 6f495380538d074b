//go:build tools

// Package tools records the mains of the CNI loopback plugin of the local node built by hack/build-tools.sh.
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
)
