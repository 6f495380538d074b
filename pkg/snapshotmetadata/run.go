package snapshotmetadata

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	api "github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	informers "github.com/shutter-csi/shutter/client/informers/externalversions"
	"github.com/shutter-csi/shutter/pkg/app"
	"github.com/shutter-csi/shutter/pkg/csi"
)

// handleIndex indexes VolumeSnapshotContents by the snapshot handle in their status.
const handleIndex = "snapshotHandle"

// shutdownGrace is how long calls under way may finish when the sidecar stops.
const shutdownGrace = 10 * time.Second

// Run connects to the driver and serves the SnapshotMetadata service until ctx is done.
func Run(ctx context.Context, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	reg := app.Registry()
	m := NewMetrics(reg)
	driver, err := csi.ConnectMetadata(ctx, csi.ConnectOptions{Address: opts.CSIAddress, Timeout: opts.Timeout, Metrics: m.CSI})
	if err != nil {
		return err
	}
	defer func() { _ = driver.Close() }()
	cfg := opts.Config
	if cfg == nil {
		if cfg, err = opts.Client.Config("csi-snapshot-metadata/" + driver.DriverName()); err != nil {
			return err
		}
	}
	kube, err := kubernetes.NewForConfig(app.Protobuf(cfg))
	if err != nil {
		return err
	}
	snapshots, err := clientset.NewForConfig(cfg)
	if err != nil {
		return err
	}
	byHandle, stopIndex, err := contentIndex(ctx, snapshots)
	if err != nil {
		return err
	}
	defer stopIndex()
	srv := NewServer(Config{
		Driver: driver.DriverName(), CSI: driver, Kube: kube, Snapshots: snapshots, ContentsByHandle: byHandle,
		Audience: opts.Audience, MaxStreamDuration: opts.MaxStreamDuration, Metrics: m,
	})
	httpOpts := opts.HTTP
	httpOpts.MetricsPath = opts.MetricsPath
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		var gatherer prometheus.Gatherer
		if !opts.DisableMetrics {
			gatherer = m.Gatherer(reg)
		}
		if err := app.ServeHTTP(ctx, httpOpts, gatherer); err != nil {
			logger.Error(err, "HTTP endpoint failed")
		}
	})
	return serve(ctx, opts, srv)
}

// serve serves srv over TLS until ctx is done, then lets calls under way finish for
// shutdownGrace.
func serve(ctx context.Context, opts Options, srv *Server) error {
	tlsCfg, err := opts.tlsConfig()
	if err != nil {
		return err
	}
	lis := opts.Listener
	if lis == nil {
		addr := net.JoinHostPort(opts.ListenHost, strconv.Itoa(opts.Port))
		if lis, err = (&net.ListenConfig{}).Listen(ctx, "tcp", addr); err != nil {
			return fmt.Errorf("listen on %s: %w", addr, err)
		}
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)))
	api.RegisterSnapshotMetadataServer(gs, srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	errCh := make(chan error, 1)
	go func() { errCh <- gs.Serve(lis) }()
	klog.FromContext(ctx).Info("Serving the SnapshotMetadata service", "address", lis.Addr().String(), "driver", srv.cfg.Driver)
	if opts.Ready != nil {
		opts.Ready(lis.Addr())
	}
	select {
	case err := <-errCh:
		return fmt.Errorf("SnapshotMetadata service: %w", err)
	case <-ctx.Done():
	}
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(shutdownGrace):
		gs.Stop()
		<-stopped
	}
	if err := <-errCh; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// contentIndex starts an informer on VolumeSnapshotContents indexed by snapshot handle, waits
// until it has listed them, and returns the look-up and the function that stops the informer.
func contentIndex(ctx context.Context, snapshots clientset.Interface) (func(string) []*snapshotv1.VolumeSnapshotContent, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(snapshots, 0)
	stop := func() { cancel(); factory.Shutdown() }
	inf := factory.Snapshot().V1().VolumeSnapshotContents().Informer()
	if err := inf.AddIndexers(cache.Indexers{handleIndex: contentHandle}); err != nil {
		stop()
		return nil, nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		stop()
		return nil, nil, fmt.Errorf("list VolumeSnapshotContents: %w", context.Cause(ctx))
	}
	return func(handle string) []*snapshotv1.VolumeSnapshotContent {
		objs, err := inf.GetIndexer().ByIndex(handleIndex, handle)
		if err != nil {
			return nil
		}
		out := make([]*snapshotv1.VolumeSnapshotContent, 0, len(objs))
		for _, o := range objs {
			if c, ok := o.(*snapshotv1.VolumeSnapshotContent); ok {
				out = append(out, c)
			}
		}
		return out
	}, stop, nil
}

func contentHandle(obj any) ([]string, error) {
	c, ok := obj.(*snapshotv1.VolumeSnapshotContent)
	if !ok || c.Status == nil || ptr.Deref(c.Status.SnapshotHandle, "") == "" {
		return nil, nil
	}
	return []string{*c.Status.SnapshotHandle}, nil
}
