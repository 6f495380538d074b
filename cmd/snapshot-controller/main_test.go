package main

import (
	"slices"
	"testing"
	"time"

	"github.com/shutter-csi/shutter/pkg/command/commandtest"
	"github.com/shutter-csi/shutter/pkg/snapshot"
)

func TestParseFlags(t *testing.T) {
	commandtest.Run(t, parseFlags, []commandtest.Case[snapshot.RunOptions]{
		{Name: "defaults", Check: func(t *testing.T, o snapshot.RunOptions) {
			if c := o.Controller; c.Workers != 10 || c.ResyncPeriod != 15*time.Minute || !c.Groups {
				t.Errorf("workers %d, resync %s, groups %t", c.Workers, c.ResyncPeriod, c.Groups)
			}
		}},
		{Name: "groups off", Args: []string{"--feature-gates=CSIVolumeGroupSnapshot=false", "--worker-threads=3"},
			Check: func(t *testing.T, o snapshot.RunOptions) {
				if c := o.Controller; c.Workers != 3 || c.Groups {
					t.Errorf("workers %d, groups %t", c.Workers, c.Groups)
				}
			}},
		{Name: "sidecar lease namespaces", Args: []string{"--sidecar-lease-namespaces=shutter, vendor-csi,"},
			Check: func(t *testing.T, o snapshot.RunOptions) {
				if got := o.Controller.SidecarLeaseNamespaces; !slices.Equal(got, []string{"shutter", "vendor-csi"}) {
					t.Errorf("sidecar lease namespaces %q", got)
				}
			}},
		{Name: "version", Args: []string{"--version", "extra"}, WantVersion: true},
		{Name: "unknown gate", Args: []string{"--feature-gates=Other=true"}, WantErr: "unknown feature gate"},
		{Name: "stray argument", Args: []string{"extra"}, WantErr: "unexpected arguments"},
		{Name: "unknown flag", Args: []string{"--no-such-flag"}, WantErr: "not defined"},
	})
}
