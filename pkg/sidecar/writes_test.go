package sidecar

import (
	"testing"

	"github.com/shutter-csi/shutter/pkg/kube/kubetest"
)

// TestNoDirectWrites: every change the sidecar makes goes through the reconciler's kube.Writer,
// which counts it and records it in the own-write cache; no file calls, or takes, a client's
// write method.
func TestNoDirectWrites(t *testing.T) { kubetest.NoDirectWrites(t, ".") }
