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
for b in "$dir"/mpi_bench_*; do
    [ -x "$b" ] || continue
    echo "=== $(basename "$b") (mpirun -np 2)"
    mpirun --oversubscribe --allow-run-as-root --bind-to core -np 2 "$b"
done
