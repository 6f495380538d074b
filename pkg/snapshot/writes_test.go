package snapshot

import (
	"testing"

	"github.com/shutter-csi/shutter/pkg/kube/kubetest"
)

// TestNoDirectWrites: every create, patch, status write and delete of the controller goes through
// the write layer (writes.go), which counts it and records it in the own-write cache; no other
// file of the package calls, or takes, a client's write method.
func TestNoDirectWrites(t *testing.T) { kubetest.NoDirectWrites(t, ".", "writes.go") }
