package snapshot

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	"k8s.io/client-go/kubernetes"
	rbacclient "k8s.io/client-go/kubernetes/typed/rbac/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/metrics"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// ReasonNoSidecar is the Warning event on a snapshot whose content has waited longer than the
// liveness threshold for a driver whose sidecars hold no live Lease.
const ReasonNoSidecar = "SnapshotterNotRunning"

// byLeaseName indexes Leases by name: a sidecar's Lease lives in its own pod's namespace, which the
// controller does not know.
const byLeaseName = "name"

// liveness tells whether the csi-snapshotter sidecars of a driver run, from the leader-election
// Leases they renew (no new protocol: every sidecar with leader election holds one). It watches
// the Leases of every namespace but kube-node-lease, which holds one per node and nothing else,
// and counts those of the namespaces where a sidecar can run (kube.LeaseNamespaces: kube-system,
// --sidecar-lease-namespaces, and the namespaces whose ServiceAccounts may write contents), read
// again at each check: a tenant's Lease named like a sidecar's does not hide a dead sidecar.
type liveness struct {
	threshold time.Duration
	informer  cache.SharedIndexInformer
	rbac      rbacclient.RbacV1Interface
	// namespaces are the operator's (--sidecar-lease-namespaces).
	namespaces []string
	// trusted are the namespaces whose Leases count, as last read.
	trusted atomic.Pointer[sets.Set[string]]
	// rbacReadable is false once reading the RBAC objects failed, so the failure is logged once.
	rbacReadable atomic.Bool
	// warned holds the contents warned about while they wait, so each gets one event.
	mu     sync.Mutex
	warned map[types.UID]bool
	desc   *prometheus.Desc
}

func newLiveness(kube kubernetes.Interface, threshold time.Duration, namespaces []string) *liveness {
	informer := coordinationinformers.NewFilteredLeaseInformer(kube, metav1.NamespaceAll, 0,
		cache.Indexers{byLeaseName: func(obj any) ([]string, error) {
			if l, ok := obj.(*coordinationv1.Lease); ok {
				return []string{l.Name}, nil
			}
			return nil, nil
		}},
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("metadata.namespace", corev1.NamespaceNodeLease).String()
		})
	l := &liveness{threshold: threshold, informer: informer, rbac: kube.RbacV1(), namespaces: namespaces, warned: map[types.UID]bool{},
		desc: prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "", metrics.ContentsWithoutSidecar),
			"VolumeSnapshotContents that have waited longer than --sidecar-liveness-threshold for a driver whose csi-snapshotter sidecars hold no live leader-election Lease.",
			[]string{metrics.LabelDriver}, nil)}
	base := sets.New(append([]string{metav1.NamespaceSystem}, namespaces...)...)
	l.trusted.Store(&base)
	l.rbacReadable.Store(true)
	return l
}

// readTrust reads again the namespaces whose Leases count. When the RBAC objects cannot be read
// (the controller runs with the reference RBAC, which grants no such read), it says so once and
// counts kube-system and --sidecar-lease-namespaces only.
func (l *liveness) readTrust(ctx context.Context) {
	trusted, err := kube.LeaseNamespaces(ctx, l.rbac, l.namespaces)
	if err != nil {
		if l.rbacReadable.Swap(false) {
			klog.FromContext(ctx).Info("Counting only the sidecar Leases in kube-system and --sidecar-lease-namespaces: "+
				"the namespaces of the ServiceAccounts allowed to write VolumeSnapshotContents are unknown without "+
				"list on clusterroles and clusterrolebindings (rbac.authorization.k8s.io)", "namespaces", sets.List(trusted), "err", err)
		}
	} else {
		l.rbacReadable.Store(true)
	}
	l.trusted.Store(&trusted)
}

// sidecarLive tells whether a Lease of driver's sidecars, in a namespace where a sidecar can run,
// was renewed within its duration.
func (l *liveness) sidecarLive(driver string, now time.Time) bool {
	trusted := *l.trusted.Load()
	for _, name := range protocol.SidecarLeaseNames(driver) {
		objs, _ := l.informer.GetIndexer().ByIndex(byLeaseName, name)
		for _, obj := range objs {
			if lease, ok := obj.(*coordinationv1.Lease); ok && trusted.Has(lease.Namespace) && protocol.ReadLease(lease, now).Live {
				return true
			}
		}
	}
	return false
}

// runLiveness watches the Leases and checks the waiting contents every threshold/5 until ctx
// is done.
func (c *Controller) runLiveness(ctx context.Context) {
	l := c.liveness
	go l.informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced) {
		return
	}
	ticker := time.NewTicker(max(l.threshold/5, time.Second))
	defer ticker.Stop()
	for {
		c.checkLiveness(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// waitingContents returns, per driver, the contents that have waited longer than the threshold
// for their sidecar: to be created, or deleted from the backend.
func (c *Controller) waitingContents(now time.Time) map[string][]*snapshotv1.VolumeSnapshotContent {
	contents, err := c.single.contents.List(everything)
	if err != nil {
		return nil
	}
	out := map[string][]*snapshotv1.VolumeSnapshotContent{}
	for _, content := range contents {
		since, waits := content.CreationTimestamp.Time, false
		switch {
		case content.DeletionTimestamp != nil:
			since, waits = content.DeletionTimestamp.Time, kube.HasFinalizer(content, protocol.ContentBoundFinalizer)
		default:
			ready, failed := protocol.Report(content)
			waits = !ready && failed == nil && content.Annotations[protocol.AnnGroupSnapshotHandle] == ""
		}
		if waits && now.Sub(since) > c.liveness.threshold {
			out[content.Spec.Driver] = append(out[content.Spec.Driver], content)
		}
	}
	return out
}

// checkLiveness warns once on each snapshot whose content has waited longer than the threshold
// for a driver without a live sidecar.
func (c *Controller) checkLiveness(ctx context.Context) {
	l, now := c.liveness, c.clock.Now()
	l.readTrust(ctx)
	waiting := c.waitingContents(now)
	seen := map[types.UID]bool{}
	for driver, contents := range waiting {
		if l.sidecarLive(driver, now) {
			continue
		}
		for _, content := range contents {
			seen[content.UID] = true
			l.mu.Lock()
			done := l.warned[content.UID]
			l.warned[content.UID] = true
			l.mu.Unlock()
			if !done {
				c.warnNoSidecar(ctx, content, now)
			}
		}
	}
	l.mu.Lock()
	for uid := range l.warned {
		if !seen[uid] {
			delete(l.warned, uid)
		}
	}
	l.mu.Unlock()
}

func (c *Controller) warnNoSidecar(ctx context.Context, content *snapshotv1.VolumeSnapshotContent, now time.Time) {
	since, what := content.CreationTimestamp.Time, "to create its backend snapshot"
	if content.DeletionTimestamp != nil {
		since, what = content.DeletionTimestamp.Time, "to delete its backend snapshot"
	}
	msg := fmt.Sprintf("VolumeSnapshotContent %s has waited %s for the csi-snapshotter of driver %s %s, but no sidecar of that driver holds a live Lease (%s; a sidecar without leader election holds none; Leases count only in namespaces where a sidecar can run)",
		content.Name, now.Sub(since).Round(time.Second), content.Spec.Driver, what, strings.Join(protocol.SidecarLeaseNames(content.Spec.Driver), " or "))
	klog.FromContext(ctx).Info("No live sidecar for a waiting content", "content", klog.KObj(content), "driver", content.Spec.Driver)
	ref := content.Spec.VolumeSnapshotRef
	if vs, err := c.single.snapshots.VolumeSnapshots(ref.Namespace).Get(ref.Name); err == nil && (ref.UID == "" || vs.UID == ref.UID) {
		c.recorder.Event(vs, corev1.EventTypeWarning, ReasonNoSidecar, msg)
		return
	}
	c.recorder.Event(content, corev1.EventTypeWarning, ReasonNoSidecar, msg)
}

// livenessMetrics reports, per driver without a live sidecar, the contents waiting longer than
// the threshold; computed from the caches at each scrape.
type livenessMetrics struct{ c *Controller }

func (m livenessMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- m.c.liveness.desc }

func (m livenessMetrics) Collect(ch chan<- prometheus.Metric) {
	l, now := m.c.liveness, m.c.clock.Now()
	if !l.informer.HasSynced() {
		return
	}
	for driver, contents := range m.c.waitingContents(now) {
		n := 0.0
		if !l.sidecarLive(driver, now) {
			n = float64(len(contents))
		}
		ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, n, driver)
	}
}
