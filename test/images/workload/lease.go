package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/shutter-csi/shutter/internal/kubehttp"
)

// leaseSpec is the part of a coordination.k8s.io/v1 Lease that tells whether it is held.
type leaseSpec struct {
	HolderIdentity       string    `json:"holderIdentity"`
	LeaseDurationSeconds int       `json:"leaseDurationSeconds"`
	RenewTime            time.Time `json:"renewTime"`
}

// lease reads the Lease namespace/name.
func lease(ctx context.Context, a *kubehttp.Server, namespace, name string) (leaseSpec, error) {
	body, err := a.Do(ctx, http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/"+url.PathEscape(namespace)+"/leases/"+url.PathEscape(name), nil, http.StatusOK)
	if err != nil {
		return leaseSpec{}, err
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
func checkLeases(ctx context.Context, a *kubehttp.Server, namespace string, names []string, out io.Writer, timeout, interval time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, name := range names {
		var reason error // the last answer's, not the deadline's
		for {
			spec, err := lease(ctx, a, namespace, name)
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
