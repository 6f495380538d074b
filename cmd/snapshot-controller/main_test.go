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
			if c := o.Controller; c.Workers != 10 || c.ResyncPeriod != 15*time.Minute || !c.Groups || c.Retry.SyncTimeout != 10*time.Minute {
				t.Errorf("workers %d, resync %s, groups %t, sync timeout %s", c.Workers, c.ResyncPeriod, c.Groups, c.Retry.SyncTimeout)
			}
		}},
		{Name: "sync timeout", Args: []string{"--sync-timeout=0"}, Check: func(t *testing.T, o snapshot.RunOptions) {
			if o.Controller.Retry.SyncTimeout != 0 {
				t.Errorf("sync timeout %s", o.Controller.Retry.SyncTimeout)
			}
		}},
		{Name: "negative sync timeout", Args: []string{"--sync-timeout=-1s"}, WantErr: "cannot be negative"},
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
		{Name: "unknown gate", Args: []string{"--feature-gates=Other=true"}, WantErr: "unrecognized feature gate: Other"},
		{Name: "removed group flag maps to the gate", Args: []string{"--enable-volume-group-snapshots=false"},
			Check: func(t *testing.T, o snapshot.RunOptions) {
				if o.Controller.Groups {
					t.Error("groups on")
				}
			}},
		{Name: "metrics address is the endpoint", Args: []string{"--metrics-address=:22014", "--metrics-path=/m"},
			Check: func(t *testing.T, o snapshot.RunOptions) {
				if o.HTTP.Endpoint != ":22014" || o.HTTP.MetricsPath != "/m" {
					t.Errorf("http %+v", o.HTTP)
				}
			}},
		{Name: "metrics address and endpoint", Args: []string{"--metrics-address=:1", "--http-endpoint=:2"}, WantErr: "only one of"},
		{Name: "lease labels", Args: []string{"--leader-election-labels=a:b,c:d"}, Check: func(t *testing.T, o snapshot.RunOptions) {
			if l := o.LeaderElection.Labels; len(l) != 2 || l["a"] != "b" || l["c"] != "d" {
				t.Errorf("labels %v", l)
			}
		}},
		{Name: "malformed lease labels", Args: []string{"--leader-election-labels=a=b"}, WantErr: "malformed item"},
		{Name: "unknown log format", Args: []string{"--logging-format=xml"}, WantErr: "Unsupported log format"},
		{Name: "stray argument", Args: []string{"extra"}, WantErr: "unexpected arguments"},
		{Name: "unknown flag", Args: []string{"--no-such-flag"}, WantErr: "not defined"},
	})
}

// TestUpstreamFlags: every flag of the upstream snapshot-controller, and the removed ones that
// deployments still pass, is accepted.
func TestUpstreamFlags(t *testing.T) {
	commandtest.AcceptsAll(t, parseFlags, nil, commandtest.LoggingFlags, commandtest.ControllerFlags, commandtest.RemovedFlags)
}
