#!/usr/bin/env bash
# fuzz.sh runs the fuzz tests of the hostpath driver's record log for a bounded time each:
# FuzzReplay (replaying a damaged log) and FuzzStartKeepsData (a driver start on a damaged log
# deletes no data). `make fuzz FUZZTIME=10m` runs them longer; `make test` runs them for 20s each.
# New failing inputs land in the package's testdata/fuzz folder; commit them with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-${FUZZTIME:-10m}}
# A fuzz worker that is still running when the time is up is stopped before its t.TempDir is
# removed: give the workers a temporary folder of their own and remove it afterwards.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/shutter-fuzz.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp
go test -run '^$' -fuzz '^FuzzReplay$' -fuzztime "$time" ./pkg/hostpath/state
go test -run '^$' -fuzz '^FuzzStartKeepsData$' -fuzztime "$time" ./pkg/hostpath
