#!/usr/bin/env bash
# run.sh BUILD_BENCH_DIR: run every benchmark; each prints a table and a JSON line.
set -eu
dir=${1:-build/bench}
cd "$(dirname "$0")/.."
# BENCH_FULL=1 adds the ResNet-50 training step (tens of seconds a step on 2 cores).
for b in "$dir"/bench_*; do
    [ -x "$b" ] || continue
    echo "=== $(basename "$b")"
    if [ "$(basename "$b")" = bench_conv ] && [ -z "${BENCH_FULL:-}" ]; then "$b" quick; else "$b"; fi
done | tee /tmp/dpt_bench.out
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import torch" 2>/dev/null; then
    echo "=== peer_pytorch.py (PyTorch CPU, same models, batch and threads)"
    /usr/bin/python3 bench/peer_pytorch.py --threads "$(nproc)" --ours /tmp/dpt_bench.out \
        --models "mlp,cnn,resnet20${BENCH_FULL:+,resnet50}"
else
    echo "=== peer_pytorch.py skipped: PyTorch not installed (apt-get install python3-torch)"
fi
for b in "$dir"/mpi_bench_*; do
    [ -x "$b" ] || continue
    echo "=== $(basename "$b") (mpirun -np 2)"
    mpirun --oversubscribe --allow-run-as-root --bind-to core -np 2 "$b"
done
