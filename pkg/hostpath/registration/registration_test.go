package registration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// started runs Serve on a socket in a temporary folder and returns a client of it (as kubelet
// is) and the channel Serve's result arrives on.
func started(t *testing.T, ctx context.Context, info Info) (registerapi.RegistrationClient, string, <-chan error) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "plugins_registry", "hostpath.example.com-reg.sock")
	// A socket file left by a killed driver must not stop the next one.
	if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, sock, info) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return registerapi.NewRegistrationClient(conn), sock, done
}

func TestGetInfo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, sock, done := started(t, ctx, Info{
		DriverName: "hostpath.example.com", Endpoint: "/var/lib/kubelet/plugins/hostpath.example.com/csi.sock",
	})
	info, err := client.GetInfo(ctx, &registerapi.InfoRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != "CSIPlugin" || info.Name != "hostpath.example.com" ||
		info.Endpoint != "/var/lib/kubelet/plugins/hostpath.example.com/csi.sock" ||
		strings.Join(info.SupportedVersions, ",") != "1.0.0" {
		t.Errorf("GetInfo = %+v", info)
	}
	// A successful registration keeps the server up.
	if _, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}
	if _, err := client.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo after registration: %v", err)
	}
	cancel()
	if err := waitDone(t, done); err != nil {
		t.Errorf("Serve after cancel = %v, want nil", err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after Serve returned: %v, want it removed (kubelet deregisters then)", err)
	}
}

func TestRejectedRegistrationEndsServe(t *testing.T) {
	ctx := context.Background()
	client, _, done := started(t, ctx, Info{DriverName: "d.example.com", Endpoint: "/x/csi.sock"})
	status := &registerapi.RegistrationStatus{PluginRegistered: false, Error: "no NodeGetInfo"}
	if _, err := client.NotifyRegistrationStatus(ctx, status, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}
	err := waitDone(t, done)
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "no NodeGetInfo") {
		t.Errorf("Serve = %v, want ErrRejected with kubelet's reason", err)
	}
}

func TestServeNeedsNameAndEndpoint(t *testing.T) {
	for _, info := range []Info{{DriverName: "d"}, {Endpoint: "/e"}} {
		if err := Serve(context.Background(), filepath.Join(t.TempDir(), "s"), info); err == nil {
			t.Errorf("Serve(%+v) = nil, want an error", info)
		}
	}
}

func waitDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return")
		return nil
	}
}
