package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shutter-csi/shutter/pkg/command/commandtest"
	"github.com/shutter-csi/shutter/pkg/hostpath"
	"github.com/shutter-csi/shutter/pkg/version"
)

func TestParseFlags(t *testing.T) {
	valid := func(t *testing.T, o hostpath.Options) {
		if o.NodeID != "n1" || !o.EnableAttach || o.MaxVolumesPerNode != 3 || o.DriverName != "hostpath.csi.shutter.dev" ||
			o.GroupSnapshotQuiesce || o.GroupSnapshotQuiesceTimeout != 5*time.Second || o.SocketGroup != -1 {
			t.Errorf("options = %+v", o)
		}
	}
	commandtest.Run(t, parseFlags, []commandtest.Case[hostpath.Options]{
		{Name: "valid", Args: []string{"--nodeid=n1", "--endpoint=unix:///tmp/x.sock", "--datadir=/tmp/d", "--enable-attach", "--max-volumes-per-node=3", "--v=4"}, Check: valid},
		{Name: "missing node id", Args: []string{"--endpoint=unix:///tmp/x.sock"}, WantErr: "--nodeid"},
		{Name: "tcp endpoint", Args: []string{"--nodeid=n1", "--endpoint=tcp://127.0.0.1:9000"}, WantErr: "only unix://"},
		{Name: "relative datadir", Args: []string{"--nodeid=n1", "--datadir=data"}, WantErr: "--datadir"},
		{Name: "zero capacity", Args: []string{"--nodeid=n1", "--capacity=0"}, WantErr: "--capacity"},
		{Name: "unknown flag", Args: []string{"--nodeid=n1", "--colour=red"}, WantErr: "flag provided but not defined"},
		{Name: "bad number", Args: []string{"--nodeid=n1", "--capacity=lots"}, WantErr: "invalid value"},
		{Name: "stray argument", Args: []string{"--nodeid=n1", "extra"}, WantErr: "unexpected arguments"},
		{Name: "quarantine age limit", Args: []string{"--nodeid=n1", "--quarantine-max-age=720h"}, Check: func(t *testing.T, o hostpath.Options) {
			if o.QuarantineMaxAge != 720*time.Hour {
				t.Errorf("QuarantineMaxAge = %s, want 720h", o.QuarantineMaxAge)
			}
		}},
		{Name: "negative quarantine age", Args: []string{"--nodeid=n1", "--quarantine-max-age=-1h"}, WantErr: "--quarantine-max-age"},
		{Name: "zero quiesce timeout", Args: []string{"--nodeid=n1", "--group-snapshot-quiesce-timeout=0s"}, WantErr: "--group-snapshot-quiesce-timeout"},
		{Name: "relative kubelet registration path", Args: []string{"--nodeid=n1", "--kubelet-registration-path=csi.sock"}, WantErr: "--kubelet-registration-path"},
		{Name: "relative registration socket", Args: []string{"--nodeid=n1", "--kubelet-registration-path=/k/csi.sock", "--registration-socket=r.sock"}, WantErr: "--registration-socket"},
		{Name: "the old --version-string", Args: []string{"--nodeid=n1", "--version-string=x"}, WantErr: "not defined"},
		// GetPluginInfo reports the build's version.
		{Name: "version", Args: []string{"--version"}, WantVersion: true, Check: func(t *testing.T, o hostpath.Options) {
			if o.Version != version.Version {
				t.Errorf("GetPluginInfo would report %q, want the build's version %q", o.Version, version.Version)
			}
		}},
	})
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
		"-group-snapshot-quiesce\n", "-group-snapshot-quiesce-timeout", "-quarantine-max-age", "-version", "-v "} {
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
