package conversion

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// blocking is a handler that reports each request it serves on started and answers once release
// is closed.
type blocking struct {
	started chan int64
	release chan struct{}
}

func (b *blocking) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.started <- r.ContentLength
	<-b.release
	w.WriteHeader(http.StatusOK)
}

// serve sends a request with a body of size bytes through h, in the background; its code arrives
// on the returned channel.
func serve(h http.Handler, size int) <-chan int {
	code := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, ConvertPath, bytes.NewReader(make([]byte, size))))
		code <- rec.Code
	}()
	return code
}

// TestInFlightBounds: conversions beyond the number or the bytes in flight wait their turn and are
// answered 429 when it does not come; small bodies pass while a large one is served, as long as
// the bytes allow. Before, any number of 64 MiB bodies were read and converted at once.
func TestInFlightBounds(t *testing.T) {
	const wait = 200 * time.Millisecond // the bound under test: how long a request waits
	for _, tc := range []struct {
		name          string
		requests      int
		budget        int64
		held          []int // bodies being served
		next          int   // the body that arrives then
		wantServed    bool
		wantRetryText string
	}{
		{name: "number bound", requests: 2, budget: 1000, held: []int{10, 10}, next: 10, wantRetryText: "at most 2 requests"},
		{name: "byte bound", requests: 8, budget: 1000, held: []int{600}, next: 600, wantRetryText: "1000 bytes"},
		{name: "small body beside a large one", requests: 8, budget: 1000, held: []int{600}, next: 300, wantServed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &blocking{started: make(chan int64, 10), release: make(chan struct{})}
			h := limitInFlight(b, tc.requests, tc.budget, 1000, wait)
			var held []<-chan int
			for _, size := range tc.held {
				held = append(held, serve(h, size))
				<-b.started
			}
			if tc.wantServed {
				held = append(held, serve(h, tc.next))
				if got := <-b.started; got != int64(tc.next) {
					t.Fatalf("served a body of %d bytes, want %d", got, tc.next)
				}
			} else {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, ConvertPath, bytes.NewReader(make([]byte, tc.next))))
				if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" || !strings.Contains(rec.Body.String(), tc.wantRetryText) {
					t.Errorf("code %d, Retry-After %q, body %q; want 429 naming %q", rec.Code, rec.Header().Get("Retry-After"), rec.Body.String(), tc.wantRetryText)
				}
			}
			close(b.release)
			for _, c := range held {
				if code := <-c; code != http.StatusOK {
					t.Errorf("a request was answered %d", code)
				}
			}
		})
	}
}

// TestInFlightUnknownLength: a body of unknown length counts as the largest body.
func TestInFlightUnknownLength(t *testing.T) {
	b := &blocking{started: make(chan int64, 10), release: make(chan struct{})}
	h := limitInFlight(b, 8, 1000, 1000, 200*time.Millisecond)
	held := serve(h, 10)
	<-b.started
	r := httptest.NewRequest(http.MethodPost, ConvertPath, strings.NewReader("{}"))
	r.ContentLength = -1
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusTooManyRequests {
		t.Errorf("a body of unknown length beside 10 bytes of 1000: code %d, want 429", rec.Code)
	}
	close(b.release)
	<-held
}

// unreadable fails the test that reads it.
type unreadable struct{ t *testing.T }

func (u unreadable) Read([]byte) (int, error) {
	u.t.Error("a body announced over the limit was read")
	return 0, io.EOF
}

// TestOversizedContentLengthNotRead: a body whose Content-Length is over the limit is answered 413
// before any of it is read or counted in flight.
func TestOversizedContentLengthNotRead(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, ConvertPath, unreadable{t})
	r.ContentLength = 4097
	rec := httptest.NewRecorder()
	LimitedHandler(4096).ServeHTTP(rec, r)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("code %d, want 413", rec.Code)
	}
}
