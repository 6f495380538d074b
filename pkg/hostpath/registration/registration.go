// Package registration registers a CSI driver with kubelet: it serves kubelet's plugin
// registration API (pluginregistration/v1 Registration) on a socket in kubelet's plugin
// registry folder, which kubelet watches. Kubelet asks for the driver's name, CSI socket and
// supported versions (GetInfo), calls the driver's NodeGetInfo over that socket, and reports the
// outcome (NotifyRegistrationStatus). This is the job of the separate node-driver-registrar
// container elsewhere; serving it from the driver saves a container per node.
package registration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// DefaultVersions are the versions of kubelet's CSI plugin API a driver supports.
var DefaultVersions = []string{"1.0.0"}

// ErrRejected is wrapped by Serve's error when kubelet reports that the registration failed.
var ErrRejected = errors.New("kubelet rejected the plugin registration")

// Info is what kubelet learns about the driver.
type Info struct {
	// DriverName is the CSI driver's name (GetPluginInfo's).
	DriverName string
	// Endpoint is the path of the driver's CSI socket as kubelet sees it (a host path, such as
	// /var/lib/kubelet/plugins/<driver>/csi.sock).
	Endpoint string
	// Versions are the supported versions of kubelet's CSI plugin API; nil is DefaultVersions.
	Versions []string
}

// server answers kubelet. Its rejected channel receives kubelet's error for a failed
// registration.
type server struct {
	registerapi.UnsafeRegistrationServer
	info     Info
	logger   klog.Logger
	rejected chan error
}

// GetInfo tells kubelet what plugin this is and where its CSI socket is.
func (s *server) GetInfo(ctx context.Context, _ *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	s.logger.V(2).Info("Kubelet asked for the plugin's info", "endpoint", s.info.Endpoint)
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.info.DriverName,
		Endpoint:          s.info.Endpoint,
		SupportedVersions: s.info.Versions,
	}, nil
}

// NotifyRegistrationStatus logs kubelet's verdict; a failure ends Serve with an error, so that
// the driver exits and its pod restarts and tries again.
func (s *server) NotifyRegistrationStatus(ctx context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if st.PluginRegistered {
		s.logger.Info("Registered with kubelet", "driver", s.info.DriverName)
	} else {
		s.logger.Error(nil, "Kubelet rejected the registration", "driver", s.info.DriverName, "reason", st.Error)
		select {
		case s.rejected <- fmt.Errorf("%w: %s", ErrRejected, st.Error):
		default: // one rejection is enough to stop
		}
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Serve listens on socketPath (replacing a stale socket) and answers kubelet until ctx ends, then
// removes the socket, which deregisters the driver. It returns nil when ctx ended, and an error
// wrapping ErrRejected when kubelet reported a failed registration.
func Serve(ctx context.Context, socketPath string, info Info) error {
	if info.DriverName == "" || info.Endpoint == "" {
		return errors.New("registration: driver name and CSI endpoint are required")
	}
	if info.Versions == nil {
		info.Versions = DefaultVersions
	}
	lis, err := listen(socketPath)
	if err != nil {
		return err
	}
	defer os.Remove(socketPath)
	logger := klog.FromContext(ctx).WithValues("socket", socketPath)
	s := &server{info: info, logger: logger, rejected: make(chan error, 1)}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, s)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	logger.Info("Serving kubelet plugin registration", "driver", info.DriverName, "endpoint", info.Endpoint)

	var result error
	select {
	case <-ctx.Done():
	case result = <-s.rejected:
	case err := <-served:
		return fmt.Errorf("registration server: %w", err)
	}
	stopServer(srv)
	return result
}

func listen(socketPath string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(socketPath), 0o750); err != nil {
		return nil, fmt.Errorf("registration socket folder: %w", err)
	}
	if err := os.Remove(socketPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove stale registration socket: %w", err)
	}
	lis, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socketPath, err)
	}
	return lis, nil
}

// stopServer lets calls in flight finish for a moment, then cuts them.
func stopServer(srv *grpc.Server) {
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
	}
}
