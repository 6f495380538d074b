package sidecar

import (
	"testing"
	"time"
)

// TestSyncTimeoutFitsCSICall: a sync's deadline is never shorter than twice the CSI timeout, so
// it cannot cut a CSI call short; 0 (no deadline) stays 0.
func TestSyncTimeoutFitsCSICall(t *testing.T) {
	for _, tc := range []struct {
		sync, csi, want time.Duration
		raised          bool
	}{
		{sync: 10 * time.Minute, csi: time.Minute, want: 10 * time.Minute},
		{sync: 2 * time.Minute, csi: time.Minute, want: 2 * time.Minute},
		{sync: time.Minute, csi: time.Minute, want: 2 * time.Minute, raised: true},
		{sync: 10 * time.Minute, csi: 15 * time.Minute, want: 30 * time.Minute, raised: true},
		{sync: 0, csi: time.Minute, want: 0},
	} {
		got, raised := Options{SyncTimeout: tc.sync, Timeout: tc.csi}.syncTimeout()
		if got != tc.want || raised != tc.raised {
			t.Errorf("--sync-timeout %s, --timeout %s: %s (raised %v), want %s (%v)", tc.sync, tc.csi, got, raised, tc.want, tc.raised)
		}
	}
}
