#!/usr/bin/env bash
# run.sh BUILD_BENCH_DIR: run every benchmark; each prints a table and a JSON line.
set -eu
dir=${1:-build/bench}
cd "$(dirname "$0")/.."
for b in "$dir"/bench_*; do
    [ -x "$b" ] || continue
    echo "=== $(basename "$b")"
    "$b"
done
