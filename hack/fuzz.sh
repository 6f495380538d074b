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

# fuzz runs the fuzz test $1 of package folder $2 for $time. Go 1.26's fuzzing coordinator can
# report the end of -fuzztime itself as a failure, "context deadline exceeded", without any
# failing input (golang/go#75804, fixed in Go 1.27): such an end is not counted. A real failure
# writes its input under testdata/fuzz/$1 and fails the run.
fuzz() {
  local name=$1 pkg=$2
  local corpus=$pkg/testdata/fuzz/$name log=$tmp/$name.log before
  before=$(ls "$corpus" 2>/dev/null || true)
  if go test -run '^$' -fuzz "^$name\$" -fuzztime "$time" "$pkg" 2>&1 | tee "$log"; then
    return 0
  fi
  if [ "$(ls "$corpus" 2>/dev/null || true)" = "$before" ] && grep -qx '    context deadline exceeded' "$log"; then
    echo "fuzz.sh: $name ended with Go's end-of-fuzztime race (golang/go#75804) and wrote no failing input: not a failure" >&2
    return 0
  fi
  return 1
}

fuzz FuzzReplay ./pkg/hostpath/state
fuzz FuzzStartKeepsData ./pkg/hostpath
