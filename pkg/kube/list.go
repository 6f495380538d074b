package kube

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	snapinformers "github.com/shutter-csi/shutter/client/informers/externalversions"
)

// ListPageSize is how many objects one page of an informer's list holds: about 1.5 MB of JSON for
// snapshots or contents, as client-go's pager takes.
const ListPageSize = 500

// PagedList is a typed client's List and Watch, as an informer lists and watches one kind.
type PagedList[L runtime.Object] struct {
	List  func(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// Tweak changes the options of every list and watch (selectors); nil for none.
	Tweak func(*metav1.ListOptions)
	// Transform is the informer's transform, applied to each page's objects as they arrive.
	Transform cache.TransformFunc
	// PageSize is the page size; 0 means ListPageSize.
	PageSize int64
}

// Informer returns a shared informer of exampleObject's kind whose lists come in pages, each
// cut down by Transform before the next is read. An informer's first list otherwise asks for
// everything at once: the API server then ignores any limit (resourceVersion "0" is served whole
// from its cache), and with 50,000 snapshots the client holds the whole response and every object
// as decoded, managedFields and all, before the transform trims the first one. Page by page, what
// is held at once is one page and the trimmed objects. Use it with a factory's InformerFor, so
// that the factory sets its transform on the informer as on its own.
func (p PagedList[L]) Informer(exampleObject runtime.Object, resync time.Duration, indexers cache.Indexers) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: p.list,
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			p.tweak(&opts)
			return p.Watch(ctx, opts)
		},
	}
	return cache.NewSharedIndexInformerWithOptions(lw, exampleObject, cache.SharedIndexInformerOptions{
		ResyncPeriod: resync, Indexers: indexers,
	})
}

func (p PagedList[L]) tweak(opts *metav1.ListOptions) {
	if p.Tweak != nil {
		p.Tweak(opts)
	}
}

// list reads every page and returns them as one list, the first page's, whose resourceVersion
// is the one all pages were read at.
func (p PagedList[L]) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	p.tweak(&opts)
	switch {
	case opts.ResourceVersion == "0":
		// "Anything cached" is served whole, limit or not; a consistent read honours the limit
		// and is served from the API server's cache too.
		opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
	case opts.ResourceVersion != "" && opts.ResourceVersionMatch == "":
		// A relist at the last resourceVersion seen, after a watch from it ended "too old". With
		// a limit and no match, the API server reads a resourceVersion exactly: the same old
		// state again, whose watch is too old again, until etcd compacts it (minutes of
		// missed objects). The reflector means "at least this fresh".
		opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	opts.Limit = p.PageSize
	if opts.Limit <= 0 {
		opts.Limit = ListPageSize
	}
	var first runtime.Object
	var items []runtime.Object
	for {
		page, err := p.List(ctx, opts)
		if err != nil {
			return nil, err
		}
		if items, err = p.appendTrimmed(items, page); err != nil {
			return nil, err
		}
		if first == nil {
			first = page
		}
		listMeta, err := meta.ListAccessor(page)
		if err != nil {
			return nil, err
		}
		if listMeta.GetContinue() == "" {
			break
		}
		// Later pages come from the same snapshot as the first; they take no resourceVersion.
		opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = listMeta.GetContinue(), "", ""
	}
	if err := meta.SetList(first, items); err != nil {
		return nil, err
	}
	listMeta, _ := meta.ListAccessor(first)
	listMeta.SetContinue("")
	return first, nil
}

// appendTrimmed appends the page's objects to items, each through the transform.
func (p PagedList[L]) appendTrimmed(items []runtime.Object, page runtime.Object) ([]runtime.Object, error) {
	err := meta.EachListItem(page, func(obj runtime.Object) error {
		if p.Transform != nil {
			out, err := p.Transform(obj)
			if err != nil {
				return err
			}
			trimmed, ok := out.(runtime.Object)
			if !ok {
				return fmt.Errorf("transform returned %T, not an API object", out)
			}
			obj = trimmed
		}
		items = append(items, obj)
		return nil
	})
	return items, err
}

// byNamespace is the index the generated informers carry, a new map for each informer: an
// informer keeps the map it is given and adds later indexers to it.
func byNamespace() cache.Indexers {
	return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
}

// PagedSnapshots makes factory's VolumeSnapshot informer list in pages (PagedList), decoded by
// DecodeList, with tweak applied to its options and transform, the factory's own transform,
// applied to each page. Call
// it before anything asks the factory for that informer; the factory starts it like its others.
func PagedSnapshots(factory snapinformers.SharedInformerFactory, tweak func(*metav1.ListOptions), transform cache.TransformFunc) {
	factory.InformerFor(&snapshotv1.VolumeSnapshot{}, func(client clientset.Interface, resync time.Duration) cache.SharedIndexInformer {
		c := client.SnapshotV1().VolumeSnapshots(metav1.NamespaceAll)
		list := FastList(client.SnapshotV1().RESTClient(), "volumesnapshots", metav1.NamespaceAll, c.List)
		return PagedList[*snapshotv1.VolumeSnapshotList]{List: list, Watch: c.Watch, Tweak: tweak, Transform: transform}.
			Informer(&snapshotv1.VolumeSnapshot{}, resync, byNamespace())
	})
}

// PagedContents is PagedSnapshots for VolumeSnapshotContents.
func PagedContents(factory snapinformers.SharedInformerFactory, tweak func(*metav1.ListOptions), transform cache.TransformFunc) {
	factory.InformerFor(&snapshotv1.VolumeSnapshotContent{}, func(client clientset.Interface, resync time.Duration) cache.SharedIndexInformer {
		c := client.SnapshotV1().VolumeSnapshotContents()
		list := FastList(client.SnapshotV1().RESTClient(), "volumesnapshotcontents", "", c.List)
		return PagedList[*snapshotv1.VolumeSnapshotContentList]{List: list, Watch: c.Watch, Tweak: tweak, Transform: transform}.
			Informer(&snapshotv1.VolumeSnapshotContent{}, resync, byNamespace())
	})
}
