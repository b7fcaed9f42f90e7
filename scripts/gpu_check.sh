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
./train configs/resnet.ini --set train.device=cuda --set train.max_steps=60 --set log.interval=20 --set data.test_limit=1000 > "$out/train_resnet_cuda.log" 2>&1
row "resnet.ini on cuda, 60 steps" "$(grep -o "loss [0-9.]*" "$out/train_resnet_cuda.log" | tail -1), $(grep -o "[0-9]* img/s" "$out/train_resnet_cuda.log" | tail -1)"
for b in 64 128; do
    ./train configs/resnet50_synthetic.ini --set train.device=cuda --set train.batch=$b --set train.eval_batch=$b \
        --set train.max_steps=30 --set log.interval=10 > "$out/r50_b$b.log" 2>&1
    row "resnet50 synthetic 224px, batch $b, img/s" "$(grep -o '[0-9]* img/s' "$out/r50_b$b.log" | tail -1) (steps 21-30)"
done
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    python3 bench/peer_pytorch.py --device cuda --models mlp,cnn,resnet20,resnet50 > "$out/peer.log" 2>&1
    sed 's/^/  /' "$out/peer.log" | head -8 | tee -a "$out/summary.txt"
fi
row "total time" "$(( $(date +%s) - start )) s"
