#!/usr/bin/env bash
# gpu_check.sh: everything the GPU path must show, in one go, on the GPU machine as it is
# (CUDA 13 and PyTorch with its nvidia-cudnn/nvidia-nccl packages; no MPI, no BLAS, no apt):
# build from the bundle (make gpu-bundle here, carry .gpu), ./train --env with NVML, every GPU
# test, short trainings on cuda:0 (loss must fall), DDP over NCCL at world size 1
# (DataParallel on cuda:0), the out-of-memory report, GEMM/conv GFLOP/s, and ResNet-50 img/s
# at batch 256 in FP32, TF32, bf16 and bf16 channels-last (warm-up excluded), beside PyTorch on the same GPU in the
# same run; bf16/fp16 training and the deterministic mode's reproducibility. Each step has its
# own time limit (estimates for one H200 in brackets; about 8 minutes in all); a failed step
# shows its first error line. The table and every log go
# to $OUT when that is set (the device tool brings them back), else /tmp/gpu_check.
#   run: bash scripts/gpu_check.sh      (device tool: carry [".gpu"], timeout_s 540)
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
table=$out/summary.txt
: > "$table"
t_all=$(date +%s)
row() { printf '%-46s %-8s %5s  %s\n' "$1" "$2" "$3" "$4" | tee -a "$table"; }
first_error() { grep -m1 -E "error|fatal|FAIL|Error|failed|ERROR" "$1" | cut -c1-160; }
# step NAME LIMIT_S LOG COMMAND...: run it under its limit; the row says ok, FAIL or TIME
step() {
    local name=$1 limit=$2 log=$out/$3
    shift 3
    local t0=$(date +%s)
    timeout "$limit" "$@" > "$log" 2>&1
    local rc=$? took=$(( $(date +%s) - t0 ))
    if [ $rc -eq 0 ]; then
        last_status=ok
    elif [ $rc -eq 124 ]; then
        last_status=TIME
    else
        last_status=FAIL
    fi
    last_row=("$name" "$last_status" "${took}s")
    last_log=$log
    return $rc
}
done_row() { row "${last_row[0]}" "${last_row[1]}" "${last_row[2]}" "$1"; [ "$last_status" = ok ] || \
    row "" "" "" "  first error: $(first_error "$last_log")"; }

{ echo "dptrain gpu_check $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -2 | sed "s/^/gpu: /"
  printf '%-46s %-8s %5s  %s\n' step status time result; } | tee -a "$table"
py=$(command -v python3)

# 1. build [60 s]: only sm_90 (an H200); MPI=0 (no MPI here); BLAS, cmocka, zlib from .gpu
[ -f .gpu/include/cblas.h ] || row "bundle .gpu/" "FAIL" "0s" "missing: run make gpu-bundle where apt works and carry .gpu"
step "build (make MPI=0 CUDA_ARCHS=90)" 240 build.log make -j"$(nproc)" MPI=0 CUDA_ARCHS=90 train tests \
    build/bench/bench_step build/bench/bench_conv build/tools/make_image_folder
done_row "$(make -s MPI=0 CUDA_ARCHS=90 summary 2>/dev/null | sed 's/dptrain build: //' | cut -c1-150)"
[ "$last_status" = ok ] || { row "total" "" "$(( $(date +%s) - t_all ))s" "stopped: no build"; exit 1; }

# 2. --env [5 s]: driver, CUDA, cuDNN, NCCL, each GPU, NVML stats
step "./train --env (NVML stats)" 30 env.log ./train --env
done_row "$(grep -m1 '^nvml:' "$out/env.log" | cut -c1-110)"
sed 's/^/    /' "$out/env.log"

# 3. correctness [60 s]: every CUDA op and layer against the CPU, the loader, NCCL, DDP
step "test_cuda (ops, layers, loader, NCCL, DDP)" 180 test_cuda.log build/tests/test_cuda
done_row "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) \] [0-9]+ test' "$out/test_cuda.log" | tr '\n' ' ')"
grep -E "ERROR|max rel|skipped" "$out/test_cuda.log" | head -12 | sed 's/^/    /'

# 4. training on cuda:0 [90 s]: the loss must fall
# (no checkpoints: a run would refuse a folder holding an earlier step's)
data="--set data.dir=.gpu/data/fashion-mnist --set data.train_images=t10k-images-idx3-ubyte.gz
      --set data.train_labels=t10k-labels-idx1-ubyte.gz --set data.test_limit=2000 --set checkpoint.every_epochs=0"
step "MLP on cuda:0, 2 epochs of 10000" 90 mlp.log ./train configs/fmnist_mlp.ini $data --set train.device=cuda \
    --set train.epochs=2 --set log.interval=50
done_row "$(grep -o 'loss [0-9.]*' "$out/mlp.log" | sed -n '1p;$p' | tr '\n' ' ')| $(grep -o 'final test acc [0-9.]*%' "$out/mlp.log")"
step "ResNet-20 on cuda:0, 150 steps" 120 resnet20.log ./train configs/resnet.ini $data --set train.device=cuda \
    --set train.max_steps=150 --set log.interval=25 --set checkpoint.every_epochs=0
done_row "$(grep -o 'loss [0-9.]*' "$out/resnet20.log" | sed -n '1p;$p' | tr '\n' ' ')| $(grep -o '[0-9]* img/s' "$out/resnet20.log" | tail -1)"

step "ResNet-20 bf16 on cuda:0, 150 steps" 120 resnet20_bf16.log ./train configs/resnet.ini $data \
    --set train.device=cuda --set train.precision=bf16 --set train.max_steps=150 --set log.interval=25 \
    --set checkpoint.every_epochs=0
done_row "$(grep -o 'loss [0-9.]*' "$out/resnet20_bf16.log" | sed -n '1p;$p' | tr '\n' ' ')| $(grep -o '[0-9]* img/s' "$out/resnet20_bf16.log" | tail -1)"

step "ResNet-20 fp16 + loss scaling, 150 steps" 90 resnet20_fp16.log ./train configs/resnet.ini $data \
    --set train.device=cuda --set train.precision=fp16 --set train.loss_scale=dynamic --set train.max_steps=150 \
    --set log.interval=25 --set checkpoint.every_epochs=0
done_row "$(grep -o 'loss [0-9.]*' "$out/resnet20_fp16.log" | sed -n '1p;$p' | tr '\n' ' ')| $(grep -o 'scale [0-9.e+]*' "$out/resnet20_fp16.log" | tail -1)"

# 4a. [train] deterministic on cuda:0 [30 s]: two runs, the same weights (deterministic cuDNN
# algorithms, fixed-order reductions, gather pooling backward); the tree sum on the host
step "deterministic on cuda:0: two runs, one hash" 120 det.log sh -c "for i in 1 2; do ./train configs/fmnist_cnn.ini \
    $(echo $data) --set train.device=cuda --set train.deterministic=true --set train.threads=1 --set train.global_batch=64 \
    --set train.max_steps=30 --set log.interval=10 | grep '^weights sha256'; done"
det_hashes=$(grep -c '^weights sha256 [0-9a-f]' "$out/det.log"); det_distinct=$(grep '^weights sha256' "$out/det.log" | sort -u | wc -l)
[ "$last_status" = ok ] && { [ "$det_hashes" = 2 ] && [ "$det_distinct" = 1 ]; } || { last_status=FAIL; last_row[1]=FAIL; }
done_row "$(head -1 "$out/det.log" | cut -c1-40)... $det_hashes runs, $det_distinct distinct"

# 4b. a folder of JPEGs on cuda:0 [40 s]: decoding workers, uint8 batches in pinned memory,
# images_to_float on the device; the loader must keep up (no "waiting on data" share)
step "JPEG folder: ResNet-50 on cuda:0, 40 steps" 90 folder.log sh -c "build/tools/make_image_folder \
    /tmp/dpt_gpu_images --train 40 --val 5 --source synthetic && ./train configs/resnet50_imagenet.ini \
    --set data.dir=/tmp/dpt_gpu_images --set train.device=cuda --set train.global_batch=64 --set train.max_steps=40 \
    --set train.eval_batch=50 --set optim.warmup_epochs=0 --set log.interval=10 --set checkpoint.every_epochs=0"
done_row "$(grep -o 'loss [0-9.]*' "$out/folder.log" | sed -n '1p;$p' | tr '\n' ' ')| $(grep -o '[0-9]* img/s.*' "$out/folder.log" | tail -1)"

# 5. DDP over NCCL at world size 1 [30 s]: DataParallel on cuda:0 (no MPI here)
step "DDP over NCCL, world 1 (devices = cuda:0)" 90 nccl.log ./train configs/fmnist_mlp.ini $data \
    --set distributed.devices=cuda:0 --set train.max_steps=300 --set log.interval=100
done_row "$(grep -o 'comm [a-z]*$' "$out/nccl.log" | head -1) | $(grep -o 'final test acc [0-9.]*%' "$out/nccl.log")"

# 6. the out-of-memory report [10 s]: a 600 MiB cap, the estimate off so the allocator trips
step "out-of-memory report (memory_limit_mb 600)" 60 oom.log ./train configs/resnet50_synthetic.ini \
    --set train.device=cuda --set train.memory_limit_mb=600 --set train.memory_check=false
[ "$last_status" = FAIL ] && grep -q 'out of memory on cuda:0: asked for' "$out/oom.log" && last_status=ok && last_row[1]=ok
done_row "$(grep -m1 'out of memory' "$out/oom.log" | cut -c1-110)"

# 7. GEMM and convolution GFLOP/s [40 s]
step "bench_conv on cuda (GEMM, ResNet conv shapes)" 120 bench_conv.log env DPT_BENCH_DEVICE=cuda build/bench/bench_conv
done_row "GEMM 4096^3 $(awk '$1 == 4096 {print $3}' "$out/bench_conv.log") GFLOP/s FP32; convs $(awk '$1 == "resnet50" {printf "%s ", $NF}' "$out/bench_conv.log")"

# 8. ResNet-50 224px [160 s]: ours and PyTorch's img/s at batch 256, turn by turn, FP32, TF32,
# bf16 (ours: [train] precision = bf16; PyTorch: torch.autocast bf16) and bf16 channels-last
# (ours: [train] memory_format = nhwc; PyTorch: model and input in torch.channels_last)
torch_ok=0
"$py" -c "import torch; assert torch.cuda.is_available()" 2> /dev/null && torch_ok=1
for b in 256; do
    for math in fp32 tf32 bf16 bf16-nhwc; do
        mode=cuda-$math; [ $math = fp32 ] && mode=cuda
        step "ResNet-50 batch $b $math: dptrain" 90 "r50_b${b}_$math.log" build/bench/bench_step resnet50 "$b" 1 20 "$mode"
        ours=$(grep -o '"img_s":[0-9.]*' "$out/r50_b${b}_$math.log" | cut -d: -f2)
        done_row "${ours:-?} img/s"
        peer=""
        if [ $torch_ok = 1 ]; then
            step "ResNet-50 batch $b $math: PyTorch" 90 "torch_r50_b${b}_$math.log" "$py" bench/peer_pytorch.py --one \
                --device cuda --models resnet50 --batch "$b" --steps 20 $([ $math = tf32 ] && echo --tf32) \
                $(case $math in bf16*) echo --bf16 ;; esac) $([ $math = bf16-nhwc ] && echo --channels-last)
            peer=$(grep -o '"img_s": [0-9.]*' "$out/torch_r50_b${b}_$math.log" | awk '{print $2}')
            done_row "${peer:-?} img/s | ratio $(awk -v a="$ours" -v b="$peer" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }')"
        fi
    done
done
row "total" "" "$(( $(date +%s) - t_all ))s" "logs in $out"
