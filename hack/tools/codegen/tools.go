//go:build tools

// Package tools records the generators run by hack/update-codegen.sh: code-generator's version
// is the one whose kube_codegen.sh it sources (which installs the generators it runs itself), and
// controller-gen, which hack/build-tools.sh builds.
package tools

import (
	_ "k8s.io/code-generator/cmd/client-gen"
	_ "k8s.io/code-generator/cmd/deepcopy-gen"
	_ "k8s.io/code-generator/cmd/informer-gen"
	_ "k8s.io/code-generator/cmd/lister-gen"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
