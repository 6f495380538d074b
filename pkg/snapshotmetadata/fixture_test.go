package snapshotmetadata

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	cbtv1beta1 "github.com/shutter-csi/shutter/client/apis/snapshotmetadataservice/v1beta1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/client/clientset/versioned/fake"
	"github.com/shutter-csi/shutter/pkg/changedblocks"
	pkgcsi "github.com/shutter-csi/shutter/pkg/csi"
	"github.com/shutter-csi/shutter/pkg/protocol"
	"github.com/shutter-csi/shutter/pkg/snapshotmetadata/smtest"
)

const (
	testDriver   = "hostpath.csi.shutter.dev"
	testAudience = "snapshot-metadata.test"
	testNS       = "apps"
	// Tokens the fake TokenReview knows.
	tokenBackup   = "token-backup"    // apps/backup, allowed in apps
	tokenNobody   = "token-nobody"    // apps/nobody, no RBAC
	tokenAudience = "token-other-aud" // apps/backup, but for another audience
	backupUser    = "system:serviceaccount:apps:backup"
)

// fixture is a sidecar served over TLS on loopback in front of a fake driver, with fake API
// clients whose TokenReview and SubjectAccessReview answer as the API server would.
type fixture struct {
	driver    *smtest.Driver
	kube      *kfake.Clientset
	snapshots *fake.Clientset
	svc       *changedblocks.Service
	metrics   *Metrics
	reg       *prometheus.Registry
}

func newFixture(t testing.TB, change ...func(*Options, *smtest.Driver)) *fixture {
	t.Helper()
	f := &fixture{driver: &smtest.Driver{Name: testDriver, Snapshots: map[string]smtest.Snapshot{
		"h-a": {Volume: "vol-1", Capacity: 1 << 30, Allocated: [][2]int64{{0, 4096}, {1 << 20, 8192}, {512 << 20, 65536}}},
		"h-b": {Volume: "vol-1", Capacity: 1 << 30},
		"h-c": {Volume: "vol-2", Capacity: 1 << 30},
	}, Deltas: map[string][][2]int64{"h-a/h-b": {{4096, 4096}, {300 << 20, 65536}, {900 << 20, 1 << 20}}}}}
	certs := smtest.NewCerts(t)
	opts := DefaultOptions()
	opts.TLSCert, opts.TLSKey, opts.MaxStreamDuration = certs.CertFile, certs.KeyFile, time.Minute
	for _, c := range change {
		c(&opts, f.driver)
	}
	smtest.StartDriver(t, f.driver)
	if opts.CSIAddress == DefaultOptions().CSIAddress {
		opts.CSIAddress = f.driver.Socket
	}
	f.kube = kfake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "snap-secret"}, Data: map[string][]byte{"password": []byte("s3cret")},
	})
	f.kube.PrependReactor("create", "tokenreviews", reviewToken)
	f.kube.PrependReactor("create", "subjectaccessreviews", reviewAccess)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.snapshots = fake.NewClientset(append(testSnapshots(),
		&cbtv1beta1.SnapshotMetadataService{ObjectMeta: metav1.ObjectMeta{Name: testDriver},
			Spec: cbtv1beta1.SnapshotMetadataServiceSpec{Audience: testAudience, Address: lis.Addr().String(), CACert: certs.CA}})...)
	ctx, cancel := context.WithCancel(context.Background())
	driver, err := pkgcsi.ConnectMetadata(ctx, pkgcsi.ConnectOptions{Address: opts.CSIAddress, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f.reg = prometheus.NewRegistry()
	f.metrics = NewMetrics(f.reg)
	srv := NewServer(Config{Driver: driver.DriverName(), CSI: driver, Kube: f.kube, Snapshots: f.snapshots,
		ContentsByHandle: f.contentsByHandle, Audience: opts.Audience, MaxStreamDuration: opts.MaxStreamDuration, Metrics: f.metrics})
	opts.Listener = lis
	served := make(chan error, 1)
	go func() { served <- serve(ctx, opts, srv) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		_ = driver.Close()
	})
	if f.svc, err = changedblocks.Dial(ctx, f.snapshots, testDriver); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.svc.Close() })
	return f
}

// contentsByHandle scans the fake clientset's contents, as the informer index would.
func (f *fixture) contentsByHandle(handle string) []*snapshotv1.VolumeSnapshotContent {
	list, _ := f.snapshots.SnapshotV1().VolumeSnapshotContents().List(context.Background(), metav1.ListOptions{})
	var out []*snapshotv1.VolumeSnapshotContent
	for i, c := range list.Items {
		if c.Status != nil && ptr.Deref(c.Status.SnapshotHandle, "") == handle {
			out = append(out, &list.Items[i])
		}
	}
	return out
}

// testSnapshots are apps/{a,b,c,pending,foreign} with their contents: a and b of vol-1, c of
// vol-2, pending not ready, foreign of another driver.
func testSnapshots() []runtime.Object {
	var out []runtime.Object
	add := func(name, handle, volume, driver string, ready bool) {
		content := "content-" + name
		out = append(out,
			&snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
				Spec:   snapshotv1.VolumeSnapshotSpec{VolumeSnapshotClassName: ptr.To("with-secret")},
				Status: &snapshotv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: ptr.To(content), ReadyToUse: ptr.To(ready)}},
			&snapshotv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: content},
				Spec:   snapshotv1.VolumeSnapshotContentSpec{Driver: driver, Source: snapshotv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To(volume)}},
				Status: &snapshotv1.VolumeSnapshotContentStatus{SnapshotHandle: ptr.To(handle), ReadyToUse: ptr.To(ready)}})
	}
	add("a", "h-a", "vol-1", testDriver, true)
	add("b", "h-b", "vol-1", testDriver, true)
	add("c", "h-c", "vol-2", testDriver, true)
	add("pending", "h-p", "vol-1", testDriver, false)
	add("foreign", "h-f", "vol-9", "other.csi.example", true)
	return append(out, &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "with-secret"}, Driver: testDriver,
		Parameters: map[string]string{protocol.ParamSnapshotterSecretName: "snap-secret", protocol.ParamSnapshotterSecretNamespace: "kube-system"}})
}

// reviewToken answers a TokenReview as the API server does: authenticated only when the token
// was issued for one of the requested audiences.
func reviewToken(action k8stesting.Action) (bool, runtime.Object, error) {
	tr := action.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
	issued := map[string]struct {
		user     string
		audience string
	}{tokenBackup: {backupUser, testAudience}, tokenNobody: {"system:serviceaccount:apps:nobody", testAudience},
		tokenAudience: {backupUser, "other"}}[tr.Spec.Token]
	if issued.user != "" && slices.Contains(tr.Spec.Audiences, issued.audience) {
		tr.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{issued.audience},
			User: authnv1.UserInfo{Username: issued.user, Groups: []string{"system:serviceaccounts"}}}
	} else {
		tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
	}
	return true, tr, nil
}

// reviewAccess allows apps/backup to get volumesnapshots in apps, and nothing else.
func reviewAccess(action k8stesting.Action) (bool, runtime.Object, error) {
	sar := action.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview).DeepCopy()
	ra := sar.Spec.ResourceAttributes
	sar.Status.Allowed = sar.Spec.User == backupUser && ra != nil && ra.Namespace == testNS && ra.Verb == "get" &&
		ra.Group == "snapshot.storage.k8s.io" && ra.Resource == "volumesnapshots"
	if !sar.Status.Allowed {
		sar.Status.Reason = "no RBAC policy matched"
	}
	return true, sar, nil
}

// list collects every range of a call.
func (f *fixture) list(t *testing.T, req changedblocks.Request) ([]changedblocks.Batch, error) {
	t.Helper()
	if req.Namespace == "" {
		req.Namespace = testNS
	}
	var out []changedblocks.Batch
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := f.svc.List(ctx, req, func(b changedblocks.Batch) error { out = append(out, b); return nil })
	return out, err
}

func flatten(batches []changedblocks.Batch) [][2]int64 {
	var out [][2]int64
	for _, b := range batches {
		for _, r := range b.Ranges {
			out = append(out, [2]int64{r.Offset, r.Size})
		}
	}
	return out
}

var _ = csi.BlockMetadataType_FIXED_LENGTH
