// Command csi-snapshot-metadata is the snapshot-metadata sidecar of KEP-3314: it runs next to a
// CSI driver and serves the Kubernetes SnapshotMetadata gRPC API over TLS to backup
// applications, which read through it the allocated and changed block ranges of snapshots.
package main

import (
	"context"
	"flag"
	"time"

	"github.com/shutter-csi/shutter/pkg/app"
	"github.com/shutter-csi/shutter/pkg/command"
	"github.com/shutter-csi/shutter/pkg/snapshotmetadata"
)

func main() {
	command.Main("csi-snapshot-metadata", parseFlags, func(ctx context.Context, opts snapshotmetadata.Options) error {
		app.TuneRuntime(opts.HTTP.Profiling)
		return snapshotmetadata.Run(ctx, opts)
	})
}

// parseFlags turns the command line into the sidecar's options; the flags are upstream's.
func parseFlags(args []string) (snapshotmetadata.Options, bool, error) {
	opts := snapshotmetadata.DefaultOptions()
	fs := flag.NewFlagSet("csi-snapshot-metadata", flag.ContinueOnError)
	fs.StringVar(&opts.CSIAddress, "csi-address", opts.CSIAddress, "Unix socket of the CSI driver.")
	fs.DurationVar(&opts.Timeout, "timeout", opts.Timeout, "Timeout of the short CSI calls (probe, plugin info and capabilities); streams are bounded by --max-streaming-duration-min.")
	fs.IntVar(&opts.Port, "port", opts.Port, "TCP port of the SnapshotMetadata gRPC service.")
	fs.StringVar(&opts.ListenHost, "listen-address", "", "Address the gRPC service listens on; empty: every address (Shutter's addition).")
	fs.StringVar(&opts.TLSCert, "tls-cert", opts.TLSCert, "Serving certificate (PEM); default $"+snapshotmetadata.EnvTLSCert+". Read again when the file changes.")
	fs.StringVar(&opts.TLSKey, "tls-key", opts.TLSKey, "Key of the serving certificate (PEM); default $"+snapshotmetadata.EnvTLSKey+".")
	fs.StringVar(&opts.TLSMinVersion, "tls-min-version", "", "Lowest TLS version served: VersionTLS12 or VersionTLS13; empty: TLS 1.2.")
	fs.StringVar(&opts.TLSCipherSuites, "tls-cipher-suites", "", "Comma-separated TLS 1.2 cipher suites (Go names); empty: Go's defaults.")
	fs.StringVar(&opts.TLSCurvePreferences, "tls-curve-preferences", "", "Comma-separated key exchange curves (X25519, CurveP256, CurveP384, CurveP521, X25519MLKEM768); empty: Go's defaults.")
	fs.StringVar(&opts.Audience, "audience", "", "Audience the callers' tokens must carry; empty: the audience of the driver's SnapshotMetadataService.")
	maxMin := fs.Int("max-streaming-duration-min", int(opts.MaxStreamDuration/time.Minute), "Longest a stream may last, in minutes; the driver's stream ends with it.")
	opts.HTTP.AddFlags(fs, "Address serving metrics and /healthz, e.g. :8080; empty serves nothing.")
	fs.StringVar(&opts.MetricsPath, "metrics-path", opts.MetricsPath, "Path of the metrics on --http-endpoint.")
	fs.BoolVar(&opts.DisableMetrics, "disable-metrics", false, "Serve no metrics on --http-endpoint (health checks only).")
	opts.Client.AddFlags(fs, opts.Client.QPS, opts.Client.Burst)
	if showVersion, err := command.Parse(fs, args); showVersion || err != nil {
		return opts, showVersion, err
	}
	opts.MaxStreamDuration = time.Duration(*maxMin) * time.Minute
	return opts, false, opts.Validate()
}
