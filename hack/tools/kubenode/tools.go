//go:build tools

// Package tools records the mains of the local node's kubelet and kube-scheduler (same version as hack/tools/kube) built by hack/build-tools.sh.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
