// Module cni pins the CNI loopback plugin of the local node.
module github.com/shutter-csi/shutter/hack/tools/cni

go 1.26.8

require github.com/containernetworking/plugins v1.10.0

require (
	github.com/containernetworking/cni v1.3.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
