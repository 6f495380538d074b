// Package snapshotmetadata tests the snapshot-metadata sidecar end to end on a real control plane:
// the hostpath driver and the sidecar run in the test process, the callers are real
// ServiceAccounts with real tokens and RBAC, and the clients are Shutter's own
// (pkg/changedblocks) and upstream's pkg/iterator.
package snapshotmetadata
