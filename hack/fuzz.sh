#!/usr/bin/env bash
# fuzz.sh runs the fuzz tests of the hostpath driver's record log for a bounded time each:
# FuzzReplay (replaying a damaged log) and FuzzStartKeepsData (a driver start on a damaged log
# deletes no data). `make fuzz FUZZTIME=10m` runs them longer; `make test` runs them for 20s each.
# New failing inputs land in the package's testdata/fuzz folder; commit them with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-${FUZZTIME:-10m}}
go test -run '^$' -fuzz '^FuzzReplay$' -fuzztime "$time" ./pkg/hostpath/state
go test -run '^$' -fuzz '^FuzzStartKeepsData$' -fuzztime "$time" ./pkg/hostpath
