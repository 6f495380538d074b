package kubehttp

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCertPool(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := CertPool(ca)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Certificate().Verify(x509.VerifyOptions{Roots: pool}); err != nil {
		t.Errorf("the pool does not trust the server's certificate: %v", err)
	}
	empty := filepath.Join(dir, "empty.crt")
	if err := os.WriteFile(empty, []byte("no PEM here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CertPool(empty); err == nil || !strings.Contains(err.Error(), "holds no certificate") {
		t.Errorf("CertPool of a file without a certificate: %v, want 'holds no certificate'", err)
	}
	if _, err := CertPool(filepath.Join(dir, "missing.crt")); !os.IsNotExist(err) {
		t.Errorf("CertPool of a missing file: %v, want not exist", err)
	}
}

func TestDo(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodPost && r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "not JSON", http.StatusUnsupportedMediaType)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(r.Method + " " + r.URL.Path + " " + string(body)))
	}))
	defer srv.Close()
	s := &Server{Base: srv.URL, Token: "secret", Client: srv.Client()}
	ctx := context.Background()

	got, err := s.Do(ctx, http.MethodPost, "/x", []byte(`{"a":1}`), http.StatusOK, http.StatusCreated)
	if err != nil || string(got) != `POST /x {"a":1}` {
		t.Errorf("POST: %q, %v", got, err)
	}
	if _, err := s.Do(ctx, http.MethodGet, "/y", nil, http.StatusOK); err == nil || !strings.Contains(err.Error(), "GET "+srv.URL+"/y: 201 Created: GET /y") {
		t.Errorf("GET answered 201 where 200 is wanted: %v", err)
	}
	s.Token = "wrong"
	if _, err := s.Do(ctx, http.MethodGet, "/y", nil, http.StatusCreated); err == nil || !strings.Contains(err.Error(), "401 Unauthorized: no token") {
		t.Errorf("GET with a wrong token: %v", err)
	}
}

func TestInClusterNeedsTheServiceEnvironment(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := InCluster(0); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Errorf("InCluster outside a pod: %v", err)
	}
}
