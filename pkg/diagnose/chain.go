package diagnose

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// chain is everything a single snapshot's state depends on: the snapshot, its source claim and
// volume, its content, class, driver and the liveness of the components that act on it. A chain
// built from a content has no snapshot when the content's snapshot is gone.
type chain struct {
	vs          *snapshotv1.VolumeSnapshot
	claimName   string
	claim       *corev1.PersistentVolumeClaim
	volume      *corev1.PersistentVolume
	contentName string
	content     *snapshotv1.VolumeSnapshotContent
	className   string
	class       *snapshotv1.VolumeSnapshotClass
	// defaults are the driver's default classes, looked up when the snapshot names no class.
	defaults []*snapshotv1.VolumeSnapshotClass
	driver   string
	// restoring are the claims, not bound yet, that are being restored from the snapshot.
	restoring []*corev1.PersistentVolumeClaim
	// group is the name of the VolumeGroupSnapshot the snapshot is a member of, or "".
	group      string
	sidecar    holder
	controller holder
}

// snapshotChain gathers the chain of vs.
func (s *store) snapshotChain(ctx context.Context, vs *snapshotv1.VolumeSnapshot) (*chain, error) {
	c := &chain{vs: vs, group: groupOf(vs)}
	c.contentName = contentNameOf(vs)
	var err error
	if c.content, _, err = s.contents.Get(ctx, "", c.contentName); err != nil {
		return nil, err
	}
	if vs.Spec.Source.PersistentVolumeClaimName != nil {
		c.claimName = *vs.Spec.Source.PersistentVolumeClaimName
		if c.claim, _, err = s.claims.Get(ctx, vs.Namespace, c.claimName); err != nil {
			return nil, err
		}
	}
	if c.claim != nil {
		if c.volume, _, err = s.volumes.Get(ctx, "", c.claim.Spec.VolumeName); err != nil && !forbidden(err) {
			return nil, err
		}
	}
	if vs.Spec.VolumeSnapshotClassName != nil {
		c.className = *vs.Spec.VolumeSnapshotClassName
	}
	if vs.DeletionTimestamp != nil && hasFinalizer(vs, protocol.SnapshotAsSourceFinalizer) {
		if c.restoring, err = s.restoringFrom(ctx, vs); err != nil {
			return nil, err
		}
	}
	return c, s.completeChain(ctx, c)
}

// contentChain gathers the chain of a content, through its snapshot when that still exists.
func (s *store) contentChain(ctx context.Context, content *snapshotv1.VolumeSnapshotContent) (*chain, error) {
	ref := content.Spec.VolumeSnapshotRef
	vs, _, err := s.snapshots.Get(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return nil, err
	}
	if vs != nil && (ref.UID == "" || vs.UID == ref.UID) && contentNameOf(vs) == content.Name {
		return s.snapshotChain(ctx, vs)
	}
	c := &chain{contentName: content.Name, content: content}
	return c, s.completeChain(ctx, c)
}

// completeChain finds the class, the driver and the Leases of the components.
func (s *store) completeChain(ctx context.Context, c *chain) error {
	if c.content != nil {
		c.driver = c.content.Spec.Driver
		if c.className == "" && c.content.Spec.VolumeSnapshotClassName != nil {
			c.className = *c.content.Spec.VolumeSnapshotClassName
		}
	}
	var err error
	if c.className != "" {
		if c.class, _, err = s.classes.Get(ctx, "", c.className); err != nil {
			return err
		}
	}
	if c.driver == "" && c.class != nil {
		c.driver = c.class.Driver
	}
	if c.driver == "" && c.volume != nil && c.volume.Spec.CSI != nil {
		c.driver = c.volume.Spec.CSI.Driver
	}
	if c.className == "" && c.content == nil && c.driver != "" {
		if c.defaults, err = defaultClasses(ctx, s.classes, c.driver, protocol.AnnDefaultClass,
			func(class *snapshotv1.VolumeSnapshotClass) string { return class.Driver }); err != nil {
			return err
		}
	}
	c.sidecar, c.controller = s.components(ctx, c.driver)
	return nil
}

// defaultClasses returns the classes of driver marked default with annotation ann; driverOf is
// a class's driver.
func defaultClasses[T metav1.Object](ctx context.Context, classes *objects[T], driver, ann string, driverOf func(T) string) ([]T, error) {
	all, err := classes.List(ctx, allNamespaces)
	if err != nil {
		return nil, err
	}
	var defaults []T
	for _, class := range all {
		if driverOf(class) == driver && class.GetAnnotations()[ann] == "true" {
			defaults = append(defaults, class)
		}
	}
	return defaults, nil
}

// components are the states of the Leases of driver's sidecar (unknown without a driver) and of
// the snapshot-controller.
func (s *store) components(ctx context.Context, driver string) (sidecar, controller holder) {
	if driver != "" {
		sidecar = s.freshest(ctx, protocol.SidecarLeaseNames(driver)...)
	}
	return sidecar, s.freshest(ctx, protocol.ControllerLeaseName)
}

// restoringFrom returns the claims of vs's namespace that are being restored from vs and are not
// bound yet: while one exists, the snapshot must stay.
func (s *store) restoringFrom(ctx context.Context, vs *snapshotv1.VolumeSnapshot) ([]*corev1.PersistentVolumeClaim, error) {
	claims, err := s.claims.List(ctx, vs.Namespace)
	if err != nil {
		return nil, err
	}
	var out []*corev1.PersistentVolumeClaim
	for _, pvc := range claims {
		if restoreSource(pvc) == vs.Name && pvc.Status.Phase != corev1.ClaimBound {
			out = append(out, pvc)
		}
	}
	sortByName(out)
	return out, nil
}

// restoreSource is the name of the VolumeSnapshot a claim is restored from, or "".
func restoreSource(pvc *corev1.PersistentVolumeClaim) string {
	isSnapshot := func(group *string, kind string) bool {
		return group != nil && *group == snapshotv1.GroupName && kind == "VolumeSnapshot"
	}
	if ref := pvc.Spec.DataSourceRef; ref != nil && isSnapshot(ref.APIGroup, ref.Kind) && (ref.Namespace == nil || *ref.Namespace == pvc.Namespace) {
		return ref.Name
	}
	if ref := pvc.Spec.DataSource; ref != nil && isSnapshot(ref.APIGroup, ref.Kind) {
		return ref.Name
	}
	return ""
}

// contentNameOf is the content vs is bound to or will be.
func contentNameOf(vs *snapshotv1.VolumeSnapshot) string {
	switch {
	case vs.Status != nil && vs.Status.BoundVolumeSnapshotContentName != nil:
		return *vs.Status.BoundVolumeSnapshotContentName
	case vs.Spec.Source.VolumeSnapshotContentName != nil:
		return *vs.Spec.Source.VolumeSnapshotContentName
	case groupOf(vs) != "":
		return "" // a group member's content is made by its group
	}
	return protocol.ContentName(vs.UID)
}

// groupOf is the name of the group snapshot that vs is a member of, or "".
func groupOf(vs *snapshotv1.VolumeSnapshot) string {
	for _, ref := range vs.OwnerReferences {
		if ref.Kind == "VolumeGroupSnapshot" {
			return ref.Name
		}
	}
	if vs.Status != nil && vs.Status.VolumeGroupSnapshotName != nil {
		return *vs.Status.VolumeGroupSnapshotName
	}
	return ""
}

// groupChain is everything a group snapshot's state depends on.
type groupChain struct {
	vgs         *groupv1.VolumeGroupSnapshot
	claims      []*corev1.PersistentVolumeClaim // matched by the selector
	contentName string
	content     *groupv1.VolumeGroupSnapshotContent
	className   string
	class       *groupv1.VolumeGroupSnapshotClass
	defaults    []*groupv1.VolumeGroupSnapshotClass
	driver      string
	members     []*chain
	sidecar     holder
	controller  holder
}

// groupSnapshotChain gathers the chain of vgs and of each of its member snapshots.
func (s *store) groupSnapshotChain(ctx context.Context, vgs *groupv1.VolumeGroupSnapshot) (*groupChain, error) {
	g := &groupChain{vgs: vgs}
	switch {
	case vgs.Status != nil && vgs.Status.BoundVolumeGroupSnapshotContentName != nil:
		g.contentName = *vgs.Status.BoundVolumeGroupSnapshotContentName
	case vgs.Spec.Source.VolumeGroupSnapshotContentName != nil:
		g.contentName = *vgs.Spec.Source.VolumeGroupSnapshotContentName
	default:
		g.contentName = protocol.GroupContentName(vgs.UID)
	}
	var err error
	if g.content, _, err = s.groupContents.Get(ctx, "", g.contentName); err != nil {
		return nil, err
	}
	if sel := vgs.Spec.Source.Selector; sel != nil {
		if g.claims, err = s.selectedClaims(ctx, vgs.Namespace, sel); err != nil {
			return nil, err
		}
	}
	if vgs.Spec.VolumeGroupSnapshotClassName != nil {
		g.className = *vgs.Spec.VolumeGroupSnapshotClassName
	} else if g.content != nil && g.content.Spec.VolumeGroupSnapshotClassName != nil {
		g.className = *g.content.Spec.VolumeGroupSnapshotClassName
	}
	if err := s.completeGroup(ctx, g); err != nil {
		return nil, err
	}
	snapshots, err := s.snapshots.List(ctx, vgs.Namespace)
	if err != nil {
		return nil, err
	}
	sortByName(snapshots)
	for _, vs := range snapshots {
		if groupOf(vs) == vgs.Name {
			member, err := s.snapshotChain(ctx, vs)
			if err != nil {
				return nil, err
			}
			g.members = append(g.members, member)
		}
	}
	return g, nil
}

func (s *store) completeGroup(ctx context.Context, g *groupChain) error {
	var err error
	if g.className != "" {
		if g.class, _, err = s.groupClasses.Get(ctx, "", g.className); err != nil {
			return err
		}
	}
	switch {
	case g.content != nil:
		g.driver = g.content.Spec.Driver
	case g.class != nil:
		g.driver = g.class.Driver
	}
	for _, pvc := range g.claims {
		if g.driver != "" {
			break
		}
		if pv, _, err := s.volumes.Get(ctx, "", pvc.Spec.VolumeName); err == nil && pv != nil && pv.Spec.CSI != nil {
			g.driver = pv.Spec.CSI.Driver
		}
	}
	if g.className == "" && g.content == nil && g.driver != "" {
		if g.defaults, err = defaultClasses(ctx, s.groupClasses, g.driver, protocol.AnnGroupDefaultClass,
			func(class *groupv1.VolumeGroupSnapshotClass) string { return class.Driver }); err != nil {
			return err
		}
	}
	g.sidecar, g.controller = s.components(ctx, g.driver)
	return nil
}

func (s *store) selectedClaims(ctx context.Context, namespace string, sel *metav1.LabelSelector) ([]*corev1.PersistentVolumeClaim, error) {
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, err
	}
	claims, err := s.claims.List(ctx, namespace)
	if err != nil {
		return nil, err
	}
	var out []*corev1.PersistentVolumeClaim
	for _, pvc := range claims {
		if selector.Matches(labels.Set(pvc.Labels)) {
			out = append(out, pvc)
		}
	}
	sortByName(out)
	return out, nil
}
