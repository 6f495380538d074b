#!/usr/bin/env bash
# update-codegen.sh regenerates everything derived from client/apis with code-generator's
# kube_codegen.sh, as client-go recommends: deepcopy functions, OpenAPI definitions, apply
# configurations with a type converter from those definitions, the typed clientset (with Apply,
# and a fake whose NewClientset tracks managed fields with that converter), listers and
# informers; then the CRDs (controller-gen writes v1; hack/crdversions adds the older versions
# clusters may still store). Generated files are never edited by
# hand; `make verify` runs this into a scratch copy and fails when the result differs.
#
# Usage: hack/update-codegen.sh [client-dir]   (default: ./client)
#        UPDATE_API_VIOLATIONS=1 rewrites hack/openapi-violations.list, the API rule violations
#        openapi-gen reports (the shapes are the public API's: they are recorded, not fixed)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
client=$(cd "${1:-$root/client}" && pwd)
bin=$("$root/hack/build-tools.sh" controller-gen | tail -1)
header="$root/hack/boilerplate.go.txt"
# kube_codegen.sh sets a global "pkg": ours has another name.
client_pkg=github.com/shutter-csi/shutter/client

# code-generator's own script, of the version hack/tools/codegen pins. It installs the generators
# it runs into GOBIN: a folder of the tool cache per code-generator version, so they are built once.
export GOWORK=off
codegen=$(cd "$root/hack/tools/codegen" && go mod download k8s.io/code-generator && go list -m -f "{{.Dir}}" k8s.io/code-generator)
cache="${SHUTTER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shutter}"
export GOBIN="$cache/build/kube-codegen-$(basename "$codegen" | sed 's/.*@//')-$(go env GOVERSION)"
mkdir -p "$GOBIN"
# shellcheck source=/dev/null
source "$codegen/kube_codegen.sh"

# kube_codegen.sh's gen_openapi makes a temporary report file it never removes: every temporary
# file goes into a folder of ours that goes at exit.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export TMPDIR="$scratch"

cd "$client"
rm -rf clientset listers informers applyconfiguration config/crd
find apis -name 'zz_generated.*.go' -delete

echo "codegen: deepcopy" >&2
kube::codegen::gen_helpers --boilerplate "$header" apis

echo "codegen: OpenAPI definitions" >&2
kube::codegen::gen_openapi --boilerplate "$header" --output-dir openapi --output-pkg "$client_pkg/openapi" \
  --report-filename "$root/hack/openapi-violations.list" ${UPDATE_API_VIOLATIONS:+--update-report} apis
schema="$scratch/models-schema.json"
go run ./openapi/cmd/models-schema >"$schema"

echo "codegen: apply configurations, clientset, listers, informers" >&2
kube::codegen::gen_client --boilerplate "$header" --output-dir . --output-pkg "$client_pkg" \
  --with-applyconfig --applyconfig-openapi-schema "$schema" --with-watch apis

echo "codegen: CRDs" >&2
"$bin/controller-gen" crd:crdVersions=v1 paths=./apis/... output:crd:dir=config/crd

echo "codegen: CRD versions (v1beta1, v1beta2 beside v1)" >&2
(cd "$root" && go run ./hack/crdversions "$client/config/crd")
