package main

import (
	"testing"
	"time"

	"github.com/shutter-csi/shutter/pkg/command/commandtest"
	"github.com/shutter-csi/shutter/pkg/snapshotmetadata"
	"github.com/shutter-csi/shutter/pkg/snapshotmetadata/smtest"
)

func TestParseFlags(t *testing.T) {
	certs := smtest.NewCerts(t)
	tlsFlags := []string{"--tls-cert=" + certs.CertFile, "--tls-key=" + certs.KeyFile}
	noEnv := map[string]string{snapshotmetadata.EnvTLSCert: "", snapshotmetadata.EnvTLSKey: ""}
	with := func(args ...string) []string { return append(append([]string{}, tlsFlags...), args...) }
	commandtest.Run(t, parseFlags, []commandtest.Case[snapshotmetadata.Options]{
		{Name: "upstream's defaults", Args: tlsFlags, Env: noEnv, Check: func(t *testing.T, o snapshotmetadata.Options) {
			if o.CSIAddress != "/run/csi/socket" || o.Port != 50051 || o.Timeout != time.Minute || o.MaxStreamDuration != 10*time.Minute ||
				o.Client.QPS != 5 || o.Client.Burst != 10 || o.MetricsPath != "/metrics" || o.HTTP.Endpoint != "" || o.Audience != "" {
				t.Errorf("defaults %+v", o)
			}
		}},
		{Name: "upstream's flags", Args: with("--csi-address=/csi/csi.sock", "--port=6000", "--audience=backup", "--max-streaming-duration-min=3",
			"--timeout=30s", "--http-endpoint=:8080", "--metrics-path=/m", "--kube-api-qps=20", "--kube-api-burst=40", "--kubeconfig=/k",
			"--tls-min-version=VersionTLS13", "--tls-curve-preferences=X25519,CurveP256", "-v=5"),
			Check: func(t *testing.T, o snapshotmetadata.Options) {
				if o.CSIAddress != "/csi/csi.sock" || o.Port != 6000 || o.Audience != "backup" || o.MaxStreamDuration != 3*time.Minute ||
					o.Timeout != 30*time.Second || o.HTTP.Endpoint != ":8080" || o.MetricsPath != "/m" || o.Client.QPS != 20 ||
					o.Client.Burst != 40 || o.Client.Kubeconfig != "/k" || o.TLSMinVersion != "VersionTLS13" {
					t.Errorf("got %+v", o)
				}
			}},
		{Name: "certificate from the environment", Env: map[string]string{snapshotmetadata.EnvTLSCert: certs.CertFile, snapshotmetadata.EnvTLSKey: certs.KeyFile},
			Check: func(t *testing.T, o snapshotmetadata.Options) {
				if o.TLSCert != certs.CertFile || o.TLSKey != certs.KeyFile {
					t.Errorf("tls %q %q", o.TLSCert, o.TLSKey)
				}
			}},
		{Name: "no certificate", Env: noEnv, WantErr: "--tls-cert and --tls-key"},
		{Name: "unreadable certificate", Args: []string{"--tls-cert=/nope", "--tls-key=/nope"}, Env: noEnv, WantErr: "load the TLS certificate"},
		{Name: "bad TLS version", Args: with("--tls-min-version=VersionTLS10"), WantErr: "VersionTLS12 or VersionTLS13"},
		{Name: "bad cipher suite", Args: with("--tls-cipher-suites=TLS_RSA_WITH_RC4_128_SHA"), WantErr: "not a secure cipher suite"},
		{Name: "zero stream duration", Args: with("--max-streaming-duration-min=0"), WantErr: "must be positive"},
		{Name: "bad port", Args: with("--port=70000"), WantErr: "not a TCP port"},
		{Name: "stray argument", Args: with("extra"), WantErr: "unexpected arguments"},
		{Name: "version", Args: []string{"--version"}, Env: noEnv, WantVersion: true},
	})
}
