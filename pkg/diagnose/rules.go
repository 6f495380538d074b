package diagnose

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	groupv1 "github.com/shutter-csi/shutter/client/apis/volumegroupsnapshot/v1"
	snapshotv1 "github.com/shutter-csi/shutter/client/apis/volumesnapshot/v1"
	"github.com/shutter-csi/shutter/pkg/protocol"
)

// Rule names the rule that explains an object's state; `-o json` carries it next to the reason.
type Rule string

// The rules, in the order they are tried. The first that applies gives the reason.
const (
	RuleReady                Rule = "Ready"
	RuleDeletionBlocked      Rule = "DeletionBlockedByRestore"
	RuleGroupMember          Rule = "GroupMember"
	RuleMemberFailed         Rule = "MemberFailed"
	RuleBackendError         Rule = "BackendError"
	RuleClassNotFound        Rule = "ClassNotFound"
	RuleNoDefaultClass       Rule = "NoDefaultClass"
	RuleClaimNotFound        Rule = "ClaimNotFound"
	RuleClaimNotBound        Rule = "ClaimNotBound"
	RuleNoClaims             Rule = "NoClaims"
	RuleNotCSIVolume         Rule = "NotCSIVolume"
	RuleControllerError      Rule = "ControllerError"
	RuleContentNotFound      Rule = "ContentNotFound"
	RuleContentUnbound       Rule = "ContentUnbound"
	RuleRetainLeftBehind     Rule = "RetainLeftBehind"
	RuleNoSidecar            Rule = "NoSidecar"
	RuleSidecarDeleting      Rule = "SidecarDeleting"
	RuleSidecarWorking       Rule = "SidecarWorking"
	RuleWaitingForController Rule = "WaitingForController"
)

// verdict is a rule's answer: which rule, and the one-line reason.
type verdict struct {
	Rule   Rule
	Reason string
}

type chainRule func(*chain) (verdict, bool)

// chainRules explain a snapshot, or a content (whose snapshot may be gone).
var chainRules = []chainRule{
	func(c *chain) (verdict, bool) {
		if c.vs != nil && c.vs.DeletionTimestamp == nil && protocol.Ready(c.vs) {
			return verdict{RuleReady, "nothing is wrong: the snapshot is ready to use"}, true
		}
		return verdict{}, false
	},
	func(c *chain) (verdict, bool) {
		if len(c.restoring) == 0 {
			return verdict{}, false
		}
		return verdict{RuleDeletionBlocked, fmt.Sprintf("deletion waits for claim %s being restored from this snapshot", names(c.restoring))}, true
	},
	func(c *chain) (verdict, bool) {
		if c.vs == nil || c.vs.DeletionTimestamp == nil || !hasFinalizer(c.vs, protocol.SnapshotInGroupFinalizer) {
			return verdict{}, false
		}
		return verdict{RuleGroupMember, fmt.Sprintf("deletion waits for group snapshot %s to let this member go", c.group)}, true
	},
	func(c *chain) (verdict, bool) {
		if c.content == nil || c.content.Status == nil || c.content.Status.Error == nil {
			return verdict{}, false
		}
		return verdict{RuleBackendError, "backend error: " + errorMessage(c.content.Status.Error)}, true
	},
	(*chain).leftBehind,
	(*chain).creationBlocked,
	(*chain).waitsForSidecar,
	func(c *chain) (verdict, bool) { return verdict{RuleWaitingForController, c.controllerWait()}, true },
}

// leftBehind explains a content whose snapshot is gone, or that waits for its snapshot.
func (c *chain) leftBehind() (verdict, bool) {
	if c.vs != nil || c.content == nil || c.content.DeletionTimestamp != nil {
		return verdict{}, false
	}
	ref := c.content.Spec.VolumeSnapshotRef
	switch {
	case ref.UID == "":
		return verdict{RuleContentUnbound, fmt.Sprintf("pre-provisioned content waits for VolumeSnapshot %s/%s to name it", ref.Namespace, ref.Name)}, true
	case c.content.Spec.DeletionPolicy == snapshotv1.VolumeSnapshotContentRetain:
		return verdict{RuleRetainLeftBehind, fmt.Sprintf("Retain content left behind: VolumeSnapshot %s/%s is gone; backend snapshot %s stays until this content is deleted by hand",
			ref.Namespace, ref.Name, orNone(contentHandle(c.content)))}, true
	}
	return verdict{}, false
}

// creationBlocked explains a snapshot that cannot be created from its inputs.
func (c *chain) creationBlocked() (verdict, bool) {
	if c.vs == nil || c.vs.DeletionTimestamp != nil {
		return verdict{}, false
	}
	switch {
	case c.className != "" && c.class == nil:
		return verdict{RuleClassNotFound, fmt.Sprintf("class %s not found", c.className)}, true
	case c.className == "" && c.content == nil && c.driver != "" && len(c.defaults) != 1:
		return verdict{RuleNoDefaultClass, fmt.Sprintf("%d default VolumeSnapshotClasses for driver %s (want exactly one, or name a class)", len(c.defaults), c.driver)}, true
	case c.claimName != "" && c.content == nil && c.claim == nil:
		return verdict{RuleClaimNotFound, fmt.Sprintf("claim %s not found", c.claimName)}, true
	case c.claim != nil && c.content == nil && c.claim.Status.Phase != corev1.ClaimBound:
		return verdict{RuleClaimNotBound, fmt.Sprintf("claim %s is not bound (phase %s)", c.claimName, orNone(string(c.claim.Status.Phase)))}, true
	case c.volume != nil && c.content == nil && c.volume.Spec.CSI == nil:
		return verdict{RuleNotCSIVolume, fmt.Sprintf("volume %s of claim %s is not a CSI volume", c.volume.Name, c.claimName)}, true
	case c.vs.Status != nil && c.vs.Status.Error != nil:
		return verdict{RuleControllerError, "snapshot-controller reports: " + errorMessage(c.vs.Status.Error)}, true
	case c.vs.Spec.Source.VolumeSnapshotContentName != nil && c.content == nil:
		return verdict{RuleContentNotFound, fmt.Sprintf("content %s not found", c.contentName)}, true
	case c.group != "" && c.content == nil:
		return verdict{RuleGroupMember, fmt.Sprintf("waiting for group snapshot %s to create this member's content", c.group)}, true
	}
	return verdict{}, false
}

// waitsForSidecar explains a content that waits for the driver's sidecar.
func (c *chain) waitsForSidecar() (verdict, bool) {
	content := c.content
	if content == nil {
		return verdict{}, false
	}
	deleting := content.DeletionTimestamp != nil && hasFinalizer(content, protocol.ContentBoundFinalizer)
	// A content whose snapshot is gone waits for the controller to delete it, not for a create.
	creating := c.vs != nil && content.DeletionTimestamp == nil && !protocol.Ready(content) && content.Annotations[protocol.AnnGroupSnapshotHandle] == ""
	if !deleting && !creating {
		return verdict{}, false
	}
	deleteWait := "delete backend snapshot " + orNone(contentHandle(content))
	createWait := "the backend snapshot is not ready yet"
	if content.Annotations[protocol.AnnBeingCreated] != "" {
		deleteWait += " (a CreateSnapshot may still be running: being-created is set)"
		createWait = "CreateSnapshot is in progress"
	}
	return sidecarWait(content.Spec.Driver, c.sidecar, deleting, deleteWait, createWait), true
}

// sidecarWait explains a content of driver that waits for the driver's sidecar (whose Lease is
// h): to deleteWait when it is deleting, else because createWait.
func sidecarWait(driver string, h holder, deleting bool, deleteWait, createWait string) verdict {
	who := "csi-snapshotter of driver " + driver
	if down, ok := sidecarDown(driver, h); ok {
		return verdict{RuleNoSidecar, "waiting for " + who + ": " + down}
	}
	if deleting {
		return verdict{RuleSidecarDeleting, "deletion waits for " + who + " to " + deleteWait + sidecarUp(h)}
	}
	return verdict{RuleSidecarWorking, "waiting for " + who + ": " + createWait + sidecarUp(h)}
}

// controllerWait says what the snapshot-controller has still to do for the chain.
func (c *chain) controllerWait() string {
	var what string
	switch {
	case c.vs == nil:
		ref := c.content.Spec.VolumeSnapshotRef
		what = fmt.Sprintf("delete this content: its VolumeSnapshot %s/%s is gone", ref.Namespace, ref.Name)
	case c.vs.DeletionTimestamp != nil && c.content != nil && c.content.DeletionTimestamp == nil:
		what = fmt.Sprintf("mark content %s being deleted and delete it", c.content.Name)
	case c.vs.DeletionTimestamp != nil:
		what = "remove the snapshot's finalizers"
	case c.content == nil:
		what = fmt.Sprintf("create content %s", c.contentName)
	default:
		what = fmt.Sprintf("copy the status of content %s into the snapshot", c.content.Name)
	}
	return "waiting for the snapshot-controller to " + what + controllerState(c.controller)
}

// sidecarDown tells, when it is known, that no sidecar of driver runs.
func sidecarDown(driver string, h holder) (string, bool) {
	switch {
	case h.Err != nil:
		return "", false
	case h.Lease == "":
		msg := fmt.Sprintf("no sidecar for %s holds a Lease (%s; a sidecar without leader election holds none)",
			driver, strings.Join(protocol.SidecarLeaseNames(driver), " or "))
		if len(h.Ignored) > 0 {
			msg += fmt.Sprintf("; not counted: %s, in a namespace where no csi-snapshotter can run", strings.Join(h.Ignored, ", "))
		}
		return msg, true
	case h.Future:
		return fmt.Sprintf("no sidecar for %s holds a live Lease: %s claims a renewal in the future", driver, h.Lease), true
	case !h.Live:
		return fmt.Sprintf("no sidecar for %s has renewed its lease for %s", driver, human(h.SinceRenewal)), true
	}
	return "", false
}

func sidecarUp(h holder) string {
	if h.Err != nil {
		return " (its liveness is unknown: " + h.Err.Error() + ")"
	}
	return fmt.Sprintf(" (Lease %s held by %s, renewed %s ago)", h.Lease, h.Holder, human(h.SinceRenewal))
}

func controllerState(h holder) string {
	switch {
	case h.Err != nil:
		return " (its liveness is unknown: " + h.Err.Error() + ")"
	case h.Lease == "":
		return fmt.Sprintf(" (no Lease %s: is a snapshot-controller installed? one without leader election holds none)", protocol.ControllerLeaseName)
	case h.Future:
		return fmt.Sprintf(": no snapshot-controller holds a live Lease (%s claims a renewal in the future)", h.Lease)
	case !h.Live:
		return fmt.Sprintf(": no snapshot-controller has renewed its lease for %s", human(h.SinceRenewal))
	}
	return fmt.Sprintf(" (leader %s, renewed %s ago)", h.Holder, human(h.SinceRenewal))
}

// explain applies the chain rules.
func explain(c *chain) verdict {
	if v, ok := firstVerdict(chainRules, c); ok {
		return v
	}
	return verdict{RuleWaitingForController, c.controllerWait()}
}

// firstVerdict is the verdict of the first of rules that applies to x.
func firstVerdict[T any, R ~func(T) (verdict, bool)](rules []R, x T) (verdict, bool) {
	for _, r := range rules {
		if v, ok := r(x); ok {
			return v, true
		}
	}
	return verdict{}, false
}

type groupRule func(*groupChain) (verdict, bool)

// groupRules explain a group snapshot.
var groupRules = []groupRule{
	func(g *groupChain) (verdict, bool) {
		if g.vgs.DeletionTimestamp == nil && protocol.Ready(g.vgs) {
			return verdict{RuleReady, "nothing is wrong: the group snapshot is ready to use"}, true
		}
		return verdict{}, false
	},
	func(g *groupChain) (verdict, bool) {
		if g.vgs.DeletionTimestamp != nil {
			return verdict{}, false
		}
		for _, m := range g.members {
			if msg := memberError(m); msg != "" {
				return verdict{RuleMemberFailed, fmt.Sprintf("member snapshot %s failed: %s", m.vs.Name, msg)}, true
			}
		}
		return verdict{}, false
	},
	func(g *groupChain) (verdict, bool) {
		if g.content == nil || g.content.Status == nil || g.content.Status.Error == nil {
			return verdict{}, false
		}
		return verdict{RuleBackendError, "backend error: " + errorMessage(g.content.Status.Error)}, true
	},
	(*groupChain).creationBlocked,
	(*groupChain).waitsForSidecar,
}

func (g *groupChain) creationBlocked() (verdict, bool) {
	if g.vgs.DeletionTimestamp != nil {
		return verdict{}, false
	}
	for _, pvc := range g.claims {
		if g.content == nil && pvc.Status.Phase != corev1.ClaimBound {
			return verdict{RuleClaimNotBound, fmt.Sprintf("claim %s is not bound (phase %s)", pvc.Name, orNone(string(pvc.Status.Phase)))}, true
		}
	}
	switch {
	case g.className != "" && g.class == nil:
		return verdict{RuleClassNotFound, fmt.Sprintf("class %s not found", g.className)}, true
	case g.className == "" && g.content == nil && g.driver != "" && len(g.defaults) != 1:
		return verdict{RuleNoDefaultClass, fmt.Sprintf("%d default VolumeGroupSnapshotClasses for driver %s (want exactly one, or name a class)", len(g.defaults), g.driver)}, true
	case g.vgs.Spec.Source.Selector != nil && g.content == nil && len(g.claims) == 0:
		return verdict{RuleNoClaims, fmt.Sprintf("no claim in namespace %s matches the selector", g.vgs.Namespace)}, true
	case g.vgs.Status != nil && g.vgs.Status.Error != nil:
		return verdict{RuleControllerError, "snapshot-controller reports: " + errorMessage(g.vgs.Status.Error)}, true
	case g.vgs.Spec.Source.VolumeGroupSnapshotContentName != nil && g.content == nil:
		return verdict{RuleContentNotFound, fmt.Sprintf("content %s not found", g.contentName)}, true
	}
	return verdict{}, false
}

func (g *groupChain) waitsForSidecar() (verdict, bool) {
	content := g.content
	if content == nil {
		return verdict{}, false
	}
	deleting := content.DeletionTimestamp != nil && hasFinalizer(content, protocol.GroupContentBoundFinalizer)
	creating := content.DeletionTimestamp == nil && !protocol.Ready(content)
	if !deleting && !creating {
		return verdict{}, false
	}
	return sidecarWait(content.Spec.Driver, g.sidecar, deleting, "delete backend group snapshot "+orNone(groupHandle(content)),
		"the backend group snapshot is not ready yet"), true
}

func explainGroup(g *groupChain) verdict {
	if v, ok := firstVerdict(groupRules, g); ok {
		return v
	}
	var what string
	switch {
	case g.vgs.DeletionTimestamp != nil && g.content != nil && g.content.DeletionTimestamp == nil:
		what = fmt.Sprintf("mark content %s being deleted and delete it", g.content.Name)
	case g.vgs.DeletionTimestamp != nil:
		what = "remove the group snapshot's finalizers"
	case g.content == nil:
		what = fmt.Sprintf("create content %s", g.contentName)
	default:
		what = fmt.Sprintf("copy the status of content %s into the group snapshot", g.content.Name)
	}
	return verdict{RuleWaitingForController, "waiting for the snapshot-controller to " + what + controllerState(g.controller)}
}

// memberError is the error of a member snapshot or of its content, or "".
func memberError(m *chain) string {
	if m.vs.Status != nil && m.vs.Status.Error != nil {
		return errorMessage(m.vs.Status.Error)
	}
	if m.content != nil && m.content.Status != nil && m.content.Status.Error != nil {
		return errorMessage(m.content.Status.Error)
	}
	return ""
}

func errorMessage(e *snapshotv1.VolumeSnapshotError) string {
	if e.Message == nil || *e.Message == "" {
		return "(no message)"
	}
	return *e.Message
}

func contentHandle(c *snapshotv1.VolumeSnapshotContent) string {
	if c.Status != nil && c.Status.SnapshotHandle != nil {
		return *c.Status.SnapshotHandle
	}
	if c.Spec.Source.SnapshotHandle != nil {
		return *c.Spec.Source.SnapshotHandle
	}
	return ""
}

func groupHandle(c *groupv1.VolumeGroupSnapshotContent) string {
	if c.Status != nil && c.Status.VolumeGroupSnapshotHandle != nil {
		return *c.Status.VolumeGroupSnapshotHandle
	}
	if h := c.Spec.Source.GroupSnapshotHandles; h != nil {
		return h.VolumeGroupSnapshotHandle
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func names(claims []*corev1.PersistentVolumeClaim) string {
	out := make([]string, len(claims))
	for i, c := range claims {
		out[i] = c.Name
	}
	return strings.Join(out, ", ")
}
