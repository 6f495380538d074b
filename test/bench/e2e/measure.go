package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// clockTicks is the kernel's USER_HZ, the unit of utime and stime in /proc/<pid>/stat; it is 100
// on every Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds is the user plus system CPU time a process has used, from /proc/<pid>/stat.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces; the fields follow the last ')'.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	utime, err1 := strconv.ParseUint(fields[11], 10, 64)
	stime, err2 := strconv.ParseUint(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	return float64(utime+stime) / clockTicks, nil
}

// memoryMiB reads a kB field such as VmHWM (peak RSS) or VmRSS from /proc/<pid>/status.
func memoryMiB(pid int, field string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// resetPeakRSS sets a process's VmHWM back to its current RSS (Linux 4.0 and later), so that a
// phase's peak is its own.
func resetPeakRSS(pid int) {
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// loadAverage is the first field of /proc/loadavg, the one-minute load.
func loadAverage() float64 {
	data, _ := os.ReadFile("/proc/loadavg")
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(fields[0], 64)
	return v
}

// requestTotals are the API server's apiserver_request_total counters by "VERB resource[/sub] code".
type requestTotals map[string]float64

// scrapeRequests reads apiserver_request_total from the API server's /metrics.
func scrapeRequests(ctx context.Context, kube kubernetes.Interface) (requestTotals, error) {
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET /metrics: %w", err)
	}
	out := requestTotals{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "apiserver_request_total{")
		if !ok {
			continue
		}
		labelText, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		labels := parseLabels(labelText)
		v, _ := strconv.ParseFloat(value, 64)
		resource := labels["resource"]
		if labels["subresource"] != "" {
			resource += "/" + labels["subresource"]
		}
		out[labels["verb"]+" "+resource+" "+labels["code"]] += v
	}
	return out, sc.Err()
}

// parseLabels splits `a="x",b="y"`; label values in apiserver_request_total hold no quotes.
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

// since returns the counters that grew since before.
func (t requestTotals) since(before requestTotals) requestTotals {
	out := requestTotals{}
	for k, v := range t {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// auditEvent is the part of a kube-apiserver audit event (JSON lines, Metadata level) counted.
type auditEvent struct {
	Stage          string    `json:"stage"`
	Verb           string    `json:"verb"`
	RequestURI     string    `json:"requestURI"`
	UserAgent      string    `json:"userAgent"`
	StageTimestamp time.Time `json:"stageTimestamp"`
	User           struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// resource is "resource[/subresource]", or the path of a non-resource request.
func (e *auditEvent) resource() string {
	if e.ObjectRef == nil {
		path, _, _ := strings.Cut(e.RequestURI, "?")
		return path
	}
	if e.ObjectRef.Subresource != "" {
		return e.ObjectRef.Resource + "/" + e.ObjectRef.Subresource
	}
	return e.ObjectRef.Resource
}

// auditLog reads the API server's audit log from a remembered position.
type auditLog struct {
	path string
}

// size is the log's current length, the position to read from later.
func (a auditLog) size() int64 {
	fi, err := os.Stat(a.path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// read calls fn for every completed request logged from offset on.
func (a auditLog) read(offset int64, fn func(*auditEvent)) error {
	f, err := os.Open(a.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			var e auditEvent
			if json.Unmarshal(line, &e) == nil && (e.Stage == "ResponseComplete" || e.Stage == "Panic") {
				fn(&e)
			}
		}
		if err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// auditPolicy logs every request at Metadata level once, when it completes.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
`
