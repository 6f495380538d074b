//go:build linux

package hostpath

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2/ktesting"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/shutter-csi/shutter/pkg/hostpath/registration"
)

// TestRunRegistersWithKubelet plays kubelet's part against Run with --kubelet-registration-path:
// GetInfo names the driver and its socket as kubelet sees it, CSI answers beside it, and a
// rejected registration ends Run with an error (so that the pod restarts).
func TestRunRegistersWithKubelet(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(dir)
	o.KubeletRegistrationPath = "/var/lib/kubelet/plugins/" + o.DriverName + "/csi.sock"
	o.RegistrationSocket = filepath.Join(dir, "plugins_registry", o.DriverName+"-reg.sock")
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()

	reg := registerapi.NewRegistrationClient(dial(t, o.RegistrationSocket))
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != "CSIPlugin" || info.Name != "hostpath.csi.shutter.dev" ||
		info.Endpoint != "/var/lib/kubelet/plugins/hostpath.csi.shutter.dev/csi.sock" {
		t.Errorf("GetInfo = %+v", info)
	}
	// Kubelet calls NodeGetInfo on the CSI socket before it reports the outcome.
	node := csi.NewNodeClient(dial(t, filepath.Join(dir, "csi.sock")))
	if _, err := node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("NodeGetInfo: %v", err)
	}
	status := &registerapi.RegistrationStatus{PluginRegistered: false, Error: "driver name taken"}
	if _, err := reg.NotifyRegistrationStatus(ctx, status); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, registration.ErrRejected) {
			t.Errorf("Run = %v, want registration.ErrRejected", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not end after a rejected registration")
	}
}

func dial(t *testing.T, sock string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
