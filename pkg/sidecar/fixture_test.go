package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/client/clientset/versioned/fake"
	grouplisters "github.com/shutter-csi/shutter/client/listers/volumegroupsnapshot/v1"
	listers "github.com/shutter-csi/shutter/client/listers/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/csi/csitest"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

const (
	testDriver = "test.csi.shutter.dev"
	testUID    = types.UID("6b1c9a3e-27d4-4f0e-9c8a-1f2e3d4c5b6a")
	testClass  = "fast"
)

// fixture is a reconciler of one kind on fake clients and a fake driver. Its listers are fed
// from indexers the test controls: they stay stale unless the test calls catchUp.
type fixture struct {
	client   *fake.Clientset
	kube     *kubefake.Clientset
	csi      *csitest.Fake
	recorder *record.FakeRecorder
	indexer  cache.Indexer
	content  *reconciler[content]
	group    *reconciler[groupContent]
}

func newFixture(t *testing.T, cfg config, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{csi: csitest.NewFake(testDriver), recorder: record.NewFakeRecorder(100), kube: kubefake.NewClientset()}
	var snapObjs []runtime.Object
	f.indexer = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	classes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Secret:
			if _, err := f.kube.CoreV1().Secrets(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case *snapshotv1.VolumeSnapshotClass, *groupv1.VolumeGroupSnapshotClass:
			_ = classes.Add(o)
		default:
			_ = f.indexer.Add(o)
			snapObjs = append(snapObjs, o)
		}
	}
	f.client = fake.NewClientset(snapObjs...)
	f.client.PrependReactor("patch", "*", mergePatchReactor(f.client.Tracker()))
	if cfg.driver == "" {
		cfg.driver = testDriver
	}
	if cfg.namePrefix == "" {
		cfg.namePrefix = "snapshot"
	}
	cfg.uuidLength, cfg.retryStart, cfg.retryMax = -1, time.Second, 8*time.Second
	m := newMetrics(prometheus.NewRegistry())
	f.content = newReconciler[content](contentKind{csi: f.csi, classes: listers.NewVolumeSnapshotClassLister(classes)},
		listers.NewVolumeSnapshotContentLister(f.indexer), f.client.SnapshotV1().VolumeSnapshotContents(), cfg, f.kube, f.recorder, m)
	f.group = newReconciler[groupContent](groupKind{csi: f.csi, classes: grouplisters.NewVolumeGroupSnapshotClassLister(classes)},
		grouplisters.NewVolumeGroupSnapshotContentLister(f.indexer), f.client.GroupsnapshotV1().VolumeGroupSnapshotContents(), cfg, f.kube, f.recorder, m)
	return f
}

// syncContent runs one sync of the content name.
func (f *fixture) syncContent(t *testing.T, name string) error {
	t.Helper()
	return f.content.sync(t.Context(), controller.Key{Name: name})
}

// getContent reads a content as the API server (the fake) has it.
func (f *fixture) getContent(t *testing.T, name string) content {
	t.Helper()
	c, err := f.client.SnapshotV1().VolumeSnapshotContents().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// catchUp feeds the lister what the API server holds now, as an informer would.
func (f *fixture) catchUp(t *testing.T, name string) {
	t.Helper()
	_ = f.indexer.Update(f.getContent(t, name))
}

// patches lists the patches sent, as "subresource" ("" for metadata).
func (f *fixture) patches() []string {
	var out []string
	for _, a := range f.client.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok {
			out = append(out, p.GetSubresource())
		}
	}
	return out
}

// events drains the recorded events.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// outcome names how the queue would route err.
func routed(err error) string {
	switch {
	case err == nil:
		return "done"
	case controller.OutcomeOf(err) == controller.OutcomeRequeueAfter:
		return "wait"
	case controller.IsFinal(err):
		return "final"
	default:
		return "retry"
	}
}

type contentOption func(*snapshotv1.VolumeSnapshotContent)

// newContent is a bound dynamic content of the test driver with policy Delete.
func newContent(name string, opts ...contentOption) content {
	c := &snapshotv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: snapshotv1.VolumeSnapshotContentSpec{
			VolumeSnapshotRef:       corev1.ObjectReference{Name: "snap", Namespace: "ns", UID: testUID},
			DeletionPolicy:          snapshotv1.VolumeSnapshotContentDelete,
			Driver:                  testDriver,
			VolumeSnapshotClassName: ptr.To(testClass),
			Source:                  snapshotv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To("vol-1")},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func withAnn(k, v string) contentOption {
	return func(c content) { metav1.SetMetaDataAnnotation(&c.ObjectMeta, k, v) }
}

func withFinalizer(c content) { c.Finalizers = append(c.Finalizers, protocol.ContentBoundFinalizer) }

// otherFinalizer belongs to someone else and keeps the object after the sidecar releases it.
const otherFinalizer = "example.com/keep"

func withOtherFinalizer(c content) { c.Finalizers = append(c.Finalizers, otherFinalizer) }

func deleting(c content) {
	c.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	withFinalizer(c)
}

func markedDeleted(c content) { deleting(c); withAnn(protocol.AnnBeingDeleted, "yes")(c) }

func retained(c content) { c.Spec.DeletionPolicy = snapshotv1.VolumeSnapshotContentRetain }

func withDriver(d string) contentOption { return func(c content) { c.Spec.Driver = d } }

func withLabel(k, v string) contentOption {
	return func(c content) { metav1.SetMetaDataLabel(&c.ObjectMeta, k, v) }
}

func preProvisioned(handle string) contentOption {
	return func(c content) {
		c.Spec.Source = snapshotv1.VolumeSnapshotContentSource{SnapshotHandle: ptr.To(handle)}
		c.Spec.VolumeSnapshotClassName = nil
	}
}

func unbound(c content) { c.Spec.VolumeSnapshotRef.UID = "" }

func withStatus(handle string, ready bool) contentOption {
	return func(c content) {
		c.Status = &snapshotv1.VolumeSnapshotContentStatus{SnapshotHandle: ptr.To(handle), ReadyToUse: ptr.To(ready)}
	}
}

func newClass(params map[string]string) *snapshotv1.VolumeSnapshotClass {
	return &snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: testClass}, Driver: testDriver,
		Parameters: params, DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete}
}

func newSecret(ns, name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"key": []byte(ns + "/" + name)}}
}

func corevRef(name string, uid types.UID) corev1.ObjectReference {
	return corev1.ObjectReference{Name: name, Namespace: "ns", UID: uid}
}

// mergePatchReactor applies merge patches as the API server does for the sidecar: the
// resourceVersion in the patch is a precondition (a conflict when stale) and every write
// advances the resourceVersion.
func mergePatchReactor(tracker clienttesting.ObjectTracker) clienttesting.ReactionFunc {
	return func(action clienttesting.Action) (bool, runtime.Object, error) {
		p := action.(clienttesting.PatchAction)
		if p.GetPatchType() != types.MergePatchType {
			return false, nil, nil
		}
		gvr := p.GetResource()
		cur, err := tracker.Get(gvr, p.GetNamespace(), p.GetName())
		if err != nil {
			return true, nil, err
		}
		curJSON, _ := json.Marshal(cur)
		var pre struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(p.GetPatch(), &pre)
		curMeta := cur.(metav1.Object)
		if rv := pre.Metadata.ResourceVersion; rv != "" && rv != curMeta.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), p.GetName(), errors.New("stale resourceVersion"))
		}
		merged, err := jsonpatch.MergePatch(curJSON, p.GetPatch())
		if err != nil {
			return true, nil, err
		}
		obj := reflect.New(reflect.TypeOf(cur).Elem()).Interface().(runtime.Object)
		if err := json.Unmarshal(merged, obj); err != nil {
			return true, nil, err
		}
		rv, _ := strconv.Atoi(curMeta.GetResourceVersion())
		obj.(metav1.Object).SetResourceVersion(strconv.Itoa(rv + 1))
		if err := tracker.Update(gvr, obj, p.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	}
}
