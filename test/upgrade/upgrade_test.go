// Package upgrade applies Shutter's CRDs over CRDs laid out like the public ones, on a control
// plane of its own (it replaces CRDs cluster-wide), and checks that the API server takes the
// update and that objects stored before it read back correctly through every served version.
//
// The stages: testdata/stage1 is an older public release (v1beta1 stored), testdata/stage2 the
// current public layout (group kinds: v1beta1 deprecated, v1beta2 stored, v1; snapshot kinds: v1
// stored, v1beta1 not served), then Shutter's generated CRDs with the conversion webhook running
// in this process on a loopback HTTPS port.
package upgrade

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	"github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/conversion"
	"github.com/shutter-csi/shutter/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	group = conversion.GroupSnapshotGroup
	// legacyNanos is the v1beta1 creationTime of the legacy content: a whole second and a fraction.
	legacyNanos int64 = 1714557600123456789
)

var (
	contents = schema.GroupVersionResource{Group: group, Resource: "volumegroupsnapshotcontents"}
	groups   = schema.GroupVersionResource{Group: group, Resource: "volumegroupsnapshots"}
	classes  = schema.GroupVersionResource{Group: group, Resource: "volumegroupsnapshotclasses"}
	snapVSC  = schema.GroupVersionResource{Group: conversion.SnapshotGroup, Resource: "volumesnapshotcontents"}
)

func at(gvr schema.GroupVersionResource, version string) schema.GroupVersionResource {
	gvr.Version = version
	return gvr
}

func TestUpgradeOverPublicCRDs(t *testing.T) {
	env := testenv.StartDedicated(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	warnings := &warningRecorder{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = warnings
	dyn := dynamic.NewForConfigOrDie(cfg)
	ns := "upgrade"
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx,
		object("v1", "Namespace", ns, "", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Stage 1: an older public release stores v1beta1.
	applyDir(ctx, t, env.Config, filepath.Join("testdata", "stage1"))
	createLegacyObjects(ctx, t, dyn, ns)

	// Stage 2: the current public layout stores v1beta2 for groups and v1 for snapshots.
	applyDir(ctx, t, env.Config, filepath.Join("testdata", "stage2"))
	createBeta2Content(ctx, t, dyn)

	// Stage 3: Shutter's CRDs, converting through the webhook.
	wh := startWebhook(ctx, t)
	applyDir(ctx, t, env.Config, shutterCRDs(t, wh.url, wh.caBundle))

	checkStoredVersions(ctx, t, env.Config)
	checkPointCRDs(ctx, t, env.Config, wh)
	checkLegacyContent(ctx, t, env.Config, dyn)
	checkBeta2Content(ctx, t, env.Config, dyn)
	checkOtherKinds(ctx, t, env.Config, dyn, ns)
	if !warnings.saw("groupsnapshot.storage.k8s.io/v1beta1 VolumeGroupSnapshotContent is deprecated") {
		t.Errorf("no deprecation warning for v1beta1 reads; warnings: %v", warnings.all())
	}
}

func applyDir(ctx context.Context, t *testing.T, cfg *rest.Config, dir string) {
	t.Helper()
	if err := testenv.ApplyCRDs(ctx, cfg, dir); err != nil {
		t.Fatalf("apply CRDs from %s: %v", dir, err)
	}
}

// createLegacyObjects stores v1beta1 objects: a group content whose status holds handle pairs and
// a Unix-nanosecond creationTime, a group snapshot, a class and a snapshot content.
func createLegacyObjects(ctx context.Context, t *testing.T, dyn dynamic.Interface, ns string) {
	t.Helper()
	content := object(group+"/v1beta1", "VolumeGroupSnapshotContent", "legacy-content", "", map[string]any{
		"spec": contentSpec("legacy", ns),
	})
	created := create(ctx, t, dyn, at(contents, "v1beta1"), "", content)
	created.Object["status"] = map[string]any{
		"volumeGroupSnapshotHandle": "group-legacy",
		"creationTime":              legacyNanos,
		"readyToUse":                true,
		"volumeSnapshotHandlePairList": []any{
			map[string]any{"volumeHandle": "vol-a", "snapshotHandle": "snap-a"},
			map[string]any{"volumeHandle": "vol-b", "snapshotHandle": "snap-b"},
		},
	}
	if _, err := dyn.Resource(at(contents, "v1beta1")).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("v1beta1 content status: %v", err)
	}
	create(ctx, t, dyn, at(groups, "v1beta1"), ns, object(group+"/v1beta1", "VolumeGroupSnapshot", "legacy", ns, map[string]any{
		"spec": map[string]any{"volumeGroupSnapshotClassName": "legacy-class",
			"source": map[string]any{"volumeGroupSnapshotContentName": "legacy-content"}},
	}))
	create(ctx, t, dyn, at(classes, "v1beta1"), "", object(group+"/v1beta1", "VolumeGroupSnapshotClass", "legacy-class", "", map[string]any{
		"driver": "hostpath.csi.shutter.dev", "deletionPolicy": "Retain", "parameters": map[string]any{"tier": "gold"},
	}))
	create(ctx, t, dyn, at(snapVSC, "v1beta1"), "", object(conversion.SnapshotGroup+"/v1beta1", "VolumeSnapshotContent", "legacy-snapcontent", "", map[string]any{
		"spec": map[string]any{"deletionPolicy": "Retain", "driver": "hostpath.csi.shutter.dev",
			"source":            map[string]any{"snapshotHandle": "snap-x"},
			"volumeSnapshotRef": map[string]any{"name": "x", "namespace": ns}},
	}))
}

// createBeta2Content stores a v1beta2 group content with a full info list.
func createBeta2Content(ctx context.Context, t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	created := create(ctx, t, dyn, at(contents, "v1beta2"), "", object(group+"/v1beta2", "VolumeGroupSnapshotContent", "beta2-content", "", map[string]any{
		"spec": contentSpec("beta2", "upgrade"),
	}))
	created.Object["status"] = map[string]any{
		"creationTime": "2024-05-01T10:00:00Z",
		"readyToUse":   true,
		"volumeSnapshotInfoList": []any{map[string]any{
			"volumeHandle": "vol-c", "snapshotHandle": "snap-c",
			"creationTime": int64(1714557600000000000), "readyToUse": true, "restoreSize": int64(1 << 30),
		}},
	}
	if _, err := dyn.Resource(at(contents, "v1beta2")).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("v1beta2 content status: %v", err)
	}
}

func checkStoredVersions(ctx context.Context, t *testing.T, cfg *rest.Config) {
	t.Helper()
	cs := apiextensions.NewForConfigOrDie(cfg)
	want := map[string][]string{
		"volumegroupsnapshotcontents.groupsnapshot.storage.k8s.io": {"v1beta1", "v1beta2"},
		"volumegroupsnapshots.groupsnapshot.storage.k8s.io":        {"v1beta1", "v1beta2"},
		"volumegroupsnapshotclasses.groupsnapshot.storage.k8s.io":  {"v1beta1", "v1beta2"},
		"volumesnapshotcontents.snapshot.storage.k8s.io":           {"v1beta1", "v1"},
	}
	for name, versions := range want {
		crd, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(crd.Status.StoredVersions, versions) {
			t.Errorf("%s: storedVersions %v, want %v", name, crd.Status.StoredVersions, versions)
		}
		if crd.Spec.Conversion == nil || (crd.Spec.Group == group) != (crd.Spec.Conversion.Strategy == "Webhook") {
			t.Errorf("%s: conversion %+v", name, crd.Spec.Conversion)
		}
	}
}

// checkPointCRDs applies the webhook's conversion settings as the chart's webhook does (server-side
// apply of spec.conversion alone) over CRDs applied with strategy None, and expects Webhook again.
func checkPointCRDs(ctx context.Context, t *testing.T, cfg *rest.Config, wh webhook) {
	t.Helper()
	cs := apiextensions.NewForConfigOrDie(cfg)
	names := []string{"volumegroupsnapshotcontents." + group, "volumegroupsnapshots." + group, "volumegroupsnapshotclasses." + group}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, wh.caBundle, 0o600); err != nil {
		t.Fatal(err)
	}
	applyDir(ctx, t, cfg, testenv.CRDDir())
	opts := conversion.CRDOptions{Names: names, URL: wh.url, CABundleFile: caFile}
	if err := conversion.PointCRDs(ctx, cs, opts); err != nil {
		t.Fatalf("PointCRDs: %v", err)
	}
	for _, name := range names {
		crd, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := crd.Spec.Conversion; c.Strategy != "Webhook" || ptr.Deref(c.Webhook.ClientConfig.URL, "") != wh.url {
			t.Errorf("%s: conversion %+v after PointCRDs", name, c)
		}
	}
}

// checkLegacyContent reads the v1beta1-stored content through v1 (typed, as the controller does)
// and v1beta1, writes its status through v1, and reads both again.
func checkLegacyContent(ctx context.Context, t *testing.T, cfg *rest.Config, dyn dynamic.Interface) {
	t.Helper()
	cs := versioned.NewForConfigOrDie(cfg)
	c, err := cs.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(ctx, "legacy-content", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("v1 read of the v1beta1 content: %v", err)
	}
	wantInfos := []groupv1.VolumeSnapshotInfo{
		{VolumeHandle: "vol-a", SnapshotHandle: "snap-a"},
		{VolumeHandle: "vol-b", SnapshotHandle: "snap-b"},
	}
	if c.Status == nil || !reflect.DeepEqual(c.Status.VolumeSnapshotInfoList, wantInfos) {
		t.Fatalf("v1 status %+v, want info list %+v", c.Status, wantInfos)
	}
	if got := c.Status.CreationTime; got == nil || !got.Time.Equal(time.Unix(0, legacyNanos)) {
		t.Errorf("v1 creationTime %v, want %v", got, time.Unix(0, legacyNanos).UTC())
	}
	if ptr.Deref(c.Status.VolumeGroupSnapshotHandle, "") != "group-legacy" || !ptr.Deref(c.Status.ReadyToUse, false) {
		t.Errorf("v1 status lost fields: %+v", c.Status)
	}
	checkV1beta1Pairs(ctx, t, dyn, "legacy-content", legacyNanos, nil)

	// The controller's next status write goes through v1 and stores v1beta2 with more per member.
	c.Status.VolumeSnapshotInfoList[0].RestoreSize = ptr.To(int64(4096))
	if _, err := cs.GroupsnapshotV1().VolumeGroupSnapshotContents().UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("v1 status write: %v", err)
	}
	again, err := cs.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(ctx, "legacy-content", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := again.Status.VolumeSnapshotInfoList[0].RestoreSize; ptr.Deref(got, 0) != 4096 {
		t.Errorf("v1 restoreSize after the write: %v", got)
	}
	// Typed clients write metav1.Time in whole seconds, so the fraction is gone now.
	checkV1beta1Pairs(ctx, t, dyn, "legacy-content", legacyNanos/1e9*1e9, []any{
		map[string]any{"volumeHandle": "vol-a", "snapshotHandle": "snap-a", "restoreSize": int64(4096)},
		map[string]any{"volumeHandle": "vol-b", "snapshotHandle": "snap-b"},
	})
}

// checkV1beta1Pairs reads a content through v1beta1 and expects the legacy pairs, creationTime in
// Unix nanoseconds, and the saved info list when savedInfos is not nil.
func checkV1beta1Pairs(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string, nanos int64, savedInfos []any) {
	t.Helper()
	u, err := dyn.Resource(at(contents, "v1beta1")).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("v1beta1 read: %v", err)
	}
	if got, _, _ := unstructured.NestedInt64(u.Object, "status", "creationTime"); got != nanos {
		t.Errorf("%s v1beta1 creationTime %d, want %d", name, got, nanos)
	}
	pairs, _, _ := unstructured.NestedSlice(u.Object, "status", "volumeSnapshotHandlePairList")
	if len(pairs) == 0 {
		t.Errorf("%s v1beta1 has no pair list: %v", name, u.Object["status"])
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "volumeSnapshotInfoList"); found {
		t.Errorf("%s v1beta1 still has an info list", name)
	}
	saved, found := u.GetAnnotations()[conversion.InfoListAnnotation]
	if (savedInfos != nil) != found {
		t.Fatalf("%s v1beta1 saved info list %q, want one: %v", name, saved, savedInfos != nil)
	}
	if found {
		var got []any
		if err := yaml.Unmarshal([]byte(saved), &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(jsonNumbers(got), jsonNumbers(savedInfos)) {
			t.Errorf("%s saved info list %v, want %v", name, got, savedInfos)
		}
	}
}

func checkBeta2Content(ctx context.Context, t *testing.T, cfg *rest.Config, dyn dynamic.Interface) {
	t.Helper()
	c, err := versioned.NewForConfigOrDie(cfg).GroupsnapshotV1().VolumeGroupSnapshotContents().Get(ctx, "beta2-content", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if infos := c.Status.VolumeSnapshotInfoList; len(infos) != 1 || ptr.Deref(infos[0].RestoreSize, 0) != 1<<30 {
		t.Errorf("v1 read of the v1beta2 content: %+v", c.Status)
	}
	checkV1beta1Pairs(ctx, t, dyn, "beta2-content", 1714557600000000000, []any{map[string]any{
		"volumeHandle": "vol-c", "snapshotHandle": "snap-c",
		"creationTime": int64(1714557600000000000), "readyToUse": true, "restoreSize": int64(1 << 30),
	}})
}

func checkOtherKinds(ctx context.Context, t *testing.T, cfg *rest.Config, dyn dynamic.Interface, ns string) {
	t.Helper()
	cs := versioned.NewForConfigOrDie(cfg)
	g, err := cs.GroupsnapshotV1().VolumeGroupSnapshots(ns).Get(ctx, "legacy", metav1.GetOptions{})
	if err != nil || ptr.Deref(g.Spec.Source.VolumeGroupSnapshotContentName, "") != "legacy-content" {
		t.Errorf("v1 read of the v1beta1 group snapshot: %v %+v", err, g)
	}
	k, err := cs.GroupsnapshotV1().VolumeGroupSnapshotClasses().Get(ctx, "legacy-class", metav1.GetOptions{})
	if err != nil || k.Parameters["tier"] != "gold" || k.DeletionPolicy != "Retain" {
		t.Errorf("v1 read of the v1beta1 class: %v %+v", err, k)
	}
	if _, err := dyn.Resource(at(groups, "v1beta1")).Namespace(ns).Get(ctx, "legacy", metav1.GetOptions{}); err != nil {
		t.Errorf("v1beta1 read of the group snapshot: %v", err)
	}
	s, err := cs.SnapshotV1().VolumeSnapshotContents().Get(ctx, "legacy-snapcontent", metav1.GetOptions{})
	if err != nil || ptr.Deref(s.Spec.Source.SnapshotHandle, "") != "snap-x" {
		t.Errorf("v1 read of the v1beta1 snapshot content: %v %+v", err, s)
	}
	if _, err := dyn.Resource(at(snapVSC, "v1beta1")).Get(ctx, "legacy-snapcontent", metav1.GetOptions{}); err == nil {
		t.Error("snapshot.storage.k8s.io/v1beta1 is still served")
	}
}

type webhook struct {
	url      string
	caBundle []byte
}

// startWebhook serves conversions on a loopback port with a fresh test CA until ctx is done.
func startWebhook(ctx context.Context, t *testing.T) webhook {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for file, data := range map[string][]byte{certFile: certPEM, keyFile: keyPEM} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- conversion.Serve(ctx, ln, conversion.Options{CertFile: certFile, KeyFile: keyFile}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("webhook: %v", err)
		}
	})
	// The generated bundle holds the serving certificate and the CA that signed it.
	return webhook{url: "https://" + ln.Addr().String() + conversion.ConvertPath, caBundle: certPEM}
}

// shutterCRDs writes the generated CRDs, with the group CRDs converting through the webhook at
// url, into a temporary folder.
func shutterCRDs(t *testing.T, url string, caBundle []byte) string {
	t.Helper()
	// The six kinds of the public snapshot API; Shutter's own kinds (snapshot.shutter.dev) and
	// the changed block tracking API (cbt.storage.k8s.io, one version) are not part of the upgrade.
	files, err := filepath.Glob(filepath.Join(testenv.CRDDir(), "*snapshot.storage.k8s.io_*.yaml"))
	if err != nil || len(files) != 6 {
		t.Fatalf("generated CRDs: %v %v", files, err)
	}
	dir := t.TempDir()
	conv := conversion.WebhookConversion(conversion.CRDOptions{URL: url}, caBundle)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := map[string]any{}
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(filepath.Base(f), group) {
			crd["spec"].(map[string]any)["conversion"] = conv
		}
		out, err := yaml.Marshal(crd)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func object(apiVersion, kind, name, namespace string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind}}
	for k, v := range fields {
		u.Object[k] = v
	}
	u.SetName(name)
	u.SetNamespace(namespace)
	return u
}

func contentSpec(groupName, ns string) map[string]any {
	return map[string]any{
		"deletionPolicy": "Retain", "driver": "hostpath.csi.shutter.dev",
		"source":                 map[string]any{"volumeHandles": []any{"vol-a", "vol-b"}},
		"volumeGroupSnapshotRef": map[string]any{"name": groupName, "namespace": ns},
	}
}

func create(ctx context.Context, t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns string, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	out, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s %s: %v", gvr, u.GetName(), err)
	}
	return out
}

// jsonNumbers makes integers comparable whichever decoder produced them.
func jsonNumbers(v any) any {
	data, _ := yaml.Marshal(v)
	var out any
	_ = yaml.Unmarshal(data, &out)
	return out
}

// warningRecorder keeps the API server's warning headers.
type warningRecorder struct {
	mu       sync.Mutex
	messages []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, message string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.messages = append(w.messages, message)
}

func (w *warningRecorder) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.messages...)
}

func (w *warningRecorder) saw(prefix string) bool {
	for _, m := range w.all() {
		if strings.HasPrefix(m, prefix) {
			return true
		}
	}
	return false
}
