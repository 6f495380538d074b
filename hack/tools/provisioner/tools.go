//go:build tools

// Package tools records the mains of the external-provisioner image of the local node built by hack/build-tools.sh.
package tools

import (
	_ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
)
