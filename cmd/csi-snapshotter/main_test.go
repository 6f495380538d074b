package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     string // NODE_NAME
		wantErr string
		check   func(t *testing.T, got optsView)
	}{
		{name: "defaults", check: func(t *testing.T, o optsView) {
			if o.address != "/run/csi/socket" || o.timeout != time.Minute || o.prefix != "snapshot" || o.groupPrefix != "groupsnapshot" || o.uuidLength != -1 {
				t.Errorf("defaults %+v", o)
			}
		}},
		{name: "names and metadata", args: []string{"--snapshot-name-prefix=snap", "--snapshot-name-uuid-length=8", "--extra-create-metadata"},
			check: func(t *testing.T, o optsView) {
				if o.prefix != "snap" || o.uuidLength != 8 || !o.extra {
					t.Errorf("got %+v", o)
				}
			}},
		{name: "node deployment reads NODE_NAME", args: []string{"--node-deployment"}, env: "node-1",
			check: func(t *testing.T, o optsView) {
				if o.node != "node-1" {
					t.Errorf("node %q", o.node)
				}
			}},
		{name: "node deployment without NODE_NAME", args: []string{"--node-deployment"}, wantErr: "NODE_NAME"},
		{name: "node deployment with leader election", args: []string{"--node-deployment", "--leader-election"}, env: "n", wantErr: "exclude each other"},
		{name: "zero workers", args: []string{"--worker-threads=0"}, wantErr: "must be positive"},
		{name: "retry max below start", args: []string{"--retry-interval-start=10s", "--retry-interval-max=1s"}, wantErr: "at least"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "unknown flag", args: []string{"--no-such-flag"}, wantErr: "not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NODE_NAME", tc.env)
			opts, _, err := parseFlags(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, optsView{address: opts.CSIAddress, timeout: opts.Timeout, prefix: opts.SnapshotNamePrefix,
				groupPrefix: opts.GroupSnapshotNamePrefix, uuidLength: opts.SnapshotNameUUIDLength,
				extra: opts.ExtraCreateMetadata, node: opts.NodeName})
		})
	}
}

type optsView struct {
	address, prefix, groupPrefix, node string
	timeout                            time.Duration
	uuidLength                         int
	extra                              bool
}

// TestVersionFlag: --version is answered before any other check (here the missing NODE_NAME).
func TestVersionFlag(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	_, showVersion, err := parseFlags([]string{"--version", "--node-deployment"})
	if err != nil || !showVersion {
		t.Fatalf("showVersion %t, err %v", showVersion, err)
	}
	if _, showVersion, _ := parseFlags(nil); showVersion {
		t.Fatal("showVersion without --version")
	}
}
