package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		wantVersion bool
		wantErr     string
	}{
		{name: "serving only", args: []string{"--tls-cert-file=c", "--tls-private-key-file=k"}},
		{name: "version without certificates", args: []string{"--version"}, wantVersion: true},
		{name: "no certificate", args: []string{}, wantErr: "--tls-cert-file"},
		{name: "patch without CA", args: []string{"--tls-cert-file=c", "--tls-private-key-file=k", "--patch-crds=a"}, wantErr: "--ca-bundle-file"},
		{name: "stray argument", args: []string{"--tls-cert-file=c", "--tls-private-key-file=k", "extra"}, wantErr: "unexpected arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, showVersion, err := parseFlags(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || showVersion != tc.wantVersion {
				t.Fatalf("err %v, showVersion %t", err, showVersion)
			}
		})
	}
}

func TestParseFlagsLimits(t *testing.T) {
	base := []string{"--tls-cert-file=c", "--tls-private-key-file=k"}
	opts, _, err := parseFlags(base)
	if err != nil {
		t.Fatal(err)
	}
	if opts.MaxRequestBytes != 64<<20 || opts.Timeouts.Read != 30*time.Second || opts.Timeouts.Idle != 90*time.Second {
		t.Fatalf("defaults = %+v", opts)
	}
	opts, _, err = parseFlags(append(base, "--max-request-bytes=1024", "--read-timeout=5s"))
	if err != nil || opts.MaxRequestBytes != 1024 || opts.Timeouts.Read != 5*time.Second {
		t.Fatalf("parsed %+v, %v", opts, err)
	}
	for _, bad := range []string{"--max-request-bytes=0", "--write-timeout=0s"} {
		if _, _, err := parseFlags(append(base, bad)); err == nil || !strings.Contains(err.Error(), "positive") {
			t.Errorf("%s: err = %v, want a refusal", bad, err)
		}
	}
}
