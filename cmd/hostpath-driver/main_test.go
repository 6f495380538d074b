package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shutter-csi/shutter/pkg/version"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "valid", args: []string{"--nodeid=n1", "--endpoint=unix:///tmp/x.sock", "--datadir=/tmp/d", "--enable-attach", "--max-volumes-per-node=3", "--v=4"}},
		{name: "missing node id", args: []string{"--endpoint=unix:///tmp/x.sock"}, wantErr: "--nodeid"},
		{name: "tcp endpoint", args: []string{"--nodeid=n1", "--endpoint=tcp://127.0.0.1:9000"}, wantErr: "only unix://"},
		{name: "relative datadir", args: []string{"--nodeid=n1", "--datadir=data"}, wantErr: "--datadir"},
		{name: "zero capacity", args: []string{"--nodeid=n1", "--capacity=0"}, wantErr: "--capacity"},
		{name: "unknown flag", args: []string{"--nodeid=n1", "--colour=red"}, wantErr: "flag provided but not defined"},
		{name: "bad number", args: []string{"--nodeid=n1", "--capacity=lots"}, wantErr: "invalid value"},
		{name: "stray argument", args: []string{"--nodeid=n1", "extra"}, wantErr: "unexpected arguments"},
		{name: "zero quiesce timeout", args: []string{"--nodeid=n1", "--group-snapshot-quiesce-timeout=0s"}, wantErr: "--group-snapshot-quiesce-timeout"},
		{name: "relative kubelet registration path", args: []string{"--nodeid=n1", "--kubelet-registration-path=csi.sock"}, wantErr: "--kubelet-registration-path"},
		{name: "relative registration socket", args: []string{"--nodeid=n1", "--kubelet-registration-path=/k/csi.sock", "--registration-socket=r.sock"}, wantErr: "--registration-socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, showVersion, err := parseFlags(tt.args)
			if tt.wantErr == "" {
				if err != nil || showVersion {
					t.Fatalf("err %v, showVersion %t", err, showVersion)
				}
				if opts.NodeID != "n1" || !opts.EnableAttach || opts.MaxVolumesPerNode != 3 || opts.DriverName != "hostpath.csi.shutter.dev" ||
					opts.GroupSnapshotQuiesce || opts.GroupSnapshotQuiesceTimeout != 5*time.Second || opts.SocketGroup != -1 {
					t.Fatalf("options = %+v", opts)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
			}
		})
	}
}

func TestVersionFlag(t *testing.T) {
	opts, showVersion, err := parseFlags([]string{"--version"})
	if err != nil || !showVersion {
		t.Fatalf("--version alone: showVersion %t, err %v", showVersion, err)
	}
	if opts.Version != version.Version {
		t.Fatalf("GetPluginInfo would report %q, want the build's version %q", opts.Version, version.Version)
	}
	if _, _, err := parseFlags([]string{"--nodeid=n1", "--version-string=x"}); err == nil {
		t.Fatal("the old --version-string flag is still accepted")
	}
}

// TestBinaryUsage runs the built command: --help documents every flag and
// exits 0; an invalid flag exits 2 with a clear message; --version prints the
// version and commit stamped at link time.
func TestBinaryUsage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := t.TempDir() + "/hostpath-driver"
	const stamp = "-X github.com/shutter-csi/shutter/pkg/version.Version=v9.8.7-test -X github.com/shutter-csi/shutter/pkg/version.Commit=0123abcd"
	if out, err := exec.Command("go", "build", "-ldflags", stamp, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "--help")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("--help: %v\n%s", err, out.String())
	}
	for _, f := range []string{"-endpoint", "-nodeid", "-drivername", "-datadir", "-capacity", "-max-volume-size",
		"-enable-topology", "-enable-attach", "-max-volumes-per-node", "-enable-snapshot-metadata", "-mutable-parameters", "-fsync",
		"-group-snapshot-quiesce\n", "-group-snapshot-quiesce-timeout", "-version", "-v "} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not document %s", f)
		}
	}
	out.Reset()
	cmd = exec.Command(bin, "--nodeid=n1", "--endpoint=tcp://x")
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(out.String(), "only unix://") {
		t.Fatalf("invalid flag: err=%v output=%s", err, out.String())
	}
	got, err := exec.Command(bin, "--version").Output()
	if err != nil || string(got) != "hostpath-driver v9.8.7-test (commit 0123abcd)\n" {
		t.Fatalf("--version: err=%v output=%q", err, got)
	}
}
