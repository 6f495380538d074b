package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// The service account files of a pod, and the environment that names the API server.
const (
	tokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	caFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// apiServer is what the lease command needs of the API server: its address and the pod's
// credentials. Only the standard library is used, so that the image stays one small binary.
type apiServer struct {
	base   string
	token  string
	client *http.Client
}

// inCluster reads the address from KUBERNETES_SERVICE_HOST/PORT and the credentials from the
// pod's service account files.
func inCluster() (*apiServer, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set")
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no certificate", caFile)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	return &apiServer{base: "https://" + net.JoinHostPort(host, port), token: strings.TrimSpace(string(token)), client: client}, nil
}

// leaseSpec is the part of a coordination.k8s.io/v1 Lease that tells whether it is held.
type leaseSpec struct {
	HolderIdentity       string    `json:"holderIdentity"`
	LeaseDurationSeconds int       `json:"leaseDurationSeconds"`
	RenewTime            time.Time `json:"renewTime"`
}

// lease reads the Lease namespace/name.
func (a *apiServer) lease(ctx context.Context, namespace, name string) (leaseSpec, error) {
	u := a.base + "/apis/coordination.k8s.io/v1/namespaces/" + url.PathEscape(namespace) + "/leases/" + url.PathEscape(name)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return leaseSpec{}, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Accept", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return leaseSpec{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return leaseSpec{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return leaseSpec{}, fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	var l struct {
		Spec leaseSpec `json:"spec"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return leaseSpec{}, fmt.Errorf("lease %s/%s: %w", namespace, name, err)
	}
	return l.Spec, nil
}

// live tells whether the Lease is held and was renewed within its duration at now.
func (s leaseSpec) live(now time.Time) error {
	if s.HolderIdentity == "" {
		return errors.New("nobody holds it")
	}
	if s.RenewTime.IsZero() {
		return fmt.Errorf("held by %s, never renewed", s.HolderIdentity)
	}
	duration := time.Duration(s.LeaseDurationSeconds) * time.Second
	if age := now.Sub(s.RenewTime); duration > 0 && age >= duration {
		return fmt.Errorf("held by %s, last renewed %s ago, longer than its %s", s.HolderIdentity, age.Round(time.Second), duration)
	}
	return nil
}

// checkLeases asks for every named Lease of namespace every interval until each is held and
// fresh, and prints their holders; it fails with the last reason once timeout has passed.
func checkLeases(ctx context.Context, a *apiServer, namespace string, names []string, out io.Writer, timeout, interval time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, name := range names {
		var reason error // the last answer's, not the deadline's
		for {
			spec, err := a.lease(ctx, namespace, name)
			if err == nil {
				err = spec.live(time.Now())
			}
			if err == nil {
				fmt.Fprintf(out, "lease %s/%s: held by %s, renewed at %s\n", namespace, name, spec.HolderIdentity, spec.RenewTime.Format(time.RFC3339))
				break
			}
			if reason == nil || ctx.Err() == nil {
				reason = err
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("lease %s/%s: %w", namespace, name, reason)
			case <-time.After(interval):
			}
		}
	}
	return nil
}
