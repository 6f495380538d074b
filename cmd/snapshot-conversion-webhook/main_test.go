package main

import (
	"testing"
	"time"

	"github.com/shutter-csi/shutter/pkg/command/commandtest"
	"github.com/shutter-csi/shutter/pkg/conversion"
)

func TestParseFlags(t *testing.T) {
	certs := []string{"--tls-cert-file=c", "--tls-private-key-file=k"}
	with := func(args ...string) []string { return append(append([]string(nil), certs...), args...) }
	commandtest.Run(t, parseFlags, []commandtest.Case[conversion.Options]{
		{Name: "serving only", Args: certs, Check: func(t *testing.T, o conversion.Options) {
			if o.MaxRequestBytes != 64<<20 || o.Timeouts.Read != 30*time.Second || o.Timeouts.Idle != 90*time.Second ||
				o.MaxRequestsInFlight != 8 || o.MaxBytesInFlight != 64<<20 {
				t.Errorf("defaults = %+v", o)
			}
		}},
		{Name: "limits", Args: with("--max-request-bytes=1024", "--read-timeout=5s"), Check: func(t *testing.T, o conversion.Options) {
			if o.MaxRequestBytes != 1024 || o.Timeouts.Read != 5*time.Second {
				t.Errorf("parsed %+v", o)
			}
		}},
		{Name: "in flight", Args: with("--max-requests-inflight=2", "--max-bytes-inflight=1000"), Check: func(t *testing.T, o conversion.Options) {
			if o.MaxRequestsInFlight != 2 || o.MaxBytesInFlight != 1000 {
				t.Errorf("parsed %+v", o)
			}
		}},
		{Name: "zero in flight", Args: with("--max-requests-inflight=0"), WantErr: "positive"},
		{Name: "version without certificates", Args: []string{"--version"}, WantVersion: true},
		{Name: "no certificate", Args: []string{}, WantErr: "--tls-cert-file"},
		{Name: "patch without CA", Args: with("--patch-crds=a"), WantErr: "--ca-bundle-file"},
		{Name: "stray argument", Args: with("extra"), WantErr: "unexpected arguments"},
		{Name: "zero request size", Args: with("--max-request-bytes=0"), WantErr: "positive"},
		{Name: "zero write timeout", Args: with("--write-timeout=0s"), WantErr: "positive"},
	})
}
