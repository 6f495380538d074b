package main

import (
	"strings"
	"testing"
	"time"
)

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
