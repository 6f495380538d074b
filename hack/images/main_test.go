package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoCABundleByDefault: `make images` puts no CA bundle into the images unless one is named,
// so their digests do not depend on the build machine's /etc/ssl/certs; a named bundle that does
// not exist is an error, not an image quietly built without it.
func TestNoCABundleByDefault(t *testing.T) {
	opts, _, _, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if opts.CACertificates != "" {
		t.Errorf("by default the images get the CA bundle %s", opts.CACertificates)
	}
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if opts, _, _, err = parseFlags([]string{"-ca-certificates=" + ca}); err != nil || opts.CACertificates != ca {
		t.Errorf("named bundle: %q, %v", opts.CACertificates, err)
	}
	missing := filepath.Join(t.TempDir(), "none.crt")
	if _, _, _, err = parseFlags([]string{"-ca-certificates=" + missing}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing bundle: %v, want an error naming it", err)
	}
}
