#!/usr/bin/env bash
# render-manifests.sh renders the plain manifests in deploy/manifests from the Helm chart with its
# default values, for clusters without Helm: crds.yaml (the chart's CRDs) and shutter.yaml (the
# namespace and everything else). They are never edited by hand; hack/verify.sh re-renders them
# into a scratch folder and fails when they differ.
#
# Usage: deploy/render-manifests.sh [output-dir]   (default: deploy/manifests)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/deploy/manifests}
chart="$root/deploy/helm/shutter"
namespace=shutter-system
helm="$("$root/hack/build-tools.sh" helm | tail -1)/helm"

mkdir -p "$out"
header="# Rendered from deploy/helm/shutter by deploy/render-manifests.sh (make manifests); do not edit."
{
  echo "$header"
  for f in "$chart"/crds/*.yaml; do
    cat "$f"
  done
} >"$out/crds.yaml"
{
  echo "$header"
  printf -- '---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n' "$namespace"
  # The snapshot-metadata sidecar's certificate: a Secret the user creates (docs/changed-block-tracking.md);
  # a generated one would put a new private key into every render.
  "$helm" template shutter "$chart" --namespace "$namespace" --skip-tests \
    --set hostpath.snapshotMetadata.tls.source=secret
} >"$out/shutter.yaml"
echo "manifests: rendered ${out#"$root"/}/crds.yaml and shutter.yaml" >&2
