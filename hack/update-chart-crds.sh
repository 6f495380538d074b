#!/usr/bin/env bash
# update-chart-crds.sh copies the generated CRDs (client/config/crd) into the Helm chart's crds/
# folder, removing any the generator no longer makes. `make generate` runs it after codegen, and
# hack/verify.sh fails when the chart's copies differ.
#
# Usage: hack/update-chart-crds.sh [chart-crd-dir]   (default: deploy/helm/shutter/crds)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dst=${1:-$root/deploy/helm/shutter/crds}
mkdir -p "$dst"
rm -f "$dst"/*.yaml
cp "$root"/client/config/crd/*.yaml "$dst"/
echo "chart-crds: copied $(ls "$root"/client/config/crd/*.yaml | wc -l) CRDs into ${dst#"$root"/}" >&2
