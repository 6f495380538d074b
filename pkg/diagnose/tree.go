package diagnose

import (
	"fmt"
	"io"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// Node is one object of a chain as describe shows it.
type Node struct {
	Kind        string       `json:"kind"`
	Namespace   string       `json:"namespace,omitempty"`
	Name        string       `json:"name"`
	UID         string       `json:"uid,omitempty"`
	State       string       `json:"state"`
	Details     []string     `json:"details,omitempty"`
	Finalizers  []Finalizer  `json:"finalizers,omitempty"`
	Annotations []Annotation `json:"annotations,omitempty"`
	Events      []string     `json:"events,omitempty"`
	Children    []*Node      `json:"children,omitempty"`
}

// Finalizer is a finalizer with the component that removes it and what that waits for.
type Finalizer struct {
	Name     string `json:"name"`
	Owner    string `json:"owner"`
	WaitsFor string `json:"waitsFor"`
}

// Annotation is an annotation of the protocol with its meaning.
type Annotation struct {
	Key     string `json:"key"`
	Value   string `json:"value"`
	Meaning string `json:"meaning"`
}

// finalizerOwners says, per finalizer of the protocol (and the claim and volume protections of
// Kubernetes), who removes it and when.
var finalizerOwners = map[string][2]string{
	protocol.ContentBoundFinalizer:       {"csi-snapshotter (the snapshot-controller where no sidecar must act)", "the backend snapshot is deleted (for Retain: at once)"},
	protocol.SnapshotBoundFinalizer:      {"snapshot-controller", "its content is handled (deleted from the backend for the Delete policy)"},
	protocol.SnapshotAsSourceFinalizer:   {"snapshot-controller", "no claim is being restored from this snapshot"},
	protocol.SnapshotInGroupFinalizer:    {"snapshot-controller", "its group snapshot lets this member go"},
	protocol.PVCAsSourceFinalizer:        {"snapshot-controller", "no snapshot of this claim is still being created"},
	protocol.GroupContentBoundFinalizer:  {"csi-snapshotter (the snapshot-controller where no sidecar must act)", "the backend group snapshot is deleted (for Retain: at once)"},
	protocol.GroupSnapshotBoundFinalizer: {"snapshot-controller", "its group content is handled"},
	"kubernetes.io/pvc-protection":       {"kube-controller-manager", "no pod uses the claim"},
	"kubernetes.io/pv-protection":        {"kube-controller-manager", "its claim has let the volume go"},
	// csi-provisioner v6.4 and later, where its role may watch and update volumesnapshots.
	"provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection": {"csi-provisioner", "the volume it provisions from this snapshot is created"},
	"provisioner.storage.kubernetes.io/cloning-protection":                  {"csi-provisioner", "the volume it clones from this claim is created"},
}

// annotationMeanings are the annotations and labels of the protocol that describe shows.
var annotationMeanings = map[string]string{
	protocol.AnnBeingCreated:                 "csi-snapshotter sent CreateSnapshot and has no final answer yet; the content is not deleted from the backend meanwhile",
	protocol.AnnBeingDeleted:                 "snapshot-controller: the snapshot is being deleted; the sidecar may delete per the policy",
	protocol.AnnDeletionSecretName:           "secret for DeleteSnapshot",
	protocol.AnnDeletionSecretNamespace:      "namespace of the secret for DeleteSnapshot",
	protocol.AnnDefaultClass:                 "default class of its driver",
	protocol.AnnGroupBeingCreated:            "csi-snapshotter sent CreateVolumeGroupSnapshot and has no final answer yet",
	protocol.AnnGroupBeingDeleted:            "snapshot-controller: the group snapshot is being deleted",
	protocol.AnnGroupDeletionSecretName:      "secret for DeleteVolumeGroupSnapshot",
	protocol.AnnGroupDeletionSecretNamespace: "namespace of the secret for DeleteVolumeGroupSnapshot",
	protocol.AnnGroupDefaultClass:            "default group class of its driver",
	protocol.AnnGroupSnapshotHandle:          "member of a group snapshot: no CreateSnapshot for it",
	protocol.AnnAllowVolumeModeChange:        "restores may change the volume mode",
	protocol.LabelManagedBy:                  "label: the node whose sidecar owns this content",
}

// newNode makes the node of obj with its finalizers and protocol annotations.
func newNode(kind string, obj metav1.Object, state string, details ...string) *Node {
	n := &Node{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: string(obj.GetUID()), State: state}
	for _, d := range details {
		if d != "" {
			n.Details = append(n.Details, d)
		}
	}
	for _, f := range obj.GetFinalizers() {
		owner, ok := finalizerOwners[f]
		if !ok {
			owner = [2]string{"unknown", "its owner is done"}
		}
		n.Finalizers = append(n.Finalizers, Finalizer{Name: f, Owner: owner[0], WaitsFor: owner[1]})
	}
	for _, meta := range []map[string]string{obj.GetAnnotations(), obj.GetLabels()} {
		for _, key := range sortedKeys(meta) {
			if meaning, ok := annotationMeanings[key]; ok {
				n.Annotations = append(n.Annotations, Annotation{Key: key, Value: meta[key], Meaning: meaning})
			}
		}
	}
	return n
}

// missingNode stands for an object that a chain names but that does not exist.
func missingNode(kind, namespace, name string) *Node {
	return &Node{Kind: kind, Namespace: namespace, Name: orNone(name), State: "NotFound"}
}

func (c *chain) tree() *Node {
	var root *Node
	if c.vs != nil {
		root = snapshotNode(c.vs)
		if c.claimName != "" {
			root.Children = append(root.Children, c.claimNode())
		}
		for _, pvc := range c.restoring {
			root.Children = append(root.Children, newNode("PersistentVolumeClaim", pvc, string(pvc.Status.Phase), "being restored from this snapshot"))
		}
	}
	parent := root
	switch {
	case c.content != nil:
		n := contentNode(c.content)
		if root == nil {
			root = n
		} else {
			root.Children = append(root.Children, n)
		}
		parent = n
	case c.contentName != "":
		root.Children = append(root.Children, missingNode("VolumeSnapshotContent", "", c.contentName))
	}
	parent.Children = append(parent.Children, c.classNode(), driverNode(c.driver, c.sidecar))
	if c.content != nil {
		parent.Children = append(parent.Children, &Node{Kind: "BackendSnapshot", Name: orNone(contentHandle(c.content)), State: handleState(contentHandle(c.content))})
	}
	root.Children = append(root.Children, controllerNode(c.controller))
	return root
}

func (c *chain) claimNode() *Node {
	if c.claim == nil {
		return missingNode("PersistentVolumeClaim", c.vs.Namespace, c.claimName)
	}
	n := newNode("PersistentVolumeClaim", c.claim, string(c.claim.Status.Phase))
	switch {
	case c.volume != nil:
		v := newNode("PersistentVolume", c.volume, string(c.volume.Status.Phase))
		if csi := c.volume.Spec.CSI; csi != nil {
			v.Details = append(v.Details, "csi driver "+csi.Driver+", volume handle "+csi.VolumeHandle)
		} else {
			v.Details = append(v.Details, "not a CSI volume")
		}
		n.Children = append(n.Children, v)
	case c.claim.Spec.VolumeName != "":
		n.Children = append(n.Children, missingNode("PersistentVolume", "", c.claim.Spec.VolumeName))
	}
	return n
}

func (c *chain) classNode() *Node {
	switch {
	case c.class != nil:
		return newNode("VolumeSnapshotClass", c.class, "Found", "driver "+c.class.Driver+", deletionPolicy "+string(c.class.DeletionPolicy))
	case c.className != "":
		return missingNode("VolumeSnapshotClass", "", c.className)
	case len(c.defaults) == 1:
		return newNode("VolumeSnapshotClass", c.defaults[0], "Default", "the default class of driver "+c.driver)
	}
	return &Node{Kind: "VolumeSnapshotClass", Name: "<none>", State: fmt.Sprintf("%d defaults for the driver", len(c.defaults))}
}

func snapshotNode(vs *snapshotv1.VolumeSnapshot) *Node {
	source := "content " + orNone(ptr.Deref(vs.Spec.Source.VolumeSnapshotContentName, ""))
	if vs.Spec.Source.PersistentVolumeClaimName != nil {
		source = "claim " + *vs.Spec.Source.PersistentVolumeClaimName
	}
	n := newNode("VolumeSnapshot", vs, phaseOf(vs), "source "+source+", class "+orNone(ptr.Deref(vs.Spec.VolumeSnapshotClassName, "")))
	if vs.Status != nil && vs.Status.Error != nil {
		n.Details = append(n.Details, "status.error: "+errorMessage(vs.Status.Error))
	}
	if g := groupOf(vs); g != "" {
		n.Details = append(n.Details, "member of group snapshot "+g)
	}
	return n
}

func contentNode(c *snapshotv1.VolumeSnapshotContent) *Node {
	ref := c.Spec.VolumeSnapshotRef
	n := newNode("VolumeSnapshotContent", c, phaseOf(c), "driver "+c.Spec.Driver+", deletionPolicy "+string(c.Spec.DeletionPolicy),
		fmt.Sprintf("snapshot %s/%s (uid %s)", ref.Namespace, ref.Name, orNone(string(ref.UID))))
	if c.Status != nil && c.Status.Error != nil {
		n.Details = append(n.Details, "status.error: "+errorMessage(c.Status.Error))
	}
	return n
}

func driverNode(driver string, h holder) *Node {
	n := &Node{Kind: "Driver", Name: orNone(driver)}
	if driver == "" {
		n.State = "Unknown"
		return n
	}
	leaseStates{lease: "sidecar Lease", missing: "NoSidecar", dead: "NoSidecar", live: "SidecarLive",
		missingDetail: "no sidecar Lease " + strings.Join(protocol.SidecarLeaseNames(driver), " or ") + " in a namespace where a csi-snapshotter can run"}.set(n, h)
	return n
}

func controllerNode(h holder) *Node {
	n := &Node{Kind: "Controller", Name: "snapshot-controller"}
	leaseStates{lease: "Lease", missing: "NoLease", dead: "NoLeader", live: "Leading",
		missingDetail: "no Lease " + protocol.ControllerLeaseName + " (a controller without leader election holds none)"}.set(n, h)
	return n
}

// leaseStates name the states of a component that holds a Lease while it works.
type leaseStates struct {
	lease               string // how the details call the Lease
	missing, dead, live string // no Lease; a Lease not renewed in time; a live one
	missingDetail       string
}

// set gives n the state and detail of the component's freshest Lease h: Unknown when the Leases
// could not be read, else whether it is missing, dead or live, by whom it was held and when renewed.
func (st leaseStates) set(n *Node, h holder) {
	switch {
	case h.Err != nil:
		n.State, n.Details = "Unknown", []string{h.Err.Error()}
	case h.Lease == "":
		n.State, n.Details = st.missing, []string{st.missingDetail}
	case h.Future:
		n.State = st.dead
		n.Details = []string{fmt.Sprintf("%s %s held by %s claims a renewal in the future, which no running component makes: not counted", st.lease, h.Lease, orNone(h.Holder))}
	case !h.Live:
		n.State = st.dead
		n.Details = []string{fmt.Sprintf("%s %s last held by %s, not renewed for %s", st.lease, h.Lease, orNone(h.Holder), human(h.SinceRenewal))}
	default:
		n.State = st.live
		n.Details = []string{fmt.Sprintf("%s %s held by %s, renewed %s ago", st.lease, h.Lease, h.Holder, human(h.SinceRenewal))}
	}
	if len(h.Ignored) > 0 {
		n.Details = append(n.Details, fmt.Sprintf("not counted: Lease %s, in a namespace where the component cannot run (--lease-namespaces adds one)",
			strings.Join(h.Ignored, ", ")))
	}
	if h.TrustErr != nil && (h.Lease == "" || len(h.Ignored) > 0) {
		n.Details = append(n.Details, "only the Leases of kube-system and --lease-namespaces count: "+h.TrustErr.Error())
	}
}

func (g *groupChain) tree() *Node {
	root := newNode("VolumeGroupSnapshot", g.vgs, phaseOf(g.vgs), "class "+orNone(g.className))
	if g.vgs.Status != nil && g.vgs.Status.Error != nil {
		root.Details = append(root.Details, "status.error: "+errorMessage(g.vgs.Status.Error))
	}
	for _, pvc := range g.claims {
		root.Children = append(root.Children, newNode("PersistentVolumeClaim", pvc, string(pvc.Status.Phase), "selected"))
	}
	parent := root
	if g.content != nil {
		parent = newNode("VolumeGroupSnapshotContent", g.content, phaseOf(g.content), "driver "+g.content.Spec.Driver+", deletionPolicy "+string(g.content.Spec.DeletionPolicy))
		if st := g.content.Status; st != nil && st.Error != nil {
			parent.Details = append(parent.Details, "status.error: "+errorMessage(st.Error))
		}
		root.Children = append(root.Children, parent)
	} else {
		root.Children = append(root.Children, missingNode("VolumeGroupSnapshotContent", "", g.contentName))
	}
	switch {
	case g.class != nil:
		parent.Children = append(parent.Children, newNode("VolumeGroupSnapshotClass", g.class, "Found", "driver "+g.class.Driver))
	case g.className != "":
		parent.Children = append(parent.Children, missingNode("VolumeGroupSnapshotClass", "", g.className))
	}
	parent.Children = append(parent.Children, driverNode(g.driver, g.sidecar))
	if g.content != nil {
		parent.Children = append(parent.Children, &Node{Kind: "BackendGroupSnapshot", Name: orNone(groupHandle(g.content)), State: handleState(groupHandle(g.content))})
	}
	for _, m := range g.members {
		n := snapshotNode(m.vs)
		if msg := memberError(m); msg != "" && (m.vs.Status == nil || m.vs.Status.Error == nil) {
			n.Details = append(n.Details, "content status.error: "+msg)
		}
		if m.content != nil {
			n.Children = append(n.Children, contentNode(m.content))
		}
		root.Children = append(root.Children, n)
	}
	root.Children = append(root.Children, controllerNode(g.controller))
	return root
}

// printTree writes n and its children as an indented tree, every text of the objects through
// text.
func printTree(w io.Writer, n *Node, prefix, childPrefix string) {
	name := n.Name
	if n.Namespace != "" {
		name = n.Namespace + "/" + n.Name
	}
	fmt.Fprintf(w, "%s%s %s [%s]\n", prefix, text(n.Kind), text(name), text(n.State))
	attr := childPrefix + "│  "
	if len(n.Children) == 0 {
		attr = childPrefix + "   "
	}
	for _, d := range n.Details {
		fmt.Fprintf(w, "%s%s\n", attr, text(d))
	}
	for _, f := range n.Finalizers {
		fmt.Fprintf(w, "%sfinalizer %s: removed by %s once %s\n", attr, text(f.Name), text(f.Owner), text(f.WaitsFor))
	}
	for _, a := range n.Annotations {
		fmt.Fprintf(w, "%s%s=%s: %s\n", attr, text(a.Key), text(a.Value), text(a.Meaning))
	}
	for _, e := range n.Events {
		fmt.Fprintf(w, "%sevent %s\n", attr, text(e))
	}
	for i, child := range n.Children {
		if i == len(n.Children)-1 {
			printTree(w, child, childPrefix+"└─ ", childPrefix+"   ")
		} else {
			printTree(w, child, childPrefix+"├─ ", childPrefix+"│  ")
		}
	}
}

func handleState(handle string) string {
	if handle == "" {
		return "NotCreated"
	}
	return "Exists"
}

// Phases of the objects, as describe and stuck show them.
const (
	PhaseReady    = "Ready"
	PhasePending  = "Pending"
	PhaseFailed   = "Failed"
	PhaseDeleting = "Deleting"
)

// phaseOf is the phase of a snapshot, a group snapshot or one of their contents.
func phaseOf[T interface {
	protocol.Reporting
	GetDeletionTimestamp() *metav1.Time
}](obj T) string {
	ready, err := protocol.Report(obj)
	return phase(obj.GetDeletionTimestamp(), ready, err)
}

func phase(deleted *metav1.Time, ready bool, err *snapshotv1.VolumeSnapshotError) string {
	switch {
	case deleted != nil:
		return PhaseDeleting
	case ready:
		return PhaseReady
	case err != nil:
		return PhaseFailed
	}
	return PhasePending
}

func hasFinalizer(obj metav1.Object, name string) bool {
	for _, f := range obj.GetFinalizers() {
		if f == name {
			return true
		}
	}
	return false
}
