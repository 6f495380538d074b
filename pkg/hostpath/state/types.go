//go:build linux

package state

import (
	"io/fs"
	"time"
)

// AccessType says how a volume's data is laid out on disk.
type AccessType string

const (
	// AccessMount volumes are a directory.
	AccessMount AccessType = "mount"
	// AccessBlock volumes are a sparse regular file of the volume's size.
	AccessBlock AccessType = "block"
)

// Volume is the persisted record of one volume.
type Volume struct {
	ID            string     `json:"id"`
	Name          string     `json:"name"`
	CapacityBytes int64      `json:"capacityBytes"`
	AccessType    AccessType `json:"accessType"`
	// Topology is the segment set the volume is accessible from, if any.
	Topology map[string]string `json:"topology,omitempty"`
	// SourceSnapshotID or SourceVolumeID name the content source.
	SourceSnapshotID  string            `json:"sourceSnapshotID,omitempty"`
	SourceVolumeID    string            `json:"sourceVolumeID,omitempty"`
	Parameters        map[string]string `json:"parameters,omitempty"`
	MutableParameters map[string]string `json:"mutableParameters,omitempty"`
	// Attachments maps node ID to whether the volume is attached read-only.
	Attachments map[string]bool `json:"attachments,omitempty"`
	// Staged is the staging path on this node, if staged.
	Staged string `json:"staged,omitempty"`
	// Published maps target paths on this node to read-only.
	Published map[string]bool `json:"published,omitempty"`
	// SingleWriter is true when the volume was created with an access mode
	// that allows one publication only (SINGLE_NODE_SINGLE_WRITER).
	SingleWriter bool      `json:"singleWriter,omitempty"`
	CreatedAt    time.Time `json:"createdAt"`
	// Image says a filesystem volume's data is an ext4 filesystem in the
	// image file images/<id>, mounted at the volume's folder, rather than
	// the folder itself.
	Image bool `json:"image,omitempty"`
}

// Snapshot is the persisted record of one snapshot. A record is written only
// once the snapshot's data is complete, so every record is ready to use.
type Snapshot struct {
	ID              string            `json:"id"`
	Name            string            `json:"name"`
	SourceVolumeID  string            `json:"sourceVolumeID"`
	AccessType      AccessType        `json:"accessType"`
	SizeBytes       int64             `json:"sizeBytes"`
	GroupSnapshotID string            `json:"groupSnapshotID,omitempty"`
	Topology        map[string]string `json:"topology,omitempty"`
	CreatedAt       time.Time         `json:"createdAt"`
	// Manifest summarises the snapshot's data. The record may reach the
	// disk before the data's directories do; after a power failure the
	// driver keeps only snapshots whose data still matches it. Records
	// from before manifests were kept have none.
	Manifest *Manifest `json:"manifest,omitempty"`
	// Empty says the source volume held no data: a filesystem volume whose
	// root directory had no entries, or a block volume whose file had no
	// data extent. Such a snapshot has no data on disk; SizeBytes and Mode
	// are all it takes to rebuild the volume. Records from before empty
	// snapshots were kept as records only are not empty.
	Empty bool `json:"empty,omitempty"`
	// Mode holds the permission bits of an empty snapshot's source: of the
	// root directory of a filesystem volume, of a block volume's file.
	Mode fs.FileMode `json:"mode,omitempty"`
	// UID and GID own an empty snapshot's source root; a volume restored
	// from it gets them when the driver runs as root.
	UID uint32 `json:"uid,omitempty"`
	GID uint32 `json:"gid,omitempty"`
	// ImageBytes, when set, is the size of the copy of the source's
	// filesystem image that a snapshot of an image volume keeps besides its
	// data, taken with the snapshot-metadata service on: its block ranges
	// are what GetMetadataAllocated and GetMetadataDelta report. It is
	// written and flushed before the record; an empty snapshot may have one.
	ImageBytes int64 `json:"imageBytes,omitempty"`
}

// Manifest summarises a data tree: the number of directories, regular
// files and symlinks in it (the root included) and the regular files' total
// size.
type Manifest struct {
	Entries int64 `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// GroupSnapshot is the persisted record of a volume group snapshot. Its
// member snapshots carry its ID in GroupSnapshotID.
type GroupSnapshot struct {
	ID              string    `json:"id"`
	Name            string    `json:"name"`
	SourceVolumeIDs []string  `json:"sourceVolumeIDs"`
	SnapshotIDs     []string  `json:"snapshotIDs"`
	CreatedAt       time.Time `json:"createdAt"`
}

// PendingRestore marks a volume restored from a snapshot whose data may not
// be on disk yet. It is written, durably, before the copy starts and
// removed once the volume's data has been flushed.
type PendingRestore struct {
	VolumeID   string `json:"volumeID"`
	SnapshotID string `json:"snapshotID"`
	// BootID is the kernel's boot ID when the copy was made. A finished
	// copy is complete in the device or the page cache as long as the
	// kernel has not restarted.
	BootID string `json:"bootID"`
	// Copied is set, without a flush, once the copy has finished. Without
	// it the copy may be incomplete.
	Copied bool `json:"copied,omitempty"`
}
