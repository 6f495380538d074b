package schedule

import (
	"testing"

	"github.com/shutter-csi/shutter/pkg/kube/kubetest"
)

// TestNoDirectWrites: every create, status write and delete of the schedule reconciler goes
// through its write layer (writes.go), a kube.Writer per kind, which counts it in
// shutter_controller_api_writes_total and records it in the own-write cache; no other file of the
// package calls, or takes, a client's write method.
func TestNoDirectWrites(t *testing.T) { kubetest.NoDirectWrites(t, ".", "writes.go") }
