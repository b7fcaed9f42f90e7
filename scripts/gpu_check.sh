#!/usr/bin/env bash
# gpu_check.sh: on a machine with a GPU, in one go: build with CUDA, run every GPU test
# (each CUDA op and layer against the CPU one), short training runs on cuda:0 (alone, under
# mpirun over NCCL, DataParallel when there are two GPUs), the out-of-memory report, and
# the GPU numbers (GEMM/conv GFLOP/s, ResNet-50 img/s at batch 64/128 with and without
# prefetch and TF32, PyTorch on the same GPU), then print a short table. Every step has its
# own time limit so one hang cannot eat the session; the whole run stays under 8 minutes.
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
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
row() { printf '%-52s %s\n' "$1" "$2" | tee -a "$out/summary.txt"; }
imgs() { grep -o '[0-9]* img/s' "$1" | tail -1 | grep -o '[0-9]*'; }
why() { [ "$1" -ne 0 ] && grep -m2 -E "error|fatal|FAIL|HINT" "$2" | sed 's/^/    /' | tee -a "$out/summary.txt"; }
: > "$out/summary.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1 | sed 's/^/gpu: /' | tee -a "$out/summary.txt"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

start=$(date +%s)
if make -j"$(nproc)" all > "$out/build.log" 2>&1; then row "build (make all)" "ok in $(( $(date +%s) - start )) s"
else row "build (make all)" "FAILED (see build.log)"; tail -20 "$out/build.log"; exit 1; fi
grep -q "cuda=yes" "$out/build.log" && row "cuda in the build" "$(grep -o 'cuda=yes.*' "$out/build.log" | head -1)" || row "cuda in the build" "NO"
timeout 30 ./train --env 2>&1 | tee "$out/env.txt" | sed 's/^/  /'

# 1. correctness: every op and layer against the CPU
timeout 240 build/tests/test_cuda > "$out/test_cuda.log" 2>&1; rc=$?
row "test_cuda (ops, layers, loader, NCCL vs CPU)" "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) \] [0-9]+ test' "$out/test_cuda.log" | tr '\n' ' ') (exit $rc)"
grep -E "ERROR|FAIL|max rel|skipped" "$out/test_cuda.log" | head -12

# 2. training runs: loss must go down
timeout 120 ./train configs/fmnist_mlp.ini --set train.device=cuda --set train.epochs=2 --set log.interval=200 \
    --set log.metrics="$out/mlp_cuda.jsonl" > "$out/train_mlp_cuda.log" 2>&1; rc=$?
row "fmnist_mlp on cuda, 2 epochs" "$(grep -o 'final test acc [0-9.]*%' "$out/train_mlp_cuda.log") (exit $rc), $(imgs "$out/train_mlp_cuda.log") img/s"
why $rc "$out/train_mlp_cuda.log"
timeout 120 ./train configs/resnet.ini --set train.device=cuda --set train.max_steps=200 --set log.interval=50 \
    --set data.test_limit=2000 > "$out/train_resnet_cuda.log" 2>&1; rc=$?
row "resnet.ini (ResNet-20) on cuda, 200 steps" "loss $(grep -o 'loss [0-9.]*' "$out/train_resnet_cuda.log" | head -1 | cut -d' ' -f2) -> $(grep -o 'loss [0-9.]*' "$out/train_resnet_cuda.log" | sed -n 4p | cut -d' ' -f2), $(grep -o 'final test acc [0-9.]*%' "$out/train_resnet_cuda.log") (exit $rc), $(imgs "$out/train_resnet_cuda.log") img/s"
why $rc "$out/train_resnet_cuda.log"
timeout 120 mpirun -np 1 ./train configs/fmnist_mlp.ini --set train.device=cuda --set train.max_steps=300 \
    --set log.interval=100 > "$out/mpirun_nccl.log" 2>&1; rc=$?
row "mpirun -np 1, DDP over NCCL, 300 steps" "$(grep -o 'comm [a-z]*$' "$out/mpirun_nccl.log" | head -1), $(grep -o 'final test acc [0-9.]*%' "$out/mpirun_nccl.log") (exit $rc)"
why $rc "$out/mpirun_nccl.log"
if [ "$gpus" -ge 2 ]; then
    timeout 120 mpirun -np 2 ./train configs/fmnist_mlp.ini --set train.device=cuda --set train.epochs=1 \
        > "$out/mpirun2_nccl.log" 2>&1; rc=$?
    row "mpirun -np 2 over NCCL, 1 epoch" "$(grep -o 'final test acc [0-9.]*%' "$out/mpirun2_nccl.log") (exit $rc)"
    why $rc "$out/mpirun2_nccl.log"
    timeout 120 ./train configs/fmnist_mlp.ini --set distributed.devices=cuda:0,cuda:1 --set train.epochs=1 \
        > "$out/dp_cuda.log" 2>&1; rc=$?
    row "DataParallel cuda:0,cuda:1, 1 epoch" "$(grep -o 'final test acc [0-9.]*%' "$out/dp_cuda.log") (exit $rc)"
    why $rc "$out/dp_cuda.log"
else
    row "multi-GPU (mpirun -np 2, DataParallel)" "skipped: $gpus GPU"
fi
timeout 60 ./train configs/resnet50_synthetic.ini --set train.device=cuda --set train.memory_limit_mb=600 \
    > "$out/oom.log" 2>&1; rc=$?
row "out-of-memory report (memory_limit_mb = 600)" "$(grep -c 'out of memory on cuda:0: asked for' "$out/oom.log") report(s), exit $rc"
grep -m1 -A1 'out of memory' "$out/oom.log" | sed 's/^/  /'

# 3. numbers
DPT_BENCH_DEVICE=cuda timeout 120 build/bench/bench_conv > "$out/bench_conv_cuda.log" 2>&1
row "GEMM 4096^3 FP32, GFLOP/s" "$(awk '$1 == 4096 {print $3}' "$out/bench_conv_cuda.log")"
DPT_BENCH_DEVICE=cuda DPT_BENCH_TF32=1 timeout 120 build/bench/bench_conv > "$out/bench_conv_cuda_tf32.log" 2>&1
row "GEMM 4096^3 TF32, GFLOP/s" "$(awk '$1 == 4096 {print $3}' "$out/bench_conv_cuda_tf32.log")"
row "conv fwd+bwd GFLOP/s FP32 (resnet50 shapes)" "$(awk '$1 == "resnet50" {printf "%s ", $NF}' "$out/bench_conv_cuda.log")"
r50() { # batch prefetch tf32 -> img/s of steps 11-30
    timeout 150 ./train configs/resnet50_synthetic.ini --set train.device=cuda --set train.batch="$1" \
        --set train.eval_batch="$1" --set data.prefetch="$2" --set train.tf32="$3" --set train.max_steps=30 \
        --set log.interval=10 --set data.synthetic_samples=$(( $1 * 8 )) > "$out/r50_b$1_p$2_t$3.log" 2>&1
    imgs "$out/r50_b$1_p$2_t$3.log"
}
torch_ok=0
python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null && torch_ok=1
for b in 64 128; do
    ours=$(r50 $b 2 false)
    peer="-"
    if [ $torch_ok = 1 ]; then
        peer=$(timeout 150 python3 bench/peer_pytorch.py --device cuda --models resnet50 --batch $b --steps 20 2>&1 \
            | tee "$out/peer_r50_b$b.log" | awk '$1 == "resnet50" {print $4}')
    fi
    ratio=$(awk -v a="$ours" -v b="$peer" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }')
    row "resnet50 224px batch $b FP32: ours / PyTorch img/s" "$ours / $peer (ratio $ratio)"
done
row "resnet50 batch 128, prefetch 0 (copy in the step)" "$(r50 128 0 false) img/s"
row "resnet50 batch 128, TF32" "$(r50 128 2 true) img/s"
if [ $torch_ok = 1 ]; then
    timeout 150 python3 bench/peer_pytorch.py --device cuda --models resnet50 --batch 128 --steps 20 --tf32 \
        > "$out/peer_r50_tf32.log" 2>&1
    row "  PyTorch resnet50 batch 128, TF32" "$(awk '$1 == "resnet50" {print $4}' "$out/peer_r50_tf32.log") img/s"
fi
row "total time" "$(( $(date +%s) - start )) s"
