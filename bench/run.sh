#!/usr/bin/env bash
# run.sh BUILD_BENCH_DIR: run every benchmark; each prints a table and a JSON line.
set -eu
dir=${1:-build/bench}
cd "$(dirname "$0")/.."
# BENCH_FULL=1 adds the ResNet-50 training step (tens of seconds a step on 2 cores).
for b in "$dir"/bench_*; do
    [ -x "$b" ] || continue
    case "$(basename "$b")" in bench_step | bench_images) continue ;; esac # driven by the side-by-sides below
    echo "=== $(basename "$b")"
    if [ "$(basename "$b")" = bench_conv ] && [ -z "${BENCH_FULL:-}" ]; then "$b" quick; else "$b"; fi
done
# dptrain against PyTorch: the same models, batches, SGD and threads, turn by turn, medians of
# 3 pairs with the range of the ratio. BENCH_FULL=1 adds 2 threads and ResNet-50 (minutes).
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import torch" 2>/dev/null; then
    echo "=== side_by_side.py (dptrain vs PyTorch CPU)"
    /usr/bin/python3 bench/side_by_side.py --pairs 3 $([ -n "${BENCH_FULL:-}" ] || echo --quick)
    echo "=== side_by_side.py --bf16 (dptrain bf16 and fp32 vs PyTorch autocast bf16, peak memory)"
    /usr/bin/python3 bench/side_by_side.py --bf16 --pairs 3 --no-ddp --only cnn,resnet20$([ -n "${BENCH_FULL:-}" ] && echo ,resnet50) \
        $([ -n "${BENCH_FULL:-}" ] || echo --quick)
    echo "=== side_by_side.py --bf16 --peer-channels-last (dptrain's default layout vs PyTorch's channels_last, its fastest here)"
    /usr/bin/python3 bench/side_by_side.py --bf16 --peer-channels-last --pairs 3 --no-ddp --only cnn,resnet20$([ -n "${BENCH_FULL:-}" ] && echo ,resnet50) \
        $([ -n "${BENCH_FULL:-}" ] || echo --quick)
    echo "=== images_side_by_side.py (folder source vs torchvision ImageFolder + DataLoader)"
    /usr/bin/python3 bench/images_side_by_side.py --pairs 3
    echo "=== ae_side_by_side.py (the docs' convolutional autoencoder, transposed convolutions, vs torch.nn)"
    /usr/bin/python3 bench/ae_side_by_side.py --pairs 3
    echo "=== llama_side_by_side.py (the built-in llama vs LlamaForCausalLM in torch.nn, fp32 AdamW)"
    /usr/bin/python3 bench/llama_side_by_side.py --pairs 3
    echo "=== contention.py (dptrain and PyTorch alone and beside one busy process, 2 threads; dptrain with 1 thread too)"
    /usr/bin/python3 bench/contention.py --pairs 3 --only cnn$([ -n "${BENCH_FULL:-}" ] && echo ,mlp,resnet20)
    echo "=== contention.py --adapt (./train's CNN with [train] adapt_threads on and off, alone and beside one busy process)"
    /usr/bin/python3 bench/contention.py --adapt --pairs 3
    if command -v mpirun > /dev/null; then
        echo "=== zero_side_by_side.py ([distributed] zero 0/1/2 vs PyTorch DDP and ZeroRedundancyOptimizer, 2 ranks, AdamW)"
        /usr/bin/python3 bench/zero_side_by_side.py --pairs 3 $([ -n "${BENCH_FULL:-}" ] && echo --full)
    fi
else
    echo "=== side_by_side.py skipped: PyTorch not installed (apt-get install python3-torch)"
fi
for b in "$dir"/mpi_bench_*; do
    [ -x "$b" ] || continue
    echo "=== $(basename "$b") (mpirun -np 2)"
    mpirun --oversubscribe --allow-run-as-root --bind-to core -np 2 "$b"
done
# Over a capped network (scripts/netlab.sh: root and network namespaces): compute alone,
# communication alone, overlap off/on/auto beside PyTorch's gloo DDP, then bucket_mb = auto
# against sizes fixed by hand, then ZeRO's stages with the all-gather overlapped or not; 1 Gbit
# only unless BENCH_FULL=1 (5 Gbit too). About 15 minutes.
if [ "$(id -u)" = 0 ] && ip netns add dpt_bench_probe$$ 2>/dev/null && ip netns del dpt_bench_probe$$ &&
    /usr/bin/python3 -c "import torch" 2>/dev/null; then
    caps=1gbit
    [ -n "${BENCH_FULL:-}" ] && caps=1gbit,5gbit
    echo "=== netlab_bench.py (2 ranks in network namespaces, links capped by tc)"
    /usr/bin/python3 bench/netlab_bench.py --caps $caps --models cnn,resnet20 --pairs 3
    /usr/bin/python3 bench/netlab_bench.py --caps 1gbit --models cnn,resnet20 --pairs 3 --windows 3 --sweep 0.25,0.5,1,4,25
    /usr/bin/python3 bench/netlab_bench.py --caps 1gbit --models cnn,resnet20 --pairs 3 --zero
else
    echo "=== netlab_bench.py skipped: needs root, network namespaces and PyTorch"
fi
