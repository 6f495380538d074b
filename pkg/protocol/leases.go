package protocol

import (
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// Leader-election Leases. They are no part of the snapshot API, but every snapshot controller and
// csi-snapshotter sidecar that runs with leader election holds one, in its own namespace, and
// renews it every few seconds: a Lease that nobody renews tells that no such component runs.
const (
	// ControllerLeaseName is the Lease of the snapshot-controller (Shutter's and the reference
	// implementation use the same name).
	ControllerLeaseName = "snapshot-controller-leader"

	shutterSidecarLeasePrefix   = "shutter-snapshotter-"
	referenceSidecarLeasePrefix = "external-snapshotter-leader-"
)

// SidecarLeaseNames returns the names of the Leases that the csi-snapshotter sidecars of driver
// hold: first the one Shutter's sidecar and the reference sidecar share, then the one Shutter's
// sidecars held before v0.2 (LegacySidecarLeaseName). Both are derived from the driver's name.
func SidecarLeaseNames(driver string) []string {
	return []string{SidecarLeaseName(driver), LegacySidecarLeaseName(driver)}
}

// LegacySidecarLeaseName is the Lease Shutter's sidecars of driver held before they took the
// reference sidecar's name: the driver's name in lower case, every character a Lease name cannot
// hold replaced by a dash. A sidecar that leads waits until a Lease of this name has lapsed, so
// an older replica still running during a rolling update never works beside it.
func LegacySidecarLeaseName(driver string) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, driver)
	return shutterSidecarLeasePrefix + strings.Trim(name, "-.")
}

// SidecarLeaseName is the leader election Lease of the csi-snapshotter sidecars of driver,
// Shutter's and the reference implementation's alike, so that replacing one image with the other
// in a running Deployment never lets two leaders work at once: every character of
// "external-snapshotter-leader-<driver>" other than a letter, digit or dash becomes a dash, and a
// trailing dash is followed by an "X".
func SidecarLeaseName(driver string) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, referenceSidecarLeasePrefix+driver)
	if strings.HasSuffix(name, "-") {
		name += "X"
	}
	return name
}

// MaxClockSkew is how far in the future a Lease's renewal may lie and still count: clocks of
// machines differ a little. A renewal later than that was not made by a running component's
// clock, and would keep the Lease live for ever.
const MaxClockSkew = time.Minute

// MaxLeaseDuration is the longest duration a Lease is taken to have: a Lease that claims more
// (leader election uses seconds) is live this long after its renewal at most.
const MaxLeaseDuration = 5 * time.Minute

// LeaseState is what a Lease tells about its holder at a moment.
type LeaseState struct {
	// Live is true while the Lease's last renewal is younger than its duration.
	Live bool
	// Holder is the identity of the holder, or "".
	Holder string
	// SinceRenewal is the time since the last renewal (or acquisition); 0 when unknown or in
	// the future.
	SinceRenewal time.Duration
	// Future is true when the renewal lies more than MaxClockSkew after now: not live.
	Future bool
}

// ReadLease tells whether lease is held at now. Whether its namespace is one where the
// component can run is the caller's question (kube.LeaseNamespaces).
func ReadLease(lease *coordinationv1.Lease, now time.Time) LeaseState {
	var st LeaseState
	if lease.Spec.HolderIdentity != nil {
		st.Holder = *lease.Spec.HolderIdentity
	}
	renewed := lease.Spec.RenewTime
	if renewed == nil {
		renewed = lease.Spec.AcquireTime
	}
	if renewed == nil {
		return st
	}
	if renewed.Time.After(now.Add(MaxClockSkew)) {
		st.Future = true
		return st
	}
	st.SinceRenewal = max(now.Sub(renewed.Time), 0)
	duration := 15 * time.Second
	if lease.Spec.LeaseDurationSeconds != nil {
		duration = min(time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second, MaxLeaseDuration)
	}
	st.Live = st.Holder != "" && st.SinceRenewal < duration
	return st
}
