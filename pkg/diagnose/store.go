package diagnose

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	clientset "github.com/shutter-csi/shutter/client/clientset/versioned"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// allNamespaces is the namespace argument that lists every namespace.
const allNamespaces = ""

// objects reads objects of one kind through the API, each at most once: a Get is answered from
// an earlier List of its namespace (or of all namespaces) when there was one. It only reads.
type objects[T metav1.Object] struct {
	items  map[string]T
	listed map[string]bool // namespaces listed; allNamespaces for all of them
	get    func(ctx context.Context, namespace, name string) (T, error)
	list   func(ctx context.Context, namespace string) ([]T, error)
}

func newObjects[T metav1.Object](get func(context.Context, string, string) (T, error), list func(context.Context, string) ([]T, error)) *objects[T] {
	return &objects[T]{items: map[string]T{}, listed: map[string]bool{}, get: get, list: list}
}

// Get returns the object, or false when it does not exist.
func (o *objects[T]) Get(ctx context.Context, namespace, name string) (T, bool, error) {
	var zero T
	if name == "" {
		return zero, false, nil
	}
	key := namespace + "/" + name
	if obj, ok := o.items[key]; ok {
		return obj, true, nil
	}
	if o.listed[namespace] || o.listed[allNamespaces] {
		return zero, false, nil
	}
	obj, err := o.get(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		return zero, false, nil
	} else if err != nil {
		return zero, false, err
	}
	o.items[key] = obj
	return obj, true, nil
}

// List returns every object of namespace (allNamespaces for all).
func (o *objects[T]) List(ctx context.Context, namespace string) ([]T, error) {
	if !o.listed[namespace] && !o.listed[allNamespaces] {
		items, err := o.list(ctx, namespace)
		if err != nil {
			return nil, err
		}
		for _, obj := range items {
			o.items[obj.GetNamespace()+"/"+obj.GetName()] = obj
		}
		o.listed[namespace] = true
	}
	var out []T
	for _, obj := range o.items {
		if namespace == allNamespaces || obj.GetNamespace() == namespace {
			out = append(out, obj)
		}
	}
	return out, nil
}

// store is the plugin's read-only view of the cluster.
type store struct {
	kube kubernetes.Interface
	snap clientset.Interface
	now  time.Time

	snapshots     *objects[*snapshotv1.VolumeSnapshot]
	contents      *objects[*snapshotv1.VolumeSnapshotContent]
	classes       *objects[*snapshotv1.VolumeSnapshotClass]
	groups        *objects[*groupv1.VolumeGroupSnapshot]
	groupContents *objects[*groupv1.VolumeGroupSnapshotContent]
	groupClasses  *objects[*groupv1.VolumeGroupSnapshotClass]
	claims        *objects[*corev1.PersistentVolumeClaim]
	volumes       *objects[*corev1.PersistentVolume]

	leases     map[string][]*coordinationv1.Lease // by name
	leasesErr  error
	leasesRead bool
	// leaseNamespaces are --lease-namespaces; trusted the namespaces whose Leases count
	// (kube.LeaseNamespaces), trustErr why the RBAC-derived ones are unknown.
	leaseNamespaces []string
	trusted         sets.Set[string]
	trustErr        error
}

func newStore(kubeClient kubernetes.Interface, snap clientset.Interface, now time.Time, chunk int64, leaseNamespaces []string) *store {
	s := &store{kube: kubeClient, snap: snap, now: now, leaseNamespaces: leaseNamespaces}
	v1, g1, core := snap.SnapshotV1(), snap.GroupsnapshotV1(), kubeClient.CoreV1()
	s.snapshots = objectsOf(chunk, func(namespace string) typedClient[*snapshotv1.VolumeSnapshot, *snapshotv1.VolumeSnapshotList] {
		c := v1.VolumeSnapshots(namespace)
		return fastList[*snapshotv1.VolumeSnapshot, *snapshotv1.VolumeSnapshotList]{c, kube.FastList(v1.RESTClient(), "volumesnapshots", namespace, c.List)}
	}, func(l *snapshotv1.VolumeSnapshotList) []snapshotv1.VolumeSnapshot { return l.Items })
	s.contents = objectsOf(chunk, func(string) typedClient[*snapshotv1.VolumeSnapshotContent, *snapshotv1.VolumeSnapshotContentList] {
		c := v1.VolumeSnapshotContents()
		return fastList[*snapshotv1.VolumeSnapshotContent, *snapshotv1.VolumeSnapshotContentList]{c, kube.FastList(v1.RESTClient(), "volumesnapshotcontents", "", c.List)}
	}, func(l *snapshotv1.VolumeSnapshotContentList) []snapshotv1.VolumeSnapshotContent { return l.Items })
	s.classes = objectsOf(chunk, clusterScoped(v1.VolumeSnapshotClasses),
		func(l *snapshotv1.VolumeSnapshotClassList) []snapshotv1.VolumeSnapshotClass { return l.Items })
	s.groups = objectsOf(chunk, g1.VolumeGroupSnapshots, func(l *groupv1.VolumeGroupSnapshotList) []groupv1.VolumeGroupSnapshot { return l.Items })
	s.groupContents = objectsOf(chunk, clusterScoped(g1.VolumeGroupSnapshotContents),
		func(l *groupv1.VolumeGroupSnapshotContentList) []groupv1.VolumeGroupSnapshotContent { return l.Items })
	s.groupClasses = objectsOf(chunk, clusterScoped(g1.VolumeGroupSnapshotClasses),
		func(l *groupv1.VolumeGroupSnapshotClassList) []groupv1.VolumeGroupSnapshotClass { return l.Items })
	s.claims = objectsOf(chunk, core.PersistentVolumeClaims, func(l *corev1.PersistentVolumeClaimList) []corev1.PersistentVolumeClaim { return l.Items })
	s.volumes = objectsOf(chunk, clusterScoped(core.PersistentVolumes), func(l *corev1.PersistentVolumeList) []corev1.PersistentVolume { return l.Items })
	return s
}

// typedClient is the part of a generated typed client the store reads with.
type typedClient[T, L any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
}

// fastList is a typed client whose List is kube.FastList's, for the two kinds that number in the
// tens of thousands.
type fastList[T, L any] struct {
	typedClient[T, L]
	list func(context.Context, metav1.ListOptions) (L, error)
}

func (c fastList[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	return c.list(ctx, opts)
}

// objectsOf reads objects of type T through client, the typed client of a namespace; items
// returns a list's items. Lists come in pages of chunk objects (0: whole): with 50,000 snapshots
// a list in one piece would hold every object, as received and as decoded, at once. Each
// object's managedFields, which nothing here reads, are dropped as its page arrives.
func objectsOf[T any, PT interface {
	*T
	metav1.Object
}, L metav1.ListInterface, C typedClient[PT, L]](chunk int64, client func(namespace string) C, items func(L) []T) *objects[PT] {
	return newObjects(func(ctx context.Context, namespace, name string) (PT, error) {
		return client(namespace).Get(ctx, name, metav1.GetOptions{})
	}, func(ctx context.Context, namespace string) ([]PT, error) {
		var out []PT
		opts := metav1.ListOptions{Limit: chunk}
		for {
			list, err := client(namespace).List(ctx, opts)
			if err != nil {
				return nil, err
			}
			all := items(list)
			for i := range all {
				obj := PT(&all[i])
				obj.SetManagedFields(nil)
				out = append(out, obj)
			}
			if opts.Continue = list.GetContinue(); opts.Continue == "" {
				return out, nil
			}
		}
	})
}

// clusterScoped is the typed client of a cluster-scoped kind in the shape of a namespaced one's.
func clusterScoped[C any](client func() C) func(string) C {
	return func(string) C { return client() }
}

// leaseIn returns the Leases named name in any namespace. Leases are listed once, outside
// kube-node-lease (which holds one per node and nothing of interest here), and so are the
// namespaces where they count.
func (s *store) leaseIn(ctx context.Context, name string) ([]*coordinationv1.Lease, error) {
	if !s.leasesRead {
		s.leasesRead = true
		s.trusted, s.trustErr = kube.LeaseNamespaces(ctx, s.kube.RbacV1(), s.leaseNamespaces)
		s.leases = map[string][]*coordinationv1.Lease{}
		list, err := s.kube.CoordinationV1().Leases(allNamespaces).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermNotEqualSelector("metadata.namespace", corev1.NamespaceNodeLease).String(),
		})
		if err != nil {
			s.leasesErr = fmt.Errorf("cannot read Leases: %w", err)
		} else {
			for i := range list.Items {
				l := &list.Items[i]
				s.leases[l.Name] = append(s.leases[l.Name], l)
			}
		}
	}
	return s.leases[name], s.leasesErr
}

// holder is the state of the components behind one Lease convention.
type holder struct {
	// Lease is "namespace/name" of the freshest Lease found, or "".
	Lease string
	protocol.LeaseState
	// Err is set when the Leases could not be read.
	Err error
	// Ignored are the "namespace/name" of Leases of the right name in namespaces where the
	// component cannot run (kube.LeaseNamespaces), which do not count; TrustErr tells why those
	// namespaces may be incomplete.
	Ignored  []string
	TrustErr error
}

// freshest returns the state of the most recently renewed of the Leases named names, among
// those in namespaces where the component can run.
func (s *store) freshest(ctx context.Context, names ...string) holder {
	var best holder
	for _, name := range names {
		leases, err := s.leaseIn(ctx, name)
		if err != nil {
			return holder{Err: err}
		}
		for _, l := range leases {
			if !s.trusted.Has(l.Namespace) {
				best.Ignored = append(best.Ignored, l.Namespace+"/"+l.Name)
				continue
			}
			st := protocol.ReadLease(l, s.now)
			if best.Lease == "" || st.Live && !best.Live || st.Live == best.Live && st.SinceRenewal < best.SinceRenewal {
				best.Lease, best.LeaseState = l.Namespace+"/"+l.Name, st
			}
		}
	}
	best.TrustErr = s.trustErr
	return best
}

// events returns the last events about an object, oldest first.
func (s *store) events(ctx context.Context, kind, namespace, name string, uid string) ([]corev1.Event, error) {
	set := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name}
	if uid != "" {
		set["involvedObject.uid"] = uid
	}
	list, err := s.kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.SelectorFromSet(set).String()})
	if err != nil {
		return nil, err
	}
	items := list.Items
	sortEvents(items)
	if len(items) > maxEvents {
		items = items[len(items)-maxEvents:]
	}
	return items, nil
}
