package main

import (
	"testing"
	"time"

	"github.com/shutter-csi/shutter/pkg/command/commandtest"
	"github.com/shutter-csi/shutter/pkg/sidecar"
)

func TestParseFlags(t *testing.T) {
	noNode := map[string]string{"NODE_NAME": ""}
	commandtest.Run(t, parseFlags, []commandtest.Case[sidecar.Options]{
		{Name: "defaults", Env: noNode, Check: func(t *testing.T, o sidecar.Options) {
			if o.CSIAddress != "/run/csi/socket" || o.Timeout != time.Minute || o.SnapshotNamePrefix != "snapshot" ||
				o.GroupSnapshotNamePrefix != "groupsnapshot" || o.SnapshotNameUUIDLength != -1 || o.NodeName != "" ||
				o.SyncTimeout != 10*time.Minute {
				t.Errorf("defaults %+v", o)
			}
		}},
		{Name: "names and metadata", Args: []string{"--snapshot-name-prefix=snap", "--snapshot-name-uuid-length=8", "--extra-create-metadata"},
			Check: func(t *testing.T, o sidecar.Options) {
				if o.SnapshotNamePrefix != "snap" || o.SnapshotNameUUIDLength != 8 || !o.ExtraCreateMetadata {
					t.Errorf("got %+v", o)
				}
			}},
		{Name: "node deployment reads NODE_NAME", Args: []string{"--node-deployment"}, Env: map[string]string{"NODE_NAME": "node-1"},
			Check: func(t *testing.T, o sidecar.Options) {
				if o.NodeName != "node-1" {
					t.Errorf("node %q", o.NodeName)
				}
			}},
		{Name: "node deployment without NODE_NAME", Args: []string{"--node-deployment"}, Env: noNode, WantErr: "NODE_NAME"},
		{Name: "node deployment with leader election", Args: []string{"--node-deployment", "--leader-election"},
			Env: map[string]string{"NODE_NAME": "n"}, WantErr: "exclude each other"},
		{Name: "sync timeout", Args: []string{"--sync-timeout=3m"}, Env: noNode, Check: func(t *testing.T, o sidecar.Options) {
			if o.SyncTimeout != 3*time.Minute {
				t.Errorf("sync timeout %s", o.SyncTimeout)
			}
		}},
		{Name: "negative sync timeout", Args: []string{"--sync-timeout=-1s"}, Env: noNode, WantErr: "cannot be negative"},
		{Name: "zero workers", Args: []string{"--worker-threads=0"}, WantErr: "must be positive"},
		{Name: "retry max below start", Args: []string{"--retry-interval-start=10s", "--retry-interval-max=1s"}, WantErr: "at least"},
		{Name: "stray argument", Args: []string{"extra"}, WantErr: "unexpected arguments"},
		{Name: "unknown flag", Args: []string{"--no-such-flag"}, WantErr: "not defined"},
		{Name: "groups off by gate", Args: []string{"--feature-gates=CSIVolumeGroupSnapshot=false"}, Env: noNode,
			Check: func(t *testing.T, o sidecar.Options) {
				if o.Groups {
					t.Error("groups on")
				}
			}},
		{Name: "groups on by default", Env: noNode, Check: func(t *testing.T, o sidecar.Options) {
			if !o.Groups {
				t.Error("groups off")
			}
		}},
		{Name: "unknown gate", Args: []string{"--feature-gates=NoSuchGate=true"}, WantErr: "unrecognized feature gate: NoSuchGate"},
		{Name: "empty prefix", Args: []string{"--snapshot-name-prefix="}, WantErr: "cannot be empty"},
		// --version is answered before any other check (here the missing NODE_NAME).
		{Name: "version", Args: []string{"--version", "--node-deployment"}, Env: noNode, WantVersion: true},
	})
}

// TestUpstreamFlags: every flag of the upstream csi-snapshotter, and the removed ones that
// deployments still pass, is accepted.
func TestUpstreamFlags(t *testing.T) {
	commandtest.AcceptsAll(t, parseFlags, map[string]string{"NODE_NAME": ""},
		commandtest.LoggingFlags, commandtest.SnapshotterFlags, commandtest.RemovedFlags)
}
