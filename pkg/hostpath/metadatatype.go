package hostpath

import "fmt"

// The answers of the SnapshotMetadata service (Options.SnapshotMetadataBlockType).
const (
	BlockTypeVariable = "VARIABLE_LENGTH"
	BlockTypeFixed    = "FIXED_LENGTH"
	// MetadataBlockSize is the size of every FIXED_LENGTH block, and the granularity at which
	// deltas are reported in both modes.
	MetadataBlockSize = 4096
)

func checkBlockType(t string) error {
	switch t {
	case "", BlockTypeVariable, BlockTypeFixed:
		return nil
	}
	return fmt.Errorf("--snapshot-metadata-block-type %q: want %s or %s", t, BlockTypeVariable, BlockTypeFixed)
}
