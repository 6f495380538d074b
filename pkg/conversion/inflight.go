package conversion

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/sync/semaphore"
	"k8s.io/klog/v2"
)

// Defaults of the in-flight bounds. A ConversionReview is held in memory about two and a half
// times over while it is converted (measured: 157 MiB of heap for a 63 MiB review of 29,270
// group contents), so the bytes of the bodies in flight, not only their number, bound the
// webhook's memory: one body of the largest size, or many small ones, at a time.
const (
	DefaultMaxRequestsInFlight = 8
	DefaultMaxBytesInFlight    = DefaultMaxRequestBytes
	// inFlightWait is how long a request waits for its turn before it is answered 429; the API
	// server gives a conversion 30 s.
	inFlightWait = 10 * time.Second
)

// inFlight bounds the conversions served at once by their number and by the bytes of their
// bodies, taken before a body is read: a request waits for its turn (its body unread, held by
// the client) and is answered 429 Too Many Requests when it does not come within wait.
type inFlight struct {
	next     http.Handler
	requests chan struct{}
	bytes    *semaphore.Weighted
	// budget is the bytes in flight at most; maxBody the weight of a body of unknown length.
	budget, maxBody int64
	wait            time.Duration
}

// limitInFlight serves next for at most maxRequests requests with bodies of at most budget bytes
// in all at once; a body of unknown length counts as maxBody (the body limit). A budget below
// maxBody is raised to it, so that a body of the largest size can be served at all.
func limitInFlight(next http.Handler, maxRequests int, budget, maxBody int64, wait time.Duration) http.Handler {
	budget = max(budget, maxBody)
	return &inFlight{next: next, requests: make(chan struct{}, max(maxRequests, 1)),
		bytes: semaphore.NewWeighted(budget), budget: budget, maxBody: maxBody, wait: wait}
}

func (l *inFlight) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	weight := r.ContentLength
	if weight <= 0 || weight > l.maxBody {
		weight = l.maxBody // unknown, or refused with 413 once it is read past the limit
	}
	ctx, cancel := context.WithTimeout(r.Context(), l.wait)
	defer cancel()
	select {
	case l.requests <- struct{}{}:
		defer func() { <-l.requests }()
	case <-ctx.Done():
		l.busy(w, r, "requests")
		return
	}
	if err := l.bytes.Acquire(ctx, weight); err != nil {
		l.busy(w, r, "bytes")
		return
	}
	defer l.bytes.Release(weight)
	l.next.ServeHTTP(w, r)
}

// busy answers a request whose turn did not come.
func (l *inFlight) busy(w http.ResponseWriter, r *http.Request, bound string) {
	klog.FromContext(r.Context()).Info("Too many conversions in flight; answered 429", "bound", bound,
		"maxRequests", cap(l.requests), "maxBytes", l.budget, "contentLength", r.ContentLength)
	w.Header().Set("Retry-After", strconv.Itoa(1))
	http.Error(w, fmt.Sprintf("too many conversions in flight (at most %d requests and %d bytes; --max-requests-inflight, --max-bytes-inflight)",
		cap(l.requests), l.budget), http.StatusTooManyRequests)
}
