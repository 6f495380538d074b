#!/usr/bin/env bash
# verify.sh fails when a Go file is not gofmt-clean, go vet complains, or a generated file is stale
# (it regenerates into a scratch copy of client/ and compares).
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
echo "verify: ok" >&2
