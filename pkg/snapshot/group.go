package snapshot

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	snapinformers "github.com/shutter-csi/shutter/client/informers/externalversions"
	grouplisters "github.com/shutter-csi/shutter/client/listers/volumegroupsnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/controller"
)

// groups reconciles VolumeGroupSnapshots and VolumeGroupSnapshotContents. It shares the
// Controller's clients, recorder, snapshot listers and write helpers, and runs two more queues
// on the same skeleton.
type groups struct {
	*Controller

	snapshots    grouplisters.VolumeGroupSnapshotLister
	contents     grouplisters.VolumeGroupSnapshotContentLister
	classes      grouplisters.VolumeGroupSnapshotClassLister
	classIndexer cache.Indexer

	snapshotWrites *controller.Writes[*groupv1.VolumeGroupSnapshot]
	contentWrites  *controller.Writes[*groupv1.VolumeGroupSnapshotContent]

	snapshotQueue *controller.Queue[controller.Key]
	contentQueue  *controller.Queue[controller.Key]
	synced        []cache.InformerSynced
	// stopped is closed when run returns: its workers have finished.
	stopped chan struct{}
}

// groupCRDPoll is how often the controller looks for the group CRDs when they were missing at
// start.
const groupCRDPoll = 30 * time.Second

// newGroups wires the group reconcilers to informers from factory.
func newGroups(c *Controller, factory snapinformers.SharedInformerFactory) (*groups, error) {
	g := &groups{
		Controller:     c,
		snapshotWrites: controller.NewWrites[*groupv1.VolumeGroupSnapshot]().WithTrim(controller.Trimmed[*groupv1.VolumeGroupSnapshot](trimForCache)),
		contentWrites:  controller.NewWrites[*groupv1.VolumeGroupSnapshotContent]().WithTrim(controller.Trimmed[*groupv1.VolumeGroupSnapshotContent](trimForCache)),
		stopped:        make(chan struct{}),
	}
	g.snapshotQueue = controller.NewQueue("volumegroupsnapshot", c.opts.Retry, g.syncGroupSnapshotKey)
	g.contentQueue = controller.NewQueue("volumegroupsnapshotcontent", c.opts.Retry, g.syncGroupContentKey)
	vgs := factory.Groupsnapshot().V1().VolumeGroupSnapshots()
	vgsc := factory.Groupsnapshot().V1().VolumeGroupSnapshotContents()
	class := factory.Groupsnapshot().V1().VolumeGroupSnapshotClasses()
	if err := class.Informer().AddIndexers(cache.Indexers{byDriver: groupClassesByDriver}); err != nil {
		return nil, fmt.Errorf("add indexers: %w", err)
	}
	g.snapshots, g.contents, g.classes = vgs.Lister(), vgsc.Lister(), class.Lister()
	g.classIndexer = class.Informer().GetIndexer()
	for _, h := range []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{vgs.Informer(), controller.Handler(g.snapshotWrites, g.onGroupSnapshot)},
		{vgsc.Informer(), controller.Handler(g.contentWrites, g.onGroupContent)},
		{class.Informer(), controller.Handler(nil, func(*groupv1.VolumeGroupSnapshotClass) { g.requeueUnbound() })},
	} {
		if _, err := h.informer.AddEventHandler(h.handler); err != nil {
			return nil, fmt.Errorf("add event handler: %w", err)
		}
		g.synced = append(g.synced, h.informer.HasSynced)
	}
	return g, nil
}

func groupClassesByDriver(obj any) ([]string, error) {
	if class, ok := obj.(*groupv1.VolumeGroupSnapshotClass); ok {
		return []string{class.Driver}, nil
	}
	return nil, nil
}

// run waits for the group caches and runs the two group queues until ctx is done.
func (g *groups) run(ctx context.Context) {
	defer close(g.stopped)
	if !cache.WaitForCacheSync(ctx.Done(), g.synced...) {
		return
	}
	klog.FromContext(ctx).Info("Group snapshot caches synced; starting workers")
	go controller.Resync(ctx, g.snapshotQueue, g.opts.ResyncPeriod, func() []controller.Key { return keys(g.snapshots.List) })
	go controller.Resync(ctx, g.contentQueue, g.opts.ResyncPeriod, func() []controller.Key { return keys(g.contents.List) })
	done := make(chan struct{})
	go func() {
		g.contentQueue.Run(ctx, g.opts.Workers)
		close(done)
	}()
	g.snapshotQueue.Run(ctx, g.opts.Workers)
	<-done
}

func (g *groups) onGroupSnapshot(vgs *groupv1.VolumeGroupSnapshot) {
	g.snapshotQueue.Add(controller.KeyOf(vgs))
	if name := g.contentNameOf(vgs); name != "" {
		g.contentQueue.Add(controller.Key{Name: name})
	}
}

func (g *groups) onGroupContent(content *groupv1.VolumeGroupSnapshotContent) {
	g.contentQueue.Add(controller.KeyOf(content))
	if ref := content.Spec.VolumeGroupSnapshotRef; ref.Name != "" {
		g.snapshotQueue.Add(controller.Key{Namespace: ref.Namespace, Name: ref.Name})
	}
}

// onMember wakes the group of a member snapshot that changed.
func (g *groups) onMember(vs *snapshotv1.VolumeSnapshot) {
	if name := groupOf(vs); name != "" {
		g.snapshotQueue.Add(controller.Key{Namespace: vs.Namespace, Name: name})
	}
}

// requeueUnbound queues the group snapshots still waiting for a class.
func (g *groups) requeueUnbound() {
	all, err := g.snapshots.List(everything)
	if err != nil {
		return
	}
	for _, vgs := range all {
		if vgs.Status == nil || vgs.Status.BoundVolumeGroupSnapshotContentName == nil {
			g.snapshotQueue.Add(controller.KeyOf(vgs))
		}
	}
}

func (g *groups) syncGroupSnapshotKey(ctx context.Context, key controller.Key) error {
	vgs, err := g.snapshots.VolumeGroupSnapshots(key.Namespace).Get(key.Name)
	if err != nil {
		return ignoreNotFound(err)
	}
	vgs = g.snapshotWrites.Latest(vgs)
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("volumegroupsnapshot", klog.KObj(vgs)))
	return g.syncGroupSnapshot(ctx, vgs)
}

func (g *groups) syncGroupContentKey(ctx context.Context, key controller.Key) error {
	content, err := g.contents.Get(key.Name)
	if err != nil {
		return ignoreNotFound(err)
	}
	content = g.contentWrites.Latest(content)
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("volumegroupsnapshotcontent", klog.KObj(content)))
	return g.syncGroupContent(ctx, content)
}
