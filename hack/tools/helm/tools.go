//go:build tools

// Package tools records the helm main built by hack/build-tools.sh.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
