package diagnose

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		fmt.Fprintf(opts.Err, "warning: events not shown: %v\n", err)
	}
	if opts.Output == OutputJSON || opts.Output == OutputYAML {
		return writeStructured(opts.Out, opts.Output, d)
	}
	printTree(opts.Out, d.Tree, "", "")
	_, err = fmt.Fprintf(opts.Out, "Why: %s\n", d.Reason)
	return err
}

func diagnoseOne(ctx context.Context, s *store, namespace, kind, name string) (*Diagnosis, error) {
	switch kind {
	case "snapshot", "snapshots", "vs", "volumesnapshot", "volumesnapshots":
		vs, ok, err := s.snapshots.Get(ctx, namespace, name)
		if err != nil || !ok {
			return nil, notFound(err, "VolumeSnapshot", namespace, name)
		}
		c, err := s.snapshotChain(ctx, vs)
		if err != nil {
			return nil, err
		}
		return s.chainDiagnosis("VolumeSnapshot", vs, snapshotPhase(vs), c), nil
	case "content", "contents", "vsc", "volumesnapshotcontent", "volumesnapshotcontents":
		content, ok, err := s.contents.Get(ctx, "", name)
		if err != nil || !ok {
			return nil, notFound(err, "VolumeSnapshotContent", "", name)
		}
		c, err := s.contentChain(ctx, content)
		if err != nil {
			return nil, err
		}
		return s.chainDiagnosis("VolumeSnapshotContent", content, contentPhase(content), c), nil
	case "group", "groups", "vgs", "volumegroupsnapshot", "volumegroupsnapshots":
		vgs, ok, err := s.groups.Get(ctx, namespace, name)
		if err != nil || !ok {
			return nil, notFound(err, "VolumeGroupSnapshot", namespace, name)
		}
		g, err := s.groupSnapshotChain(ctx, vgs)
		if err != nil {
			return nil, err
		}
		item := s.newItem("VolumeGroupSnapshot", vgs, groupPhase(vgs), g.driver, explainGroup(g))
		return &Diagnosis{Item: item, Tree: g.tree()}, nil
	}
	return nil, fmt.Errorf("unknown kind %q: snapshot, content or group", kind)
}

func (s *store) chainDiagnosis(kind string, obj metav1.Object, phase string, c *chain) *Diagnosis {
	return &Diagnosis{Item: s.newItem(kind, obj, phase, c.driver, explain(c)), Tree: c.tree()}
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
