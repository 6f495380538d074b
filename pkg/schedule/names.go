package schedule

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
)

// nameTimeLayout is the run's time in a snapshot name: UTC, to the minute (cron's resolution).
const nameTimeLayout = "20060102t1504z"

// maxNameLength keeps snapshot names short enough for a label value and a terminal column,
// well within the 253 characters of an object name.
const maxNameLength = 63

// hashLength is how many hex digits of the hash of schedule and claim a name carries.
const hashLength = 8

// SnapshotName is the name of the snapshot a schedule takes of claim for the run at t:
// <schedule>-<claim>-<hash>-<UTC time>, where hash is the start of the SHA-256 of
// "<schedule>/<claim>". Names hold dashes, so schedule a with claim b-c and schedule a-b with
// claim c would spell the same <schedule>-<claim>; the hash keeps them apart ("/" is in no name).
// A group snapshot (claim empty) is <schedule>-<UTC time>: one schedule, one name. A name longer
// than 63 characters has its schedule and claim part cut (and a group name gains the hash).
//
// The name depends on nothing else, so a controller that takes a run again finds what it took.
// Being predictable, it may be taken by someone else first: the schedule then takes the run
// under a name the API server generates from this one (see kind.create).
func SnapshotName(schedule, claim string, t time.Time) string {
	stamp := t.UTC().Format(nameTimeLayout)
	if claim == "" && len(schedule)+1+len(stamp) <= maxNameLength {
		return schedule + "-" + stamp
	}
	base := schedule
	if claim != "" {
		base += "-" + claim
	}
	sum := sha256.Sum256([]byte(schedule + "/" + claim))
	hash := hex.EncodeToString(sum[:])[:hashLength]
	if keep := maxNameLength - len(stamp) - len(hash) - 2; len(base) > keep {
		base = strings.TrimRight(base[:keep], "-.")
	}
	return base + "-" + hash + "-" + stamp
}
