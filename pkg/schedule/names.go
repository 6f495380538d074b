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

// hashLength is how many hex digits of the hash stand in for a name too long to spell out.
const hashLength = 10

// SnapshotName is the name of the snapshot a schedule takes of claim for the run at t (the
// group snapshot's name when claim is empty): <schedule>-<claim>-<UTC time>. It depends on
// nothing else, so a restarted controller or a second replica finds the run already taken.
// When longer than 63 characters, the schedule and claim part is cut and a hash of the whole of
// it is added, so names stay distinct.
func SnapshotName(schedule, claim string, t time.Time) string {
	base := schedule
	if claim != "" {
		base += "-" + claim
	}
	stamp := t.UTC().Format(nameTimeLayout)
	if len(base)+1+len(stamp) <= maxNameLength {
		return base + "-" + stamp
	}
	sum := sha256.Sum256([]byte(schedule + "/" + claim))
	hash := hex.EncodeToString(sum[:])[:hashLength]
	keep := maxNameLength - len(stamp) - len(hash) - 2
	prefix := strings.TrimRight(base[:keep], "-.")
	return prefix + "-" + hash + "-" + stamp
}
