// Package kubehttp talks to a Kubernetes API server over HTTPS with the standard library alone,
// so that the test images using it stay one small static binary: from inside a pod the way
// Shutter's containers reach the API server (KUBERNETES_SERVICE_HOST and _PORT, the service
// account's token and CA), and, for harnesses that stand between clients and the API server,
// the CA file they trust.
package kubehttp

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ServiceAccountDir is where a pod's service account token and CA are mounted.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// maxBody bounds the bodies read from the API server.
const maxBody = 1 << 20

// Server is an API server and the credentials used to call it.
type Server struct {
	// Base is the server's URL, such as https://10.0.0.1:443.
	Base string
	// Token is the bearer token sent with every request.
	Token string
	// Client trusts the server's CA.
	Client *http.Client
}

// InCluster returns the API server of the pod this runs in, whose requests each take at most
// timeout.
func InCluster(timeout time.Duration) (*Server, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set")
	}
	token, err := os.ReadFile(filepath.Join(ServiceAccountDir, "token"))
	if err != nil {
		return nil, err
	}
	pool, err := CertPool(filepath.Join(ServiceAccountDir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	return &Server{Base: "https://" + net.JoinHostPort(host, port), Token: strings.TrimSpace(string(token)), Client: client}, nil
}

// Do sends method to path (below Base) with the token and, when body is not nil, body as JSON.
// It returns the body of the answer (at most 1 MiB), or an error naming the request when the
// answer's status is not one of want.
func (s *Server) Do(ctx context.Context, method, path string, body []byte, want ...int) ([]byte, error) {
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.Base+path, reader)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, err
	}
	for _, code := range want {
		if resp.StatusCode == code {
			return data, nil
		}
	}
	return nil, fmt.Errorf("%s %s: %s: %s", method, req.URL, resp.Status, strings.TrimSpace(string(data)))
}

// CertPool returns a pool of the PEM certificates in file; a file without one is an error.
func CertPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no certificate", file)
	}
	return pool, nil
}
