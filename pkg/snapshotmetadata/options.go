package snapshotmetadata

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/shutter-csi/shutter/pkg/app"
)

// Environment variables that give the defaults of --tls-cert and --tls-key, as upstream's.
const (
	EnvTLSCert = "TLS_CERT_PATH"
	EnvTLSKey  = "TLS_KEY_PATH"
)

// Options configure the sidecar.
type Options struct {
	// CSIAddress is the driver's Unix socket; Timeout bounds every short CSI call (not streams).
	CSIAddress string
	Timeout    time.Duration
	// Port is the TCP port of the gRPC service; ListenHost the address it listens on (empty:
	// every address of the pod; 127.0.0.1 keeps a hostNetwork pod off the node's interfaces).
	Port       int
	ListenHost string
	// TLSCert and TLSKey are the serving certificate and key files. They are read again when
	// they change on disk, so a renewed certificate (cert-manager) is served without a restart.
	TLSCert, TLSKey string
	// TLSMinVersion ("VersionTLS12", "VersionTLS13"; empty: Go's default), TLSCipherSuites and
	// TLSCurvePreferences (comma-separated Go names; empty: Go's defaults) shape the TLS server.
	TLSMinVersion, TLSCipherSuites, TLSCurvePreferences string
	// Audience is the audience callers' tokens must carry; empty reads it from the driver's
	// SnapshotMetadataService object at each call.
	Audience string
	// MaxStreamDuration ends any stream that lasts longer, the driver's stream with it.
	MaxStreamDuration time.Duration
	// HTTP serves metrics and health checks; MetricsPath is where the metrics are served.
	HTTP           app.HTTPOptions
	MetricsPath    string
	DisableMetrics bool
	Client         app.ClientOptions

	// Config replaces the configuration built from Client (tests).
	Config *rest.Config
	// Listener replaces the listener on Port (tests).
	Listener net.Listener
	// Ready, when set, is called once the service accepts calls (tests).
	Ready func(addr net.Addr)
}

// DefaultOptions are upstream's defaults.
func DefaultOptions() Options {
	return Options{
		CSIAddress:        "/run/csi/socket",
		Timeout:           time.Minute,
		Port:              50051,
		TLSCert:           os.Getenv(EnvTLSCert),
		TLSKey:            os.Getenv(EnvTLSKey),
		MaxStreamDuration: 10 * time.Minute,
		MetricsPath:       "/metrics",
		Client:            app.ClientOptions{QPS: 5, Burst: 10},
	}
}

// Validate reports the first option that cannot work.
func (o Options) Validate() error {
	switch {
	case o.CSIAddress == "":
		return errors.New("--csi-address must be given")
	case o.Timeout <= 0:
		return errors.New("--timeout must be positive")
	case o.Listener == nil && (o.Port <= 0 || o.Port > 65535):
		return fmt.Errorf("--port %d is not a TCP port", o.Port)
	case o.TLSCert == "" || o.TLSKey == "":
		return fmt.Errorf("--tls-cert and --tls-key (or $%s and $%s) must be given", EnvTLSCert, EnvTLSKey)
	case o.MaxStreamDuration <= 0:
		return errors.New("--max-streaming-duration-min must be positive")
	}
	_, err := o.tlsConfig()
	return err
}

// tlsVersions are the accepted values of --tls-min-version.
var tlsVersions = map[string]uint16{"VersionTLS12": tls.VersionTLS12, "VersionTLS13": tls.VersionTLS13}

// tlsCurves are the accepted names of --tls-curve-preferences.
var tlsCurves = map[string]tls.CurveID{
	"X25519": tls.X25519, "CurveP256": tls.CurveP256, "CurveP384": tls.CurveP384, "CurveP521": tls.CurveP521,
	"X25519MLKEM768": tls.X25519MLKEM768,
}

// tlsConfig is the server's TLS configuration: certificates read from TLSCert and TLSKey (again
// whenever either file changes), no client certificates (callers authenticate with tokens).
func (o Options) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ClientAuth: tls.NoClientCert}
	if o.TLSMinVersion != "" {
		v, ok := tlsVersions[o.TLSMinVersion]
		if !ok {
			return nil, fmt.Errorf("--tls-min-version %q: want VersionTLS12 or VersionTLS13", o.TLSMinVersion)
		}
		cfg.MinVersion = v
	}
	for _, name := range splitList(o.TLSCipherSuites) {
		i := slices.IndexFunc(tls.CipherSuites(), func(s *tls.CipherSuite) bool { return s.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("--tls-cipher-suites: %q is not a secure cipher suite of Go's", name)
		}
		cfg.CipherSuites = append(cfg.CipherSuites, tls.CipherSuites()[i].ID)
	}
	for _, name := range splitList(o.TLSCurvePreferences) {
		c, ok := tlsCurves[name]
		if !ok {
			return nil, fmt.Errorf("--tls-curve-preferences: unknown curve %q", name)
		}
		cfg.CurvePreferences = append(cfg.CurvePreferences, c)
	}
	kp := &keyPair{cert: o.TLSCert, key: o.TLSKey}
	if _, err := kp.get(nil); err != nil {
		return nil, err
	}
	cfg.GetCertificate = kp.get
	return cfg, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// keyPair serves a certificate and key from files, loading them again when either file's
// modification time or size changes. A pair that fails to load keeps the last good one.
type keyPair struct {
	cert, key string
	mu        sync.Mutex
	stamp     string
	loaded    *tls.Certificate
}

func (k *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	stamp := fileStamp(k.cert) + "|" + fileStamp(k.key)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.loaded != nil && stamp == k.stamp {
		return k.loaded, nil
	}
	c, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		if k.loaded != nil {
			return k.loaded, nil
		}
		return nil, fmt.Errorf("load the TLS certificate: %w", err)
	}
	k.loaded, k.stamp = &c, stamp
	return k.loaded, nil
}

func fileStamp(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%d/%d", fi.ModTime().UnixNano(), fi.Size())
}
