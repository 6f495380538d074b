package conversion

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	certutil "k8s.io/client-go/util/cert"
)

func review(t *testing.T, desired string, objects ...string) *apiextensionsv1.ConversionReview {
	t.Helper()
	r := &apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
		Request:  &apiextensionsv1.ConversionRequest{UID: "uid-1", DesiredAPIVersion: desired},
	}
	for _, o := range objects {
		r.Request.Objects = append(r.Request.Objects, runtime.RawExtension{Raw: []byte(o)})
	}
	return r
}

func post(t *testing.T, h http.Handler, body any) (*httptest.ResponseRecorder, *apiextensionsv1.ConversionReview) {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, ConvertPath, bytes.NewReader(data)))
	out := &apiextensionsv1.ConversionReview{}
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatal(err)
		}
	}
	return rec, out
}

func TestHandler(t *testing.T) {
	content := `{"apiVersion":"groupsnapshot.storage.k8s.io/v1beta1","kind":"VolumeGroupSnapshotContent",` +
		`"metadata":{"name":"c"},"status":{"creationTime":1714557600123456789,` +
		`"volumeSnapshotHandlePairList":[{"volumeHandle":"v","snapshotHandle":"s"}]}}`
	class := `{"apiVersion":"groupsnapshot.storage.k8s.io/v1beta2","kind":"VolumeGroupSnapshotClass","metadata":{"name":"k"},"driver":"d","deletionPolicy":"Delete"}`

	t.Run("converts every object", func(t *testing.T) {
		rec, out := post(t, Handler(), review(t, "groupsnapshot.storage.k8s.io/v1", content, class))
		if rec.Code != http.StatusOK || out.Response == nil || out.Response.Result.Status != metav1.StatusSuccess {
			t.Fatalf("code %d, response %+v", rec.Code, out.Response)
		}
		if out.Response.UID != "uid-1" || len(out.Response.ConvertedObjects) != 2 {
			t.Fatalf("response %+v", out.Response)
		}
		want := `{"apiVersion":"groupsnapshot.storage.k8s.io/v1","kind":"VolumeGroupSnapshotContent","metadata":{"name":"c"},` +
			`"status":{"creationTime":"2024-05-01T10:00:00.123456789Z","volumeSnapshotInfoList":[{"snapshotHandle":"s","volumeHandle":"v"}]}}`
		if got := string(out.Response.ConvertedObjects[0].Raw); got != want {
			t.Errorf("converted content\n got %s\nwant %s", got, want)
		}
	})
	t.Run("reports a failure", func(t *testing.T) {
		_, out := post(t, Handler(), review(t, "groupsnapshot.storage.k8s.io/v9", class))
		if out.Response == nil || out.Response.Result.Status != metav1.StatusFailure || out.Response.UID != "uid-1" {
			t.Fatalf("response %+v, want a failure", out.Response)
		}
	})
	t.Run("rejects what is not a v1 review", func(t *testing.T) {
		old := review(t, "groupsnapshot.storage.k8s.io/v1", class)
		old.APIVersion = "apiextensions.k8s.io/v1beta1"
		for _, body := range []any{old, map[string]string{"kind": "Pod"}} {
			if rec, _ := post(t, Handler(), body); rec.Code != http.StatusBadRequest {
				t.Errorf("code %d, want 400", rec.Code)
			}
		}
	})
}

// writeCert writes a fresh self-signed certificate for 127.0.0.1 and returns its PEM.
func writeCert(t *testing.T, certFile, keyFile string) []byte {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Replace, as a Secret volume update does, so a reader never sees half a file.
	for file, data := range map[string][]byte{certFile: certPEM, keyFile: keyPEM} {
		if err := os.WriteFile(file+".tmp", data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	return certPEM
}

// servedCert returns the leaf certificate the server at addr presents.
func servedCert(t *testing.T, addr string) []byte {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test inspects the certificate itself
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

func TestServeReloadsCertificate(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := writeCert(t, certFile, keyFile)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, Options{CertFile: certFile, KeyFile: keyFile}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	addr := ln.Addr().String()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(first)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}

	before := servedCert(t, addr)
	second := writeCert(t, certFile, keyFile)
	deadline := time.Now().Add(20 * time.Second)
	for bytes.Equal(servedCert(t, addr), before) {
		if time.Now().After(deadline) {
			t.Fatal("the server still presents the old certificate 20s after the files changed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if blocks, _ := certutil.ParseCertsPEM(second); !bytes.Equal(servedCert(t, addr), blocks[0].Raw) {
		t.Error("the server presents neither the old nor the new certificate")
	}
}

// TestHandlerRefusesOversizedBody: a body over the limit is answered 413
// with the limit named, never cut and parsed (before, a body was cut at
// 64 MiB silently and then failed as malformed JSON).
func TestHandlerRefusesOversizedBody(t *testing.T) {
	body, err := json.Marshal(review(t, "groupsnapshot.storage.k8s.io/v1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		h     http.Handler
		limit int64
	}{
		{name: "default limit", h: Handler(), limit: DefaultMaxRequestBytes},
		{name: "configured limit", h: LimitedHandler(4096), limit: 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Leading whitespace keeps the JSON valid, had it been read whole.
			padded := io.MultiReader(io.LimitReader(spaces{}, tc.limit), bytes.NewReader(body))
			rec := httptest.NewRecorder()
			tc.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, ConvertPath, padded))
			if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), fmt.Sprint(tc.limit)) {
				t.Fatalf("code %d, body %q; want 413 naming the limit %d", rec.Code, rec.Body.String(), tc.limit)
			}
			rec = httptest.NewRecorder()
			tc.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, ConvertPath, io.MultiReader(io.LimitReader(spaces{}, tc.limit-int64(len(body))), bytes.NewReader(body))))
			if rec.Code != http.StatusOK {
				t.Fatalf("a body of exactly the limit: code %d, %s", rec.Code, rec.Body.String())
			}
		})
	}
}

// spaces reads as endless blanks.
type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// TestServeDropsSlowClients: a client that stalls in the middle of a body,
// and a kept-alive connection without a next request, are closed once the
// configured timeouts pass.
func TestServeDropsSlowClients(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeCert(t, certFile, keyFile)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.CertFile, opts.KeyFile = certFile, keyFile
	opts.Timeouts = Timeouts{ReadHeader: 300 * time.Millisecond, Read: 500 * time.Millisecond, Write: time.Second, Idle: 500 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, opts) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	for _, tc := range []struct{ name, send string }{
		{name: "stalled body", send: "POST /convert HTTP/1.1\r\nHost: webhook\r\nContent-Length: 1000\r\n\r\n{"},
		{name: "stalled headers", send: "POST /convert HTTP/1.1\r\nHost: web"},
		{name: "idle keep-alive", send: "GET /healthz HTTP/1.1\r\nHost: webhook\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only timeouts are tested
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			if _, err := io.WriteString(conn, tc.send); err != nil {
				t.Fatal(err)
			}
			// The server must close the connection well before this
			// deadline; reading until then shows whether it did.
			_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
			_, err = io.Copy(io.Discard, conn)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the server kept the connection open for 15 s")
			}
		})
	}
}

func TestOptionsWithDefaults(t *testing.T) {
	got := Options{MaxRequestBytes: 0, Timeouts: Timeouts{Read: 5 * time.Second}}.withDefaults()
	want := Timeouts{ReadHeader: 10 * time.Second, Read: 5 * time.Second, Write: 30 * time.Second, Idle: 90 * time.Second}
	if got.MaxRequestBytes != 64<<20 || got.Timeouts != want {
		t.Fatalf("withDefaults = %d %+v, want %d %+v", got.MaxRequestBytes, got.Timeouts, 64<<20, want)
	}
}
