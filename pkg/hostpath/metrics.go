//go:build linux

package hostpath

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/shutter-csi/shutter/pkg/metrics"
)

// The driver's metrics (names in pkg/metrics), served on
// Options.HTTPEndpoint.
var (
	quarantined = metrics.NewCounterVec(metrics.HostpathQuarantined,
		"Volume and snapshot folders or files, and damaged record logs, moved to quarantine because no record accounts for them.",
		metrics.LabelKind)
	quarantineBytes = metrics.NewGauge(metrics.HostpathQuarantineBytes,
		"Bytes of disk the quarantine folder's data takes; they count against --capacity.")
	cleanupHalted = metrics.NewGauge(metrics.HostpathCleanupHalted,
		"1 when the last start left the data folders alone because the record log is new or damaged in its middle.")
)

// metricsRegistry holds the driver's metrics and the Go and process ones.
func metricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		quarantined, quarantineBytes, cleanupHalted)
	return reg
}

// serveMetrics serves /metrics on lis until ctx is done.
func serveMetrics(ctx context.Context, lis net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(metricsRegistry(), promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(lis) }()
	klog.FromContext(ctx).Info("Serving metrics", "address", lis.Addr().String())
	select {
	case err := <-errCh:
		return fmt.Errorf("metrics endpoint: %w", err)
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}
