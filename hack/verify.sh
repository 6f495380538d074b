#!/usr/bin/env bash
# verify.sh fails when a Go file is not gofmt-clean, go vet complains, or a generated file is stale
# (it regenerates into a scratch copy of client/ and compares), when the Helm chart's CRDs differ
# from the generated ones, the chart does not lint, or deploy/manifests is not what the chart renders.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

echo "verify: gofmt" >&2
unformatted=$(git ls-files -co --exclude-standard '*.go' | xargs gofmt -l)
if [ -n "$unformatted" ]; then
  echo "verify: gofmt would change:" >&2; echo "$unformatted" >&2; exit 1
fi

echo "verify: go vet" >&2
go vet ./... ./client/...
(cd test/monitoring && GOWORK=off go vet ./...)

echo "verify: generated code" >&2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp -r client "$scratch/client"
GOWORK=off hack/update-codegen.sh "$scratch/client" 2>/dev/null
if ! diff -r client "$scratch/client" >/dev/null; then
  diff -r client "$scratch/client" | head -40 >&2
  echo "verify: generated files are stale; run 'make generate'" >&2
  exit 1
fi

echo "verify: Helm chart and rendered manifests" >&2
if ! diff -r client/config/crd deploy/helm/shutter/crds >/dev/null; then
  diff -r client/config/crd deploy/helm/shutter/crds | head -20 >&2
  echo "verify: the chart's CRDs differ from client/config/crd; run 'make generate'" >&2
  exit 1
fi
helm="$(hack/build-tools.sh helm | tail -1)/helm"
"$helm" lint --strict --quiet deploy/helm/shutter >&2
deploy/render-manifests.sh "$scratch/manifests" 2>/dev/null
if ! diff -r deploy/manifests "$scratch/manifests" >/dev/null; then
  diff -r deploy/manifests "$scratch/manifests" | head -40 >&2
  echo "verify: deploy/manifests is stale; run 'make manifests'" >&2
  exit 1
fi
echo "verify: ok" >&2
