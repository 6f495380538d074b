package sidecar

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	informers "github.com/shutter-csi/shutter/client/informers/externalversions"
	"github.com/shutter-csi/shutter/pkg/app"
	"github.com/shutter-csi/shutter/pkg/controller"
	"github.com/shutter-csi/shutter/pkg/kube"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// Names of the CRDs the sidecar looks at, and the JSONPath a CRD must declare as a selectable
// field for the sidecar to watch only its driver's objects on the server side.
const (
	contentCRD      = "volumesnapshotcontents." + snapshotv1.GroupName
	groupContentCRD = "volumegroupsnapshotcontents." + groupv1.GroupName
	driverField     = ".spec.driver"
)

// run starts the informers and the reconcilers and blocks until ctx is done.
func (s *sidecar) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	recorder, stop := s.recorder(ctx)
	defer stop()
	crds := s.installedCRDs(ctx)
	selectable := true
	for _, ok := range crds {
		selectable = selectable && ok
	}
	watched := informers.NewSharedInformerFactoryWithOptions(s.snapshots, 0, informers.WithTweakListOptions(s.listOptions(selectable)), informers.WithTransform(kube.TrimAndIntern))
	kube.PagedContents(watched, s.listOptions(selectable), kube.TrimAndIntern)
	classes := informers.NewSharedInformerFactoryWithOptions(s.snapshots, 0, informers.WithTransform(controller.TrimMeta))

	contents := watched.Snapshot().V1().VolumeSnapshotContents()
	ck := contentKind{csi: s.csi, classes: classes.Snapshot().V1().VolumeSnapshotClasses().Lister()}
	var runs []func()
	runs = append(runs, start(ctx, newReconciler(ck, contents.Lister(), s.snapshots.SnapshotV1().VolumeSnapshotContents(),
		s.config(false), s.kube, recorder, s.metrics), contents.Informer(), "volumesnapshotcontents", s.opts.ResyncPeriod))

	_, groupCRD := crds[groupContentCRD]
	switch {
	case !s.opts.Groups:
		logger.Info("Group snapshots are turned off (--feature-gates=CSIVolumeGroupSnapshot=false); not watching group contents")
	case !s.csi.Capabilities().GroupSnapshots:
		logger.V(2).Info("The driver does not take group snapshots; not watching group contents")
	case !groupCRD:
		logger.Info("The VolumeGroupSnapshotContent CRD is not installed; watching group contents once it is",
			"checkEvery", kube.GroupCRDPoll)
		// A factory of its own: the CRD that appears later may not declare spec.driver selectable.
		late := informers.NewSharedInformerFactoryWithOptions(s.snapshots, 0, informers.WithTweakListOptions(s.listOptions(false)), informers.WithTransform(controller.TrimMeta))
		defer late.Shutdown()
		runs = append(runs, func() { s.runGroupsWhenServed(ctx, late, classes, recorder) })
	default:
		runs = append(runs, s.groupReconciler(ctx, watched, classes, recorder))
	}
	watched.Start(ctx.Done())
	classes.Start(ctx.Done())
	defer watched.Shutdown()
	defer classes.Shutdown()
	for typ, ok := range watched.WaitForCacheSync(ctx.Done()) {
		if !ok {
			logger.Error(nil, "Informer did not sync", "type", typ)
			return
		}
	}
	classes.WaitForCacheSync(ctx.Done())
	logger.Info("Sidecar started", "driver", s.csi.DriverName(), "node", s.opts.NodeName)
	var wg sync.WaitGroup
	for _, run := range runs {
		wg.Go(run)
	}
	wg.Wait()
}

// groupReconciler wires the group content reconciler to informers from the two factories.
func (s *sidecar) groupReconciler(ctx context.Context, watched, classes informers.SharedInformerFactory, recorder record.EventRecorder) func() {
	gcontents := watched.Groupsnapshot().V1().VolumeGroupSnapshotContents()
	gk := groupKind{csi: s.csi, classes: classes.Groupsnapshot().V1().VolumeGroupSnapshotClasses().Lister()}
	return start(ctx, newReconciler(gk, gcontents.Lister(), s.snapshots.GroupsnapshotV1().VolumeGroupSnapshotContents(),
		s.config(true), s.kube, recorder, s.metrics), gcontents.Informer(), "volumegroupsnapshotcontents", s.opts.ResyncPeriod)
}

// groupResources are the group kinds the sidecar needs the API server to serve.
var groupResources = []string{"volumegroupsnapshotcontents", "volumegroupsnapshotclasses"}

// runGroupsWhenServed waits until the API server serves group snapshot contents and then runs
// the group reconciler, so installing the group CRDs later needs no restart.
func (s *sidecar) runGroupsWhenServed(ctx context.Context, watched, classes informers.SharedInformerFactory, recorder record.EventRecorder) {
	err := kube.WaitServed(ctx, s.kube.Discovery(), groupv1.SchemeGroupVersion.String(), groupResources, kube.Poll{Interval: kube.GroupCRDPoll})
	if err != nil {
		return
	}
	klog.FromContext(ctx).Info("Group snapshot CRDs appeared; watching group contents")
	run := s.groupReconciler(ctx, watched, classes, recorder)
	watched.Start(ctx.Done())
	classes.Start(ctx.Done())
	watched.WaitForCacheSync(ctx.Done())
	classes.WaitForCacheSync(ctx.Done())
	run()
}

// start wires one reconciler to its informer and a queue and returns the function that runs
// its workers and resync until ctx is done.
func start[T kube.Object[T]](ctx context.Context, r *reconciler[T], informer cache.SharedIndexInformer, name string, resync time.Duration) func() {
	q := controller.NewQueue(name, controller.Options{RetryStart: r.cfg.retryStart, RetryMax: r.cfg.retryMax, SyncTimeout: r.cfg.syncTimeout}, r.sync)
	add := func(obj T) {
		if r.mine(obj) {
			q.Add(controller.KeyOf(obj))
		}
	}
	// The first list's settled objects are queued paced, as the controller's are, the others at
	// once (controller.FirstList).
	first := controller.FirstList(q, r.settled, add)
	if _, err := informer.AddEventHandler(controller.HandlerWithInitialList(r.writer.Cache(), add, first)); err != nil {
		klog.FromContext(ctx).Error(err, "Cannot watch", "queue", name)
	}
	return func() {
		go controller.Resync(ctx, q, resync, func() []controller.Key {
			var keys []controller.Key
			for _, obj := range informer.GetStore().List() {
				if o, ok := obj.(T); ok && r.mine(o) {
					keys = append(keys, controller.KeyOf(o))
				}
			}
			return keys
		})
		q.Run(ctx, r.cfg.workers)
	}
}

// listOptions limit the watch to this node's objects (--node-deployment) and, when every
// installed content CRD declares spec.driver selectable, to this driver's objects. Otherwise
// other drivers' objects are filtered out on arrival.
func (s *sidecar) listOptions(driverSelectable bool) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) {
		if s.opts.NodeName != "" {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{protocol.LabelManagedBy: s.opts.NodeName}).String()
		}
		if driverSelectable {
			o.FieldSelector = fields.OneTermEqualSelector("spec.driver", s.csi.DriverName()).String()
		}
	}
}

// readCRDs is the rule installedCRDs needs; the upstream csi-snapshotter's RBAC lacks it.
var readCRDs = app.Rule{Verb: "get", Group: apiextensionsv1.GroupName, Resource: "customresourcedefinitions"}

// installedCRDs reads which of the content CRDs are installed: each present one maps to
// whether it declares spec.driver as a selectable field in v1. The driver field selector is used
// only when all present ones do. Without permission to read CRDs (one warning says so), the API
// server's discovery tells which kinds are served, and none is taken as selectable.
func (s *sidecar) installedCRDs(ctx context.Context) map[string]bool {
	logger := klog.FromContext(ctx)
	if !app.Permitted(ctx, s.kube, "Watching only this driver's contents on the server side (a spec.driver field selector)", readCRDs) {
		return s.servedContents(ctx)
	}
	cs, err := apiextensions.NewForConfig(s.cfg)
	if err != nil {
		return s.servedContents(ctx)
	}
	out := map[string]bool{}
	for _, name := range []string{contentCRD, groupContentCRD} {
		crd, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			logger.V(2).Info("Cannot read CRD, filtering by driver on arrival", "crd", name, "err", err)
			if name == contentCRD || !apierrors.IsNotFound(err) {
				out[name] = false
			}
			continue
		}
		i := slices.IndexFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == "v1" })
		out[name] = i >= 0 && slices.ContainsFunc(crd.Spec.Versions[i].SelectableFields, func(f apiextensionsv1.SelectableField) bool {
			return f.JSONPath == driverField
		})
	}
	logger.V(2).Info("Content CRDs", "selectableDriver", fmt.Sprint(out))
	return out
}

// servedContents is installedCRDs from discovery: the content CRD is assumed installed, the group
// content CRD only when the API server serves its kinds; neither is taken as selectable.
func (s *sidecar) servedContents(ctx context.Context) map[string]bool {
	out := map[string]bool{contentCRD: false}
	list, err := s.kube.Discovery().ServerResourcesForGroupVersion(groupv1.SchemeGroupVersion.String())
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Group snapshot kinds not served", "err", err)
		return out
	}
	served := 0
	for _, r := range list.APIResources {
		if slices.Contains(groupResources, r.Name) {
			served++
		}
	}
	if served == len(groupResources) {
		out[groupContentCRD] = false
	}
	return out
}
