package kube

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/app"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/test/testenv"
)

// TestMain makes informers list as the components do (app.PreferListResponses) and stops the
// control plane the paged-list test starts without SHUTTER_KUBECONFIG.
func TestMain(m *testing.M) {
	app.PreferListResponses()
	testenv.Main(m)
}

// listCall is what one List request asked for.
type listCall struct {
	limit                    int64
	resourceVersion, resumed string
	items                    int
	// undecoded counts the items that kept managedFields or lost their spec: FastList decodes
	// every page without managedFields.
	undecoded int
}

// TestPagedListInformer lists seven snapshots in pages of three against the real API server,
// through FastList: the informer's first list (resourceVersion "0", which the API server would serve whole) goes out
// as a consistent read with the limit, follows the continue tokens, and every cached object has
// gone through the transform; the watch then carries on from the list's resourceVersion.
func TestPagedListInformer(t *testing.T) {
	env := testenv.Start(t)
	testenv.InstallCRDs(t, env.Config)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	snaps := clientset.NewForConfigOrDie(env.Config)
	ns := testenv.Namespace(t, kube)
	client := snaps.SnapshotV1().VolumeSnapshots(ns)
	for i := range 7 {
		testenv.Create(t, client, snapshotNamed(fmt.Sprintf("snap-%d", i)))
	}

	fast := FastList(snaps.SnapshotV1().RESTClient(), "volumesnapshots", ns, client.List)
	if _, err := FastList(snaps.SnapshotV1().RESTClient(), "volumesnapshotz", ns, client.List)(context.Background(), metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a list of an unknown resource failed with %v, want NotFound", err)
	}
	var mu sync.Mutex
	var calls []listCall
	paged := PagedList[*snapshotv1.VolumeSnapshotList]{
		List: func(ctx context.Context, opts metav1.ListOptions) (*snapshotv1.VolumeSnapshotList, error) {
			list, err := fast(ctx, opts)
			if err == nil {
				call := listCall{limit: opts.Limit, resourceVersion: opts.ResourceVersion, resumed: opts.Continue, items: len(list.Items)}
				for _, vs := range list.Items {
					if len(vs.ManagedFields) != 0 || ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, "") != "claim" {
						call.undecoded++
					}
				}
				mu.Lock()
				calls = append(calls, call)
				mu.Unlock()
			}
			return list, err
		},
		Watch: client.Watch, Transform: controller.TrimMeta, PageSize: 3,
	}
	informer := paged.Informer(&snapshotv1.VolumeSnapshot{}, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("informer did not sync")
	}

	mu.Lock()
	got := calls
	mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("list calls = %+v, want 3 pages", got)
	}
	for i, want := range []int{3, 3, 1} {
		c := got[i]
		if c.limit != 3 || c.resourceVersion != "" || c.items != want || (i == 0) != (c.resumed == "") || c.undecoded != 0 {
			t.Errorf("page %d: %+v, want limit 3, no resourceVersion, %d items decoded without managedFields, continue token on later pages only", i, c, want)
		}
	}
	objs := informer.GetStore().List()
	if len(objs) != 7 {
		t.Fatalf("cached %d snapshots, want 7", len(objs))
	}
	for _, obj := range objs {
		if vs := obj.(*snapshotv1.VolumeSnapshot); len(vs.ManagedFields) != 0 {
			t.Errorf("%s kept its managedFields", vs.Name)
		}
	}

	testenv.Create(t, client, snapshotNamed("snap-after-sync"))
	testenv.WaitFor(t, "the watch to deliver the new snapshot", 30*time.Second, func(context.Context) (int, error) {
		return len(informer.GetStore().List()), nil
	}, func(n int) bool { return n == 8 })
}

// TestPagedRelistIsNotStale relists at an older resourceVersion, as the reflector does when a
// watch from its last resourceVersion ends "too old" (an API server cache started after it): the
// pages hold the newest state. A paged read at a resourceVersion without a match is exact, and
// the informer then loops on that old state, missing every later object.
func TestPagedRelistIsNotStale(t *testing.T) {
	env := testenv.Start(t)
	testenv.InstallCRDs(t, env.Config)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	client := clientset.NewForConfigOrDie(env.Config).SnapshotV1().VolumeSnapshots(testenv.Namespace(t, kube))
	old := testenv.Create(t, client, snapshotNamed("snap-old")).ResourceVersion
	testenv.Create(t, client, snapshotNamed("snap-new"))

	paged := PagedList[*snapshotv1.VolumeSnapshotList]{List: client.List, Watch: client.Watch, PageSize: 1}
	out, err := paged.list(context.Background(), metav1.ListOptions{ResourceVersion: old})
	if err != nil {
		t.Fatal(err)
	}
	list := out.(*snapshotv1.VolumeSnapshotList)
	if len(list.Items) != 2 {
		t.Fatalf("relist at resourceVersion %s returned %d snapshots (list resourceVersion %s), want both", old, len(list.Items), list.ResourceVersion)
	}
}

func snapshotNamed(name string) *snapshotv1.VolumeSnapshot {
	return &snapshotv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: snapshotv1.VolumeSnapshotSpec{Source: snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("claim")}}}
}
