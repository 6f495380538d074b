package diagnose

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

// Diagnosis is the result of describe: the object, its state and the reason (as stuck lists
// them) and the chain.
type Diagnosis struct {
	Item
	Tree *Node `json:"tree,omitempty"`
}

func describe(ctx context.Context, s *store, opts Options, namespace, kind, name string) error {
	d, err := diagnoseOne(ctx, s, namespace, kind, name)
	if err != nil {
		return err
	}
	if err := s.addEvents(ctx, d.Tree); err != nil {
		fmt.Fprintf(opts.Err, "warning: events not shown: %s\n", text(err.Error()))
	}
	if opts.Output == OutputJSON || opts.Output == OutputYAML {
		return writeStructured(opts.Out, opts.Output, d)
	}
	printTree(opts.Out, d.Tree, "", "")
	_, err = fmt.Fprintf(opts.Out, "Why: %s\n", text(d.Reason))
	return err
}

func diagnoseOne(ctx context.Context, s *store, namespace, kind, name string) (*Diagnosis, error) {
	switch kind {
	case "snapshot", "snapshots", "vs", "volumesnapshot", "volumesnapshots":
		return diagnoseWith(ctx, s, s.snapshots, "VolumeSnapshot", namespace, name, phaseOf[*snapshotv1.VolumeSnapshot], s.snapshotChain)
	case "content", "contents", "vsc", "volumesnapshotcontent", "volumesnapshotcontents":
		return diagnoseWith(ctx, s, s.contents, "VolumeSnapshotContent", "", name, phaseOf[*snapshotv1.VolumeSnapshotContent], s.contentChain)
	case "group", "groups", "vgs", "volumegroupsnapshot", "volumegroupsnapshots":
		return diagnoseWith(ctx, s, s.groups, "VolumeGroupSnapshot", namespace, name, phaseOf[*groupv1.VolumeGroupSnapshot], s.groupSnapshotChain)
	}
	return nil, fmt.Errorf("unknown kind %q: snapshot, content or group", kind)
}

// explainer is a gathered chain: it explains its object's state, names its driver and shows
// itself as a tree.
type explainer interface {
	why() (verdict, string)
	tree() *Node
}

func (c *chain) why() (verdict, string)      { return explain(c), c.driver }
func (g *groupChain) why() (verdict, string) { return explainGroup(g), g.driver }

// diagnoseWith reads the object of kind from objs and explains it through the chain that
// gather builds.
func diagnoseWith[T metav1.Object, C explainer](ctx context.Context, s *store, objs *objects[T], kind, namespace, name string,
	phase func(T) string, gather func(context.Context, T) (C, error)) (*Diagnosis, error) {
	obj, ok, err := objs.Get(ctx, namespace, name)
	if err != nil || !ok {
		return nil, notFound(err, kind, namespace, name)
	}
	c, err := gather(ctx, obj)
	if err != nil {
		return nil, err
	}
	v, driver := c.why()
	return &Diagnosis{Item: s.newItem(kind, obj, phase(obj), driver, v), Tree: c.tree()}, nil
}

// explained is the verdict on c and its driver, or err when c could not be gathered.
func explained(c explainer, err error) (verdict, string, error) {
	if err != nil {
		return verdict{}, "", err
	}
	v, driver := c.why()
	return v, driver, nil
}

func (s *store) newItem(kind string, obj metav1.Object, phase, driver string, v verdict) Item {
	age := s.age(obj)
	return Item{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), Phase: phase,
		Age: human(age), AgeSeconds: int64(age / time.Second), Driver: driver, Rule: v.Rule, Reason: v.Reason}
}

// age is the time since an object was deleted, or else created.
func (s *store) age(obj metav1.Object) time.Duration {
	since := obj.GetCreationTimestamp().Time
	if del := obj.GetDeletionTimestamp(); del != nil {
		since = del.Time
	}
	return max(s.now.Sub(since), 0)
}

func notFound(err error, kind, namespace, name string) error {
	if err != nil {
		return err
	}
	if namespace != "" {
		return fmt.Errorf("%s %s not found in namespace %s", kind, name, namespace)
	}
	return fmt.Errorf("%s %s not found", kind, name)
}

// eventKinds are the kinds whose events describe shows.
var eventKinds = map[string]bool{
	"VolumeSnapshot": true, "VolumeSnapshotContent": true, "PersistentVolumeClaim": true, "PersistentVolume": true,
	"VolumeGroupSnapshot": true, "VolumeGroupSnapshotContent": true,
}

// addEvents fills in the last events of every object of the tree.
func (s *store) addEvents(ctx context.Context, n *Node) error {
	if eventKinds[n.Kind] && n.UID != "" {
		events, err := s.events(ctx, n.Kind, n.Namespace, n.Name, n.UID)
		if err != nil {
			return err
		}
		for _, e := range events {
			n.Events = append(n.Events, s.formatEvent(e))
		}
	}
	for _, child := range n.Children {
		if err := s.addEvents(ctx, child); err != nil {
			return err
		}
	}
	return nil
}
