package controller

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
)

// request is one counted request of the controller: "VERB resource[/subresource]" (with the
// status code when it failed) and the namespace and name of the object it touched.
type request struct{ key, namespace, name string }

// writeCounter logs the controller's API writes and single-object GETs. Events are logged by
// countingRecorder when the controller records them, since their POSTs are sent later.
type writeCounter struct {
	mu  sync.Mutex
	log []request
}

func (w *writeCounter) add(r request) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = append(w.log, r)
}

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		p := parsePath(req.URL.Path)
		switch {
		case req.Method == http.MethodGet:
			if p.name != "" && req.URL.Query().Get("watch") == "" {
				w.add(request{key: "GET " + p.resource, namespace: p.namespace, name: p.name})
			}
		case p.resource != "events":
			r := request{key: req.Method + " " + p.resource, namespace: p.namespace, name: p.name}
			if err != nil || resp.StatusCode >= 300 {
				r.key += fmt.Sprintf(" (failed %d)", statusOf(resp))
			} else if r.name == "" {
				r.namespace, r.name = createdObject(resp)
			}
			w.add(r)
		}
		return resp, err
	})
}

// mark is where the log ends now.
func (w *writeCounter) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.log)
}

// since counts the requests after mark that touched objects for which mine holds, by key, and
// returns their total.
func (w *writeCounter) since(mark int, mine func(namespace, name string) bool) (map[string]int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	counts, total := map[string]int{}, 0
	for _, r := range w.log[mark:] {
		if mine(r.namespace, r.name) {
			counts[r.key]++
			total++
		}
	}
	return counts, total
}

// countingRecorder logs each event as the controller records it, as a write of the object it
// is about.
type countingRecorder struct {
	record.EventRecorder
	writes *writeCounter
}

func (c countingRecorder) count(obj runtime.Object) {
	if m, err := meta.Accessor(obj); err == nil {
		c.writes.add(request{key: "POST events", namespace: m.GetNamespace(), name: m.GetName()})
	}
}

func (c countingRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	c.count(obj)
	c.EventRecorder.Event(obj, eventtype, reason, message)
}

func (c countingRecorder) Eventf(obj runtime.Object, eventtype, reason, format string, args ...any) {
	c.count(obj)
	c.EventRecorder.Eventf(obj, eventtype, reason, format, args...)
}

func (c countingRecorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, format string, args ...any) {
	c.count(obj)
	c.EventRecorder.AnnotatedEventf(obj, annotations, eventtype, reason, format, args...)
}

// createdObject reads the namespace and name of the object a create answered with, and leaves
// the body readable.
func createdObject(resp *http.Response) (string, string) {
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var obj struct {
		Metadata struct{ Namespace, Name string } `json:"metadata"`
	}
	if err != nil || json.Unmarshal(body, &obj) != nil {
		return "", ""
	}
	return obj.Metadata.Namespace, obj.Metadata.Name
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// apiPath is a request path taken apart: /api/v1 or /apis/group/version, then
// [namespaces/<namespace>/]<resource>[/<name>[/<subresource>]]. resource carries the
// subresource: "volumesnapshots/status".
type apiPath struct{ namespace, resource, name string }

func parsePath(path string) apiPath {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3:
		parts = parts[3:]
	default:
		return apiPath{}
	}
	var p apiPath
	if len(parts) > 2 && parts[0] == "namespaces" {
		p.namespace, parts = parts[1], parts[2:]
	}
	switch len(parts) {
	case 0:
	case 1:
		p.resource = parts[0]
	case 2:
		p.resource, p.name = parts[0], parts[1]
	default:
		p.resource, p.name = parts[0]+"/"+parts[2], parts[1]
	}
	return p
}

// resourceOf turns /apis/g/v/namespaces/ns/res/name/sub into "res/sub".
func resourceOf(path string) string { return parsePath(path).resource }

func statusOf(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

func format(counts map[string]int) string {
	var keys []string
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, counts[k])
	}
	return strings.TrimSpace(b.String())
}
