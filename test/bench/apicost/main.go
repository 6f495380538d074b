// Command apicost measures what each request of a snapshot's life costs the API server: on a
// local control plane it makes the requests the controller and the sidecar make for one
// snapshot, each kind a few hundred times in a row, and prints the API server's CPU time per
// request of each kind (from /proc/<pid>/stat), beside variants of the same step (a PUT instead
// of a merge patch, fieldValidation=Ignore). CPU time depends far less on the machine's load than
// wall time does; run it a few times and compare the medians. Last, it lists every snapshot and
// content made, in pages as the components' start-up lists do and whole, and prints the API
// server's CPU per listed object: what a restart with many snapshots costs it.
//
//	go run ./test/bench/apicost [-n 400] [-rounds 3] [-lists 20]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/client/clientset/versioned/scheme"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/test/cluster"
	"github.com/shutter-csi/shutter/test/testenv"
)

const namespace = "cost"

// profileDir, when set, receives a CPU profile of the API server per step (first round).
var profileDir string

// lists is how many times each list is made at the end.
var lists int

// profileSeconds is how long each step's profile runs; give the step enough requests to last.
const profileSeconds = 6

// step is one kind of request, made once per object index.
type step struct {
	name string
	do   func(ctx context.Context, i int) error
}

type env struct {
	kube    kubernetes.Interface
	snaps   clientset.Interface
	apiPid  int
	n       int
	round   int
	objects map[string]any
	mu      sync.Mutex
}

func main() {
	n := flag.Int("n", 400, "requests of each kind per round")
	rounds := flag.Int("rounds", 3, "rounds; the median per kind is printed")
	flag.StringVar(&profileDir, "profile-dir", "", "write a CPU profile of the API server's first seconds of each step of the first round here")
	flag.IntVar(&lists, "lists", 20, "lists of all snapshots and of all contents of each kind made at the end (0 skips them)")
	flag.Parse()
	if err := run(context.Background(), *n, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "apicost:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, n, rounds int) error {
	tools, err := testenv.Tools("etcd", "kube-apiserver", "kube-controller-manager")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "shutter-apicost-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c, err := cluster.Start(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), BinDir: tools, Progress: os.Stderr})
	if err != nil {
		return err
	}
	defer c.Stop()
	if err := testenv.ApplyCRDs(ctx, c.Config, testenv.CRDDir()); err != nil {
		return err
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	e := &env{n: n, objects: map[string]any{}}
	e.kube, e.snaps = kubernetes.NewForConfigOrDie(cfg), clientset.NewForConfigOrDie(cfg)
	data, err := os.ReadFile(filepath.Join(c.Dir, "kube-apiserver.pid"))
	if err != nil {
		return err
	}
	if e.apiPid, err = strconv.Atoi(string(bytes.TrimSpace(data))); err != nil {
		return err
	}
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	results := map[string][]float64{}
	var order []string
	for r := range rounds {
		e.round = r
		for _, s := range e.steps() {
			ms, err := e.measure(ctx, s)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			if r == 0 {
				order = append(order, s.name)
			}
			results[s.name] = append(results[s.name], ms)
			fmt.Fprintf(os.Stderr, "apicost: round %d %-60s %6.2f ms/request\n", r+1, s.name, ms)
		}
	}
	fmt.Printf("\nAPI-server CPU per request, median of %d rounds of %d (all rounds)\n", rounds, n)
	for _, name := range order {
		v := slices.Sorted(slices.Values(results[name]))
		fmt.Printf("  %-60s %6.2f ms   %v\n", name, v[len(v)/2], v)
	}
	return e.listCosts(ctx)
}

// listCosts lists every snapshot and every content the rounds made, lists times each, in pages
// of kube.ListPageSize (consistent reads, as the components' start-up lists) and whole from the
// watch cache (resourceVersion 0, client-go's default first list), and prints the API server's
// CPU microseconds per listed object, the median of the lists.
func (e *env) listCosts(ctx context.Context) error {
	if lists <= 0 {
		return nil
	}
	client := e.snaps.SnapshotV1().RESTClient()
	fmt.Printf("\nAPI-server CPU per listed object, median of %d lists (all lists)\n", lists)
	for _, resource := range []string{"volumesnapshots", "volumesnapshotcontents"} {
		for _, v := range []struct {
			name string
			opts metav1.ListOptions
		}{
			{"in pages of 500", metav1.ListOptions{Limit: kube.ListPageSize}},
			{"whole, resourceVersion 0", metav1.ListOptions{ResourceVersion: "0"}},
		} {
			var perObject []float64
			var objects int
			for range lists {
				before, err := cpuSeconds(e.apiPid)
				if err != nil {
					return err
				}
				if objects, err = listAll(ctx, client, resource, v.opts); err != nil {
					return fmt.Errorf("list %s %s: %w", resource, v.name, err)
				}
				after, err := cpuSeconds(e.apiPid)
				if err != nil {
					return err
				}
				perObject = append(perObject, math.Round(1e6*(after-before)/float64(objects)))
			}
			slices.Sort(perObject)
			fmt.Printf("  %-60s %6.0f µs   %v\n", fmt.Sprintf("list %d %s %s", objects, resource, v.name), perObject[len(perObject)/2], perObject)
		}
	}
	return nil
}

// listAll lists resource with opts, following continue tokens, and returns the number of objects.
func listAll(ctx context.Context, client rest.Interface, resource string, opts metav1.ListOptions) (int, error) {
	n := 0
	for {
		raw, err := client.Get().Resource(resource).VersionedParams(&opts, scheme.ParameterCodec).
			SetHeader("Accept", "application/json").Do(ctx).Raw()
		if err != nil {
			return 0, err
		}
		var page struct {
			Metadata metav1.ListMeta `json:"metadata"`
			Items    []struct{}      `json:"items"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return 0, err
		}
		n += len(page.Items)
		if opts.Continue = page.Metadata.Continue; opts.Continue == "" {
			return n, nil
		}
		opts.ResourceVersion = ""
	}
}

// measure makes n requests of the step, 16 at a time, and returns the API server's CPU
// milliseconds per request.
func (e *env) measure(ctx context.Context, s step) (float64, error) {
	if profileDir != "" && e.round == 0 {
		done := e.profile(ctx, s.name)
		defer done()
	}
	before, err := cpuSeconds(e.apiPid)
	if err != nil {
		return 0, err
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for i := range e.n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := s.do(ctx, i); err != nil {
				once.Do(func() { firstErr = err })
			}
		})
	}
	wg.Wait()
	time.Sleep(500 * time.Millisecond) // watch fan-out of the last requests
	after, err := cpuSeconds(e.apiPid)
	return 1000 * (after - before) / float64(e.n), firstErr
}

// profile fetches a CPU profile of the API server into profileDir while the step runs; the
// returned function waits for it.
func (e *env) profile(ctx context.Context, name string) func() {
	var wg sync.WaitGroup
	wg.Go(func() {
		raw, err := e.kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(profileSeconds)).DoRaw(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "apicost: profile of %s: %v\n", name, err)
			return
		}
		file := strings.NewReplacer(" ", "-", "(", "", ")", "", ",", "", "=", "-", ":", "").Replace(name) + ".pprof"
		_ = os.WriteFile(filepath.Join(profileDir, file), raw, 0o644)
	})
	return wg.Wait
}

func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100, nil
}

func (e *env) name(kind string, i int) string { return fmt.Sprintf("%s-r%d-%05d", kind, e.round, i) }

func (e *env) put(key string, obj any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.objects[key] = obj
}

func (e *env) get(key string) any {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.objects[key]
}

var size = resource.MustParse("1Mi")

func patch(data string) []byte { return []byte(data) }

func strictIgnore() metav1.PatchOptions { return metav1.PatchOptions{FieldValidation: "Ignore"} }

// steps are the requests of one snapshot's creation in the order the components make them, and
// the variants measured beside them.
func (e *env) steps() []step {
	vs := e.snaps.SnapshotV1().VolumeSnapshots(namespace)
	vsc := e.snaps.SnapshotV1().VolumeSnapshotContents()
	claims := e.kube.CoreV1().PersistentVolumeClaims(namespace)
	fin := `{"metadata":{"resourceVersion":%q,"finalizers":["snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection","snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"]},"spec":{"volumeSnapshotClassName":"shutter-hostpath"}}`
	return []step{
		{"create persistentvolumeclaim (setup)", func(ctx context.Context, i int) error {
			_, err := claims.Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: e.name("claim", i)},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}}}}, metav1.CreateOptions{})
			return err
		}},
		{"create volumesnapshot (user)", func(ctx context.Context, i int) error {
			out, err := vs.Create(ctx, &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: e.name("snap", i)},
				Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To(e.name("claim", i))}}}, metav1.CreateOptions{})
			e.put(e.name("snap", i), out)
			return err
		}},
		{"merge-patch volumesnapshot finalizers+class (controller)", func(ctx context.Context, i int) error {
			cur := e.get(e.name("snap", i)).(*snapshotv1.VolumeSnapshot)
			out, err := vs.Patch(ctx, cur.Name, types.MergePatchType, patch(fmt.Sprintf(fin, cur.ResourceVersion)), metav1.PatchOptions{})
			e.put(cur.Name, out)
			return err
		}},
		{"merge-patch persistentvolumeclaim finalizer on (controller)", e.claimPatch(true, metav1.PatchOptions{})},
		{"create volumesnapshotcontent (controller)", func(ctx context.Context, i int) error {
			out, err := vsc.Create(ctx, e.content(i), metav1.CreateOptions{})
			e.put(e.name("content", i), out)
			return err
		}},
		{"merge-patch content being-created on (sidecar)", e.contentAnnotation(true, metav1.PatchOptions{})},
		{"merge-patch content status (sidecar)", e.contentStatus(false)},
		{"merge-patch content being-created off (sidecar)", e.contentAnnotation(false, metav1.PatchOptions{})},
		{"put volumesnapshot status (controller)", e.snapshotStatus()},
		{"merge-patch persistentvolumeclaim finalizer off (controller)", e.claimPatch(false, metav1.PatchOptions{})},
		// Variants, on the same objects.
		{"variant: merge-patch content being-created on, fieldValidation=Ignore", e.contentAnnotation(true, strictIgnore())},
		{"variant: merge-patch content being-created off, fieldValidation=Ignore", e.contentAnnotation(false, strictIgnore())},
		{"variant: put content status", e.contentStatus(true)},
		{"variant: put content annotation on (update)", e.contentUpdate(true)},
		{"variant: put content annotation off (update)", e.contentUpdate(false)},
		{"variant: merge-patch claim finalizer on, fieldValidation=Ignore", e.claimPatch(true, strictIgnore())},
		{"variant: merge-patch claim finalizer off, fieldValidation=Ignore", e.claimPatch(false, strictIgnore())},
	}
}
