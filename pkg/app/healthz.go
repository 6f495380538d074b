package app

import (
	"fmt"
	"net/http"
	"strings"
)

// HealthCheck is one named check served at /healthz/<Name> and included in /healthz.
//
// The API server's healthz package would do the same, but it links in audit, tracing and the
// component-base metrics registry: several MiB of resident memory for two handlers.
type HealthCheck struct {
	Name  string
	Check func(*http.Request) error
}

// InstallHealthChecks serves /healthz (ping plus every check; 200 "ok" or 500 listing the
// failures) and /healthz/<name> for each check. A HEAD or GET is answered; the body is plain text.
func InstallHealthChecks(mux *http.ServeMux, checks ...HealthCheck) {
	all := append([]HealthCheck{{Name: "ping", Check: func(*http.Request) error { return nil }}}, checks...)
	mux.Handle("/healthz", healthHandler(all))
	for _, c := range all {
		mux.Handle("/healthz/"+c.Name, healthHandler([]HealthCheck{c}))
	}
}

func healthHandler(checks []HealthCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var failed []string
		for _, c := range checks {
			if err := c.Check(r); err != nil {
				failed = append(failed, fmt.Sprintf("[-]%s failed: %v", c.Name, err))
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if len(failed) > 0 {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "%s\nhealthz check failed\n", strings.Join(failed, "\n"))
			return
		}
		fmt.Fprint(w, "ok")
	})
}
