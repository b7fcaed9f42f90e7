#!/usr/bin/env bash
# gpu_check.sh: on a machine with a GPU, in one go: build with CUDA, run every GPU test
# (each CUDA op against the CPU op), a short training run on cuda:0, and the GPU numbers,
# then print a short table. Finishes in a few minutes on one GPU.
# A bare GPU machine without Debian's packages: run scripts/fetch_debs.sh where apt works,
# carry .debs/ along, and this script unpacks them first.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
if [ -d .debs ] && ls .debs/*.deb >/dev/null 2>&1; then
    for f in .debs/*.deb; do dpkg -x "$f" / ; done
    ldconfig
fi
row() { printf '%-44s %s\n' "$1" "$2" | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1 | sed 's/^/gpu: /' | tee -a "$out/summary.txt"

start=$(date +%s)
if make -j"$(nproc)" all > "$out/build.log" 2>&1; then row "build (make all)" "ok in $(( $(date +%s) - start )) s"
else row "build (make all)" "FAILED (see build.log)"; tail -20 "$out/build.log"; exit 1; fi
grep -q "cuda=yes" "$out/build.log" && row "cuda in the build" "yes" || row "cuda in the build" "NO"
./train --env 2>&1 | tee "$out/env.txt" | sed 's/^/  /'

build/tests/test_cuda > "$out/test_cuda.log" 2>&1; rc=$?
row "test_cuda (each op vs CPU)" "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) \] [0-9]+ test' "$out/test_cuda.log" | tr '\n' ' ') (exit $rc)"
grep -E "ERROR|FAIL" "$out/test_cuda.log" | head -10

./train configs/fmnist_mlp.ini --set train.device=cuda --set train.epochs=2 --set log.interval=200 \
    --set log.metrics="$out/mlp_cuda.jsonl" > "$out/train_mlp_cuda.log" 2>&1; rc=$?
row "fmnist_mlp on cuda, 2 epochs" "$(grep -o 'final test acc [0-9.]*%' "$out/train_mlp_cuda.log") (exit $rc)"
row "  img/s (last progress line)" "$(grep -o '[0-9]* img/s' "$out/train_mlp_cuda.log" | tail -1)"
./train configs/fmnist_mlp.ini --set train.device=cpu --set train.epochs=1 --set log.interval=200 > "$out/train_mlp_cpu.log" 2>&1
row "  same on the CPU ($(nproc) cores), img/s" "$(grep -o '[0-9]* img/s' "$out/train_mlp_cpu.log" | tail -1)"
./train configs/resnet.ini --set train.device=cuda --set train.max_steps=5 > "$out/train_resnet_cuda.log" 2>&1
row "resnet.ini on cuda" "$(grep -o 'not available on the cuda backend yet' "$out/train_resnet_cuda.log" | head -1 || echo see log)"
if /usr/bin/python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    /usr/bin/python3 bench/peer_pytorch.py --device cuda --models mlp > "$out/peer.log" 2>&1
    row "PyTorch peer (mlp, cuda)" "$(tail -1 "$out/peer.log")"
fi
row "total time" "$(( $(date +%s) - start )) s"
