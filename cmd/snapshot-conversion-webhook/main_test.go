package main

import (
	"strings"
	"testing"
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
