package diagnose

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
)

// StuckList is the result of stuck.
type StuckList struct {
	Items []Item `json:"items"`
}

// Item is one object, its state and why: a line of stuck, the head of describe.
type Item struct {
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	Phase      string `json:"phase"`
	Age        string `json:"age"`
	AgeSeconds int64  `json:"ageSeconds"`
	Driver     string `json:"driver,omitempty"`
	Rule       Rule   `json:"rule"`
	Reason     string `json:"reason"`
}

func stuck(ctx context.Context, s *store, opts Options, namespace string) error {
	items, err := findStuck(ctx, s, namespace, opts.For)
	if err != nil {
		return err
	}
	if err := sortItems(items, opts.SortBy); err != nil {
		return err
	}
	switch opts.Output {
	case OutputJSON, OutputYAML:
		return writeStructured(opts.Out, opts.Output, StuckList{Items: items})
	}
	if len(items) == 0 {
		where := "in namespace " + namespace
		if namespace == allNamespaces {
			where = "in any namespace"
		}
		fmt.Fprintf(opts.Err, "No snapshot, content or group snapshot %s has been stuck for %s.\n", where, opts.For)
		return nil
	}
	return printStuck(opts.Out, items, opts.Output == OutputWide)
}

// printStuck writes items as a table, every text of the objects through text.
func printStuck(out io.Writer, items []Item, wide bool) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if wide {
		fmt.Fprintln(w, "KIND\tNAMESPACE\tNAME\tPHASE\tAGE\tDRIVER\tRULE\tREASON")
	} else {
		fmt.Fprintln(w, "KIND\tNAMESPACE\tNAME\tAGE\tREASON")
	}
	for _, it := range items {
		if wide {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", it.Kind, text(it.Namespace), text(it.Name), text(it.Phase), it.Age,
				text(orNone(it.Driver)), it.Rule, text(it.Reason))
		} else {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", it.Kind, text(it.Namespace), text(it.Name), it.Age, text(it.Reason))
		}
	}
	return w.Flush()
}

// findStuck lists the objects of namespace (allNamespaces for all) that have been not ready, or
// not gone, for at least threshold. Contents count for the namespace of their snapshot.
func findStuck(ctx context.Context, s *store, namespace string, threshold time.Duration) ([]Item, error) {
	if err := s.preload(ctx, namespace); err != nil {
		return nil, err
	}
	var items []Item
	add := func(kind string, obj metav1.Object, phase string, explainIt func() (verdict, string, error)) error {
		if s.age(obj) < threshold {
			return nil
		}
		v, driver, err := explainIt()
		if err != nil || v.Rule == RuleReady {
			return err
		}
		items = append(items, s.newItem(kind, obj, phase, driver, v))
		return nil
	}
	snapshots, _ := s.snapshots.List(ctx, namespace)
	for _, vs := range snapshots {
		if phaseOf(vs) == PhaseReady {
			continue
		}
		if err := add("VolumeSnapshot", vs, phaseOf(vs), func() (verdict, string, error) {
			return explained(s.snapshotChain(ctx, vs))
		}); err != nil {
			return nil, err
		}
	}
	contents, _ := s.contents.List(ctx, allNamespaces)
	for _, content := range contents {
		if !inScope(content.Spec.VolumeSnapshotRef.Namespace, namespace) {
			continue
		}
		if err := add("VolumeSnapshotContent", content, phaseOf(content), func() (verdict, string, error) {
			return explained(s.contentChain(ctx, content))
		}); err != nil {
			return nil, err
		}
	}
	if err := s.stuckGroups(ctx, namespace, add); err != nil {
		return nil, err
	}
	return items, nil
}

type addFunc func(kind string, obj metav1.Object, phase string, explainIt func() (verdict, string, error)) error

// stuckGroups adds the stuck group snapshots and group contents.
func (s *store) stuckGroups(ctx context.Context, namespace string, add addFunc) error {
	groups, _ := s.groups.List(ctx, namespace)
	for _, vgs := range groups {
		if err := add("VolumeGroupSnapshot", vgs, phaseOf(vgs), func() (verdict, string, error) {
			return explained(s.groupSnapshotChain(ctx, vgs))
		}); err != nil {
			return err
		}
	}
	contents, _ := s.groupContents.List(ctx, allNamespaces)
	for _, content := range contents {
		ref := content.Spec.VolumeGroupSnapshotRef
		if !inScope(ref.Namespace, namespace) {
			continue
		}
		if err := add("VolumeGroupSnapshotContent", content, phaseOf(content), func() (verdict, string, error) {
			return s.explainGroupContent(ctx, content)
		}); err != nil {
			return err
		}
	}
	return nil
}

// explainGroupContent explains a group content through its group snapshot, or alone when that
// is gone.
func (s *store) explainGroupContent(ctx context.Context, content *groupv1.VolumeGroupSnapshotContent) (verdict, string, error) {
	ref := content.Spec.VolumeGroupSnapshotRef
	vgs, _, err := s.groups.Get(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return verdict{}, "", err
	}
	if vgs != nil && (ref.UID == "" || ref.UID == vgs.UID) {
		return explained(s.groupSnapshotChain(ctx, vgs))
	}
	g := &groupChain{content: content, contentName: content.Name}
	if content.Spec.VolumeGroupSnapshotClassName != nil {
		g.className = *content.Spec.VolumeGroupSnapshotClassName
	}
	if err := s.completeGroup(ctx, g); err != nil {
		return verdict{}, "", err
	}
	switch {
	case content.DeletionTimestamp == nil && ref.UID == "":
		return verdict{RuleContentUnbound, fmt.Sprintf("pre-provisioned group content waits for VolumeGroupSnapshot %s/%s to name it", ref.Namespace, ref.Name)}, g.driver, nil
	case content.DeletionTimestamp == nil && content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentRetain:
		return verdict{RuleRetainLeftBehind, fmt.Sprintf("Retain content left behind: VolumeGroupSnapshot %s/%s is gone; backend group snapshot %s stays until this content is deleted by hand",
			ref.Namespace, ref.Name, orNone(groupHandle(content)))}, g.driver, nil
	case content.DeletionTimestamp == nil:
		return verdict{RuleWaitingForController, fmt.Sprintf("waiting for the snapshot-controller to delete this content: its VolumeGroupSnapshot %s/%s is gone%s",
			ref.Namespace, ref.Name, controllerState(g.controller))}, g.driver, nil
	}
	if v, ok := g.waitsForSidecar(); ok {
		return v, g.driver, nil
	}
	return verdict{RuleWaitingForController, "waiting for the snapshot-controller to remove the content's finalizers" + controllerState(g.controller)}, g.driver, nil
}

// preload lists every kind once, so that the chains of many objects need no further reads.
// Kinds the cluster does not serve (no group snapshot CRDs) or the user may not list (volumes)
// are left out.
func (s *store) preload(ctx context.Context, namespace string) error {
	loads := []struct {
		name string
		list func() error
	}{
		{"volumesnapshots", func() error { _, err := s.snapshots.List(ctx, namespace); return err }},
		{"volumesnapshotcontents", func() error { _, err := s.contents.List(ctx, allNamespaces); return err }},
		{"volumesnapshotclasses", func() error { _, err := s.classes.List(ctx, allNamespaces); return err }},
		{"persistentvolumeclaims", func() error { _, err := s.claims.List(ctx, namespace); return err }},
		{"persistentvolumes", func() error { _, err := s.volumes.List(ctx, allNamespaces); return err }},
		{"volumegroupsnapshots", func() error { _, err := s.groups.List(ctx, namespace); return err }},
		{"volumegroupsnapshotcontents", func() error { _, err := s.groupContents.List(ctx, allNamespaces); return err }},
		{"volumegroupsnapshotclasses", func() error { _, err := s.groupClasses.List(ctx, allNamespaces); return err }},
	}
	// The kinds are listed side by side: with tens of thousands of snapshots and contents, their
	// lists' decoding is most of the command's time, and it takes a core each.
	errs := make([]error, len(loads))
	var wg sync.WaitGroup
	for i, l := range loads {
		wg.Go(func() { errs[i] = l.list() })
	}
	wg.Wait()
	for i, l := range loads {
		err := errs[i]
		optional := strings.HasPrefix(l.name, "volumegroup") && apierrors.IsNotFound(err) || l.name == "persistentvolumes" && forbidden(err)
		if err != nil && !optional {
			return fmt.Errorf("list %s: %w", l.name, err)
		}
	}
	return nil
}

func inScope(objNamespace, namespace string) bool {
	return namespace == allNamespaces || objNamespace == namespace
}

// sortItems orders items by the --sort-by key; ties go by kind, namespace and name.
func sortItems(items []Item, by string) error {
	keys := map[string]func(a, b Item) int{
		"":          func(a, b Item) int { return int(b.AgeSeconds - a.AgeSeconds) },
		"age":       func(a, b Item) int { return int(b.AgeSeconds - a.AgeSeconds) },
		"name":      func(a, b Item) int { return strings.Compare(a.Name, b.Name) },
		"namespace": func(a, b Item) int { return strings.Compare(a.Namespace, b.Namespace) },
		"kind":      func(a, b Item) int { return strings.Compare(a.Kind, b.Kind) },
		"reason":    func(a, b Item) int { return strings.Compare(a.Reason, b.Reason) },
	}
	key, ok := keys[by]
	if !ok {
		return fmt.Errorf("unknown --sort-by %q (age, name, namespace, kind, reason)", by)
	}
	slices.SortStableFunc(items, func(a, b Item) int {
		if c := key(a, b); c != 0 {
			return c
		}
		return strings.Compare(a.Kind+"/"+a.Namespace+"/"+a.Name, b.Kind+"/"+b.Namespace+"/"+b.Name)
	})
	return nil
}
