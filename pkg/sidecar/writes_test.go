package sidecar

import (
	"testing"

	"github.com/shutter-csi/shutter/pkg/kube/kubetest"
)

// TestNoDirectWrites: every change the sidecar makes goes through the reconciler's kube.Writer,
// which counts it and records it in the own-write cache; no file calls, or takes, a client's
// write method.
func TestNoDirectWrites(t *testing.T) {
	found, err := kubetest.DirectWrites(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("a write around kube.Writer: %s", f)
	}
}
