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
		check       func(t *testing.T, workers int, resync time.Duration, groups bool)
	}{
		{name: "defaults", check: func(t *testing.T, workers int, resync time.Duration, groups bool) {
			if workers != 10 || resync != 15*time.Minute || !groups {
				t.Errorf("workers %d, resync %s, groups %t", workers, resync, groups)
			}
		}},
		{name: "groups off", args: []string{"--feature-gates=CSIVolumeGroupSnapshot=false", "--worker-threads=3"},
			check: func(t *testing.T, workers int, _ time.Duration, groups bool) {
				if workers != 3 || groups {
					t.Errorf("workers %d, groups %t", workers, groups)
				}
			}},
		{name: "version", args: []string{"--version", "extra"}, wantVersion: true},
		{name: "unknown gate", args: []string{"--feature-gates=Other=true"}, wantErr: "unknown feature gate"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "unknown flag", args: []string{"--no-such-flag"}, wantErr: "not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts, showVersion, err := parseFlags(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || showVersion != tc.wantVersion {
				t.Fatalf("err %v, showVersion %t", err, showVersion)
			}
			if tc.check != nil {
				tc.check(t, opts.Controller.Workers, opts.Controller.ResyncPeriod, opts.Controller.Groups)
			}
		})
	}
}
