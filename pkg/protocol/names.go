package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Name prefixes of objects the controller creates.
const (
	contentPrefix      = "snapcontent-"
	groupContentPrefix = "groupsnapcontent-"
	memberPrefix       = "snapshot-"

	// DefaultSnapshotNamePrefix and DefaultGroupSnapshotNamePrefix prefix the names sent in CSI
	// CreateSnapshot and CreateVolumeGroupSnapshot.
	DefaultSnapshotNamePrefix      = "snapshot"
	DefaultGroupSnapshotNamePrefix = "groupsnapshot"
)

// ContentName is the name of the dynamic VolumeSnapshotContent of the snapshot with uid.
func ContentName(snapshotUID types.UID) string { return contentPrefix + string(snapshotUID) }

// GroupContentName is the name of the dynamic VolumeGroupSnapshotContent of the group with uid.
func GroupContentName(groupUID types.UID) string { return groupContentPrefix + string(groupUID) }

// memberHash identifies a member of a dynamic group snapshot.
func memberHash(groupUID types.UID, volumeHandle string) string {
	sum := sha256.Sum256([]byte(string(groupUID) + volumeHandle))
	return hex.EncodeToString(sum[:])
}

// MemberSnapshotName is the name of the VolumeSnapshot made for one volume of a group snapshot.
func MemberSnapshotName(groupUID types.UID, volumeHandle string) string {
	return memberPrefix + memberHash(groupUID, volumeHandle)
}

// MemberContentName is the name of the VolumeSnapshotContent made for one volume of a group.
func MemberContentName(groupUID types.UID, volumeHandle string) string {
	return contentPrefix + memberHash(groupUID, volumeHandle)
}

// MemberContentOf is the name of the content made with member snapshot name (MemberSnapshotName)
// for the same volume, and false for a name that is not a member's.
func MemberContentOf(snapshotName string) (string, bool) {
	hash, ok := strings.CutPrefix(snapshotName, memberPrefix)
	if !ok || len(hash) != sha256.Size*2 {
		return "", false
	}
	return contentPrefix + hash, true
}

// BackendName is the name sent to the driver in CreateSnapshot (or CreateVolumeGroupSnapshot):
// prefix, a dash and the snapshot's uid. A uuidLength above zero keeps only that many characters
// of the uid with its dashes removed.
func BackendName(prefix string, uid types.UID, uuidLength int) string {
	id := string(uid)
	if uuidLength > 0 {
		id = strings.ReplaceAll(id, "-", "")
		if uuidLength < len(id) {
			id = id[:uuidLength]
		}
	}
	return prefix + "-" + id
}
