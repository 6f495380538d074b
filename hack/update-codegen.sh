#!/usr/bin/env bash
# update-codegen.sh regenerates everything derived from client/apis: deepcopy functions, the typed
# clientset with its fake, listers, informers and the CRDs (controller-gen writes v1; hack/crdversions
# adds the older versions clusters may still store). Generated files are never edited by
# hand; `make verify` runs this into a scratch copy and fails when the result differs.
#
# Usage: hack/update-codegen.sh [client-dir]   (default: ./client)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
client=$(cd "${1:-$root/client}" && pwd)
bin=$("$root/hack/build-tools.sh" controller-gen client-gen deepcopy-gen informer-gen lister-gen | tail -1)
header="$root/hack/boilerplate.go.txt"
pkg=github.com/shutter-csi/shutter/client
apis=(volumesnapshot/v1 volumegroupsnapshot/v1 snapshotschedule/v1alpha1 snapshotmetadataservice/v1beta1)

cd "$client"
rm -rf clientset listers informers config/crd
find apis -name 'zz_generated.*.go' -delete

echo "codegen: deepcopy" >&2
"$bin/deepcopy-gen" --go-header-file "$header" --output-file zz_generated.deepcopy.go \
  "${apis[@]/#/./apis/}"

echo "codegen: clientset" >&2
"$bin/client-gen" --go-header-file "$header" --clientset-name versioned \
  --input-base "$pkg/apis" --input "$(IFS=,; echo "${apis[*]}")" \
  --output-pkg "$pkg/clientset" --output-dir clientset

echo "codegen: listers" >&2
"$bin/lister-gen" --go-header-file "$header" --output-pkg "$pkg/listers" --output-dir listers \
  "${apis[@]/#/$pkg/apis/}"

echo "codegen: informers" >&2
"$bin/informer-gen" --go-header-file "$header" --output-pkg "$pkg/informers" --output-dir informers \
  --versioned-clientset-package "$pkg/clientset/versioned" --listers-package "$pkg/listers" \
  "${apis[@]/#/$pkg/apis/}"

echo "codegen: CRDs" >&2
"$bin/controller-gen" crd:crdVersions=v1 paths=./apis/... output:crd:dir=config/crd

echo "codegen: CRD versions (v1beta1, v1beta2 beside v1)" >&2
(cd "$root" && go run ./hack/crdversions "$client/config/crd")
