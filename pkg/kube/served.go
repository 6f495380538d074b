package kube

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Discovery is the part of the discovery client that tells which resources are served.
type Discovery interface {
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// MissingResources returns those of want (plural resource names) that the API server does not
// serve in groupVersion; all of them when it cannot tell.
func MissingResources(d Discovery, groupVersion string, want []string) ([]string, error) {
	list, err := d.ServerResourcesForGroupVersion(groupVersion)
	if err != nil {
		return want, err
	}
	served := map[string]bool{}
	for _, r := range list.APIResources {
		served[r.Name] = true
	}
	var missing []string
	for _, name := range want {
		if !served[name] {
			missing = append(missing, name)
		}
	}
	return missing, nil
}

// GroupCRDPoll is how often the controller and the sidecar look for the group snapshot CRDs when
// they were missing at start.
const GroupCRDPoll = 30 * time.Second

// Poll says how WaitServed looks again.
type Poll struct {
	// Interval is the first wait; Factor, when above 1, multiplies it after each look.
	Interval time.Duration
	Factor   float64
	// Max, when set, ends the wait with a NotServedError once the next wait would be longer.
	Max time.Duration
	// OnMissing, when set, is called after each look that found resources missing.
	OnMissing func(missing []string, err error, retryIn time.Duration)
}

// NotServedError is WaitServed's answer when resources are still missing after Poll.Max.
type NotServedError struct {
	GroupVersion string
	Missing      []string
	// Err is the last discovery error, if any.
	Err error
}

func (e *NotServedError) Error() string {
	return fmt.Sprintf("the API server does not serve %s %v (last error: %v)", e.GroupVersion, e.Missing, e.Err)
}

// WaitServed returns once the API server serves every resource of want in groupVersion, looking
// at once and then as p says. It returns ctx's error when ctx ends first.
func WaitServed(ctx context.Context, d Discovery, groupVersion string, want []string, p Poll) error {
	for delay := p.Interval; ; {
		missing, err := MissingResources(d, groupVersion, want)
		if err == nil && len(missing) == 0 {
			return nil
		}
		if p.Max > 0 && delay > p.Max {
			return &NotServedError{GroupVersion: groupVersion, Missing: missing, Err: err}
		}
		if p.OnMissing != nil {
			p.OnMissing(missing, err, delay)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		if p.Factor > 1 {
			delay = time.Duration(float64(delay) * p.Factor)
		}
	}
}
