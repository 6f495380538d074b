// Command snapshot-conversion-webhook converts Shutter's custom resources between the API versions
// their CRDs serve (groupsnapshot.storage.k8s.io v1beta1, v1beta2 and v1), for clusters upgraded
// from CRDs that once stored v1beta1 objects.
package main

import (
	"errors"
	"flag"
	"strings"

	"github.com/shutter-csi/shutter/pkg/command"
	"github.com/shutter-csi/shutter/pkg/conversion"
)

func main() {
	command.Main("snapshot-conversion-webhook", parseFlags, conversion.Run)
}

// parseFlags turns the command line into webhook options.
func parseFlags(args []string) (conversion.Options, bool, error) {
	opts := conversion.DefaultOptions()
	fs := flag.NewFlagSet("snapshot-conversion-webhook", flag.ContinueOnError)
	fs.StringVar(&opts.CertFile, "tls-cert-file", "", "PEM serving certificate; read again when it changes.")
	fs.StringVar(&opts.KeyFile, "tls-private-key-file", "", "PEM private key of the serving certificate; read again when it changes.")
	fs.StringVar(&opts.Address, "address", "", "Address to listen on; empty means every interface.")
	fs.IntVar(&opts.Port, "port", opts.Port, "HTTPS port serving /convert and /healthz.")
	crds := fs.String("patch-crds", "", "Comma-separated CRD names to point at this webhook (spec.conversion); empty changes no CRD.")
	c := &opts.CRDs
	fs.StringVar(&c.ServiceNamespace, "service-namespace", "", "Namespace of the webhook's Service, for --patch-crds.")
	fs.StringVar(&c.ServiceName, "service-name", "", "Name of the webhook's Service, for --patch-crds.")
	port := fs.Int("service-port", int(c.ServicePort), "Port of the webhook's Service, for --patch-crds.")
	fs.StringVar(&c.URL, "webhook-url", "", "URL the API server calls instead of a Service, for --patch-crds.")
	fs.StringVar(&c.CABundleFile, "ca-bundle-file", "", "PEM CA that signed the serving certificate, written into the CRDs by --patch-crds.")
	fs.DurationVar(&c.Resync, "crd-resync-period", c.Resync, "How often --patch-crds applies the conversion settings again.")
	fs.Int64Var(&opts.MaxRequestBytes, "max-request-bytes", opts.MaxRequestBytes, "Largest ConversionReview body accepted; a larger one is answered 413.")
	fs.IntVar(&opts.MaxRequestsInFlight, "max-requests-inflight", opts.MaxRequestsInFlight, "Conversions served at once; more wait their turn up to 10 s, then are answered 429.")
	fs.Int64Var(&opts.MaxBytesInFlight, "max-bytes-inflight", opts.MaxBytesInFlight, "Bytes of the bodies of the conversions served at once (a body of unknown length counts as --max-request-bytes; raised to --max-request-bytes if below); more wait as above. Memory use is about 2.5 times this.")
	t := &opts.Timeouts
	fs.DurationVar(&t.ReadHeader, "read-header-timeout", t.ReadHeader, "How long a client may take to send a request's headers.")
	fs.DurationVar(&t.Read, "read-timeout", t.Read, "How long a client may take to send a whole request.")
	fs.DurationVar(&t.Write, "write-timeout", t.Write, "How long answering a request may take, from the end of its headers.")
	fs.DurationVar(&t.Idle, "idle-timeout", t.Idle, "How long a kept-alive connection may wait for its next request.")
	c.Client.AddFlags(fs, 5, 10)
	if showVersion, err := command.Parse(fs, args); showVersion || err != nil {
		return opts, showVersion, err
	}
	if opts.CertFile == "" || opts.KeyFile == "" {
		return opts, false, errors.New("--tls-cert-file and --tls-private-key-file are required")
	}
	if opts.MaxRequestBytes <= 0 || opts.MaxRequestsInFlight <= 0 || opts.MaxBytesInFlight <= 0 || t.ReadHeader <= 0 || t.Read <= 0 || t.Write <= 0 || t.Idle <= 0 {
		return opts, false, errors.New("--max-request-bytes, --max-requests-inflight, --max-bytes-inflight and the timeouts must be positive")
	}
	c.ServicePort = int32(*port)
	if *crds != "" {
		c.Names = strings.Split(*crds, ",")
		if c.CABundleFile == "" || (c.URL == "" && (c.ServiceName == "" || c.ServiceNamespace == "")) {
			return opts, false, errors.New("--patch-crds needs --ca-bundle-file and either --service-name with --service-namespace or --webhook-url")
		}
	}
	return opts, false, nil
}
