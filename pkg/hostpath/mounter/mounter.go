// Package mounter names what the hostpath driver's node service asks of the kernel, so that
// the driver (its kernel implementation) and hostpathtest (an in-memory one and the contract
// both keep) share one definition.
package mounter

// Interface is what the node service asks of the kernel: bind mounts of volumes at the paths
// kubelet gives, and the loop devices that make block volumes' files devices. The kernel's
// needs root; hostpathtest.FakeMounter keeps the same contract in memory, so that the node
// service's logic is tested as any user.
type Interface interface {
	// Bind mounts source at target, which exists: a folder for a folder, a file for a device
	// node. flags may hold unix.MS_RDONLY, MS_NOSUID and MS_NODEV, which the mount then has.
	Bind(source, target string, flags uintptr) error
	// Unmount removes every mount stacked at target; none is success.
	Unmount(target string) error
	// IsMountPoint reports whether something is mounted at path.
	IsMountPoint(path string) (bool, error)
	// AttachLoop returns the node of a loop device backed by the file at path, read-only or
	// not, attaching one when there is none. It stays attached until DetachLoop.
	AttachLoop(path string, readOnly bool) (string, error)
	// DetachLoop detaches the loop devices backed by the file at path that are read-only or
	// not; one still open goes once its last user closes it. None is success.
	DetachLoop(path string, readOnly bool) error
	// ResizeLoops makes the loop devices backed by the file at path take its size.
	ResizeLoops(path string) error
	// SyncLoops writes what the read-write loop devices backed by the file at path hold in
	// their caches to the file, so that a copy of the file has what was written to them.
	SyncLoops(path string) error
}
