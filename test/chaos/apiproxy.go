package main

import (
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shutter-csi/shutter/internal/kubehttp"
	"github.com/shutter-csi/shutter/pkg/app"
)

// apiMode is what the API proxy does to requests while a fault lasts.
type apiMode int

const (
	apiPass apiMode = iota
	// apiThrottle answers half the requests 429 with Retry-After, as API Priority and Fairness does.
	apiThrottle
	// apiFail answers half the requests 500 without Retry-After: the caller sees the error.
	apiFail
	// apiSlow delays every request.
	apiSlow
)

// apiProxy is an HTTPS reverse proxy in front of kube-apiserver on 127.0.0.1, one listener per
// component. It presents the API server's own certificate, so the components' kubeconfigs only
// change the port, and tags each component's User-Agent so the audit log tells replicas apart.
type apiProxy struct {
	proxy   *httputil.ReverseProxy
	tls     *tls.Config
	mode    atomic.Int32
	delay   atomic.Int64
	counter atomic.Uint64
	// Injected counts the answers the proxy made up (429 and 500) and the delayed requests.
	injected atomic.Uint64

	mu      sync.Mutex
	servers []*http.Server
}

// newAPIProxy proxies to upstream, trusting caFile, and serves certFile/keyFile.
func newAPIProxy(upstream, caFile, certFile, keyFile string) (*apiProxy, error) {
	target, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	pool, err := kubehttp.CertPool(caFile)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 100, ForceAttemptHTTP2: true}
	p := &apiProxy{tls: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport:     transport,
		FlushInterval: -1,
		// A restarted API server breaks streams; the components see and handle that.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	return p, nil
}

// listen serves a new listener for component and returns its https:// address.
func (p *apiProxy) listen(component string) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: p.handler(component), TLSConfig: p.tls, ReadHeaderTimeout: 10 * time.Second}
	p.mu.Lock()
	p.servers = append(p.servers, srv)
	p.mu.Unlock()
	go func() { _ = srv.Serve(tls.NewListener(l, p.tls)) }()
	return "https://" + l.Addr().String(), nil
}

func (p *apiProxy) handler(component string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ua := r.Header.Get("User-Agent")
		if checked := r.Header.Get(app.LeaseCheckedHeader); checked != "" {
			ua += " " + leaseCheckedTag + checked // when the writer's fence found its Lease fresh
		}
		r.Header.Set("User-Agent", ua+" "+userAgentTag+component)
		watch := r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1"
		switch apiMode(p.mode.Load()) {
		case apiThrottle:
			if !watch && p.counter.Add(1)%2 == 0 {
				p.injected.Add(1)
				w.Header().Set("Retry-After", "1")
				http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429}`, http.StatusTooManyRequests)
				return
			}
		case apiFail:
			if !watch && p.counter.Add(1)%2 == 0 {
				p.injected.Add(1)
				http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","code":500}`, http.StatusInternalServerError)
				return
			}
		case apiSlow:
			p.injected.Add(1)
			select {
			case <-time.After(time.Duration(p.delay.Load())):
			case <-r.Context().Done():
				return
			}
		}
		p.proxy.ServeHTTP(w, r)
	})
}

// userAgentTag precedes the component name the proxy appends to each request's User-Agent.
const userAgentTag = "chaos-via/"

// leaseCheckedTag precedes, in the User-Agent, a write's app.LeaseCheckedHeader.
const leaseCheckedTag = "lease-checked/"

// leaseCheckedOf is the time a write's fence found the Lease fresh, from its User-Agent, or zero.
func leaseCheckedOf(userAgent string) time.Time {
	_, after, ok := strings.Cut(userAgent, leaseCheckedTag)
	if !ok {
		return time.Time{}
	}
	ns, err := strconv.ParseInt(strings.Fields(after)[0], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// componentOf is the component a request came through, from its User-Agent, or "".
func componentOf(userAgent string) string {
	_, after, ok := strings.Cut(userAgent, userAgentTag)
	if !ok {
		return ""
	}
	return after
}

// set switches the proxy's behaviour; delay is used by apiSlow.
func (p *apiProxy) set(mode apiMode, delay time.Duration) {
	p.delay.Store(int64(delay))
	p.mode.Store(int32(mode))
}

// close stops every listener.
func (p *apiProxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.servers {
		_ = s.Close()
	}
}
