package app

import (
	"testing"

	"github.com/shutter-csi/shutter/test/testenv"
)

// TestMain stops the control plane that the Lease tests start when SHUTTER_KUBECONFIG is not set,
// and removes its state folder.
func TestMain(m *testing.M) { testenv.Main(m) }
