package conversion

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/app"
)

// ConvertPath is where the webhook serves ConversionReviews.
const ConvertPath = "/convert"

// Options configure the conversion webhook.
type Options struct {
	// CertFile and KeyFile hold the PEM serving certificate and key; both are read again when
	// they change.
	CertFile, KeyFile string
	// Address is the host to listen on; empty means every interface.
	Address string
	// Port is the HTTPS port serving /convert and /healthz.
	Port int
	// CRDs optionally points CRDs at this webhook (see CRDOptions).
	CRDs CRDOptions
	// MaxRequestBytes bounds a request body; a longer one is answered 413.
	MaxRequestBytes int64
	// MaxRequestsInFlight and MaxBytesInFlight bound the conversions served at once, by number
	// and by the bytes of their bodies (inflight.go); a request whose turn does not come within
	// ten seconds is answered 429.
	MaxRequestsInFlight int
	MaxBytesInFlight    int64
	// Timeouts bound how long a client may take, so that slow or stalled
	// clients cannot hold connections (and memory) open.
	Timeouts Timeouts
}

// Timeouts are the http.Server timeouts of the webhook.
type Timeouts struct {
	// ReadHeader bounds reading a request's headers, Read the whole
	// request, Write the time from the end of the headers to the end of the
	// response, and Idle how long a kept-alive connection waits for the
	// next request.
	ReadHeader, Read, Write, Idle time.Duration
}

// DefaultOptions returns the defaults of the command's flags. The API
// server waits at most 30 s for a conversion, so no exchange needs longer.
func DefaultOptions() Options {
	return Options{
		Port: 9443, CRDs: CRDOptions{Resync: time.Minute, ServicePort: 443},
		MaxRequestBytes: DefaultMaxRequestBytes, MaxRequestsInFlight: DefaultMaxRequestsInFlight, MaxBytesInFlight: DefaultMaxBytesInFlight,
		Timeouts: Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: 30 * time.Second, Idle: 90 * time.Second},
	}
}

// withDefaults fills a zero body limit, in-flight bound or timeout with its default, so that an
// Options literal that leaves them out does not answer every request with 413 or serve without
// bounds.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = d.MaxRequestBytes
	}
	if o.MaxRequestsInFlight <= 0 {
		o.MaxRequestsInFlight = d.MaxRequestsInFlight
	}
	if o.MaxBytesInFlight <= 0 {
		o.MaxBytesInFlight = d.MaxBytesInFlight
	}
	t, dt := &o.Timeouts, d.Timeouts
	for _, p := range []struct{ v, def *time.Duration }{
		{&t.ReadHeader, &dt.ReadHeader}, {&t.Read, &dt.Read}, {&t.Write, &dt.Write}, {&t.Idle, &dt.Idle},
	} {
		if *p.v <= 0 {
			*p.v = *p.def
		}
	}
	return o
}

// Run listens on the configured port and serves until ctx is done.
func Run(ctx context.Context, opts Options) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(opts.Address, strconv.Itoa(opts.Port)))
	if err != nil {
		return err
	}
	return Serve(ctx, ln, opts)
}

// Serve serves HTTPS on ln until ctx is done, and keeps the configured CRDs pointed at the
// webhook meanwhile.
func Serve(ctx context.Context, ln net.Listener, opts Options) error {
	logger := klog.FromContext(ctx)
	certs, err := dynamiccertificates.NewDynamicServingContentFromFiles("conversion-webhook", opts.CertFile, opts.KeyFile)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go certs.Run(ctx, 1)

	opts = opts.withDefaults()
	mux := http.NewServeMux()
	mux.Handle(ConvertPath, limitInFlight(LimitedHandler(opts.MaxRequestBytes), opts.MaxRequestsInFlight,
		opts.MaxBytesInFlight, opts.MaxRequestBytes, inFlightWait))
	app.InstallHealthChecks(mux)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: opts.Timeouts.ReadHeader,
		ReadTimeout:       opts.Timeouts.Read,
		WriteTimeout:      opts.Timeouts.Write,
		IdleTimeout:       opts.Timeouts.Idle,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: (&certCache{content: certs}).get,
		},
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	errCh := make(chan error, 2)
	go func() { errCh <- srv.ServeTLS(ln, "", "") }()
	if len(opts.CRDs.Names) > 0 {
		go func() { errCh <- KeepCRDsPointed(ctx, opts.CRDs) }()
	}
	logger.Info("Serving CRD conversions", "address", ln.Addr().String(), "path", ConvertPath)
	select {
	case err = <-errCh:
	case <-ctx.Done():
	}
	shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	if shutdownErr := srv.Shutdown(shutdownCtx); err == nil && !errors.Is(shutdownErr, http.ErrServerClosed) {
		err = shutdownErr
	}
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// certCache parses the current certificate and key once per change, not once per handshake.
type certCache struct {
	content dynamiccertificates.CertKeyContentProvider

	mu        sync.Mutex
	certPEM   []byte
	keyPEM    []byte
	certified *tls.Certificate
}

func (c *certCache) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	certPEM, keyPEM := c.content.CurrentCertKeyContent()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.certified != nil && bytes.Equal(certPEM, c.certPEM) && bytes.Equal(keyPEM, c.keyPEM) {
		return c.certified, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	c.certPEM, c.keyPEM, c.certified = certPEM, keyPEM, &cert
	return &cert, nil
}
