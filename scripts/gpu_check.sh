#!/usr/bin/env bash
# gpu_check.sh [BUDGET_S]: everything the GPU path must show, in one go, on the GPU machine as it
# is (CUDA 13 and PyTorch with its nvidia-* pip packages; no MPI, no BLAS, no oneDNN, no apt):
# the toolchain it found, a build from the bundle (make gpu-bundle here, carry .gpu), ./train
# --env, every GPU test (each in a child of its own: one crash does not hide the rest),
# ResNet-50 img/s at batch 256 beside PyTorch on the same GPU (the main result, so it runs
# early), GPT-2 small tokens/s beside PyTorch (if time is left), short trainings on cuda:0 (the loss must fall), bf16/fp16, the deterministic mode,
# a JPEG folder, the out-of-memory report, GEMM/conv GFLOP/s, and last (the step most likely to
# hang) DDP over NCCL at world size 1.
#
# The whole check keeps to BUDGET_S seconds (default 500, inside the device tool's 540 s): a
# step that needs more than is left is skipped and says so, and the table is printed whatever
# happens. Each step's output is line-buffered into its log, so a step cut by its time limit
# keeps what it printed. What comes back (the device tool returns at most 8 files): $OUT/
# summary.txt (the table) and $OUT/logs.tgz (every step's log), refreshed after each step so a
# run killed from outside still leaves them.
#   run: bash scripts/gpu_check.sh      (device tool: carry [".gpu"], timeout_s 540)
# On a VM where NCCL's host memory registration fails, rerun with NCCL_CUMEM_HOST_ENABLE=0.
set -u
cd "$(dirname "$0")/.."
budget=${1:-500}
out=${OUT:-/tmp/gpu_check}
logs=$(mktemp -d /tmp/gpu_check_logs.XXXXXX)
mkdir -p "$out"
table=$out/summary.txt
: > "$table"
t_all=$(date +%s)
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
buffered=(); command -v stdbuf > /dev/null && buffered=(stdbuf -oL -eL)

left() { echo $(( budget - ($(date +%s) - t_all) )); }
row() { printf '%-46s %-8s %5s  %s\n' "$1" "$2" "$3" "$4" | tee -a "$table"; }
pack() { tar czf "$out/logs.tgz.new" -C "$logs" . 2>/dev/null && mv "$out/logs.tgz.new" "$out/logs.tgz"; }
first_error() { grep -m1 -E "error|fatal|FAIL|Error|failed|ERROR" "$1" | cut -c1-160; }
# step NAME NEED_S LIMIT_S LOG COMMAND...: skipped when fewer than NEED_S seconds are left, else
# run under min(LIMIT_S, what is left); the row says ok, FAIL, TIME or SKIP
step() {
    local name=$1 need=$2 limit=$3 log=$logs/$4
    shift 4
    last_log=$log
    local have; have=$(left)
    if [ "$have" -lt "$need" ]; then
        last_status=SKIP
        last_row=("$name" SKIP "0s")
        echo "skipped: ${have}s left of the ${budget}s budget, this step needs ${need}s" > "$log"
        return 1
    fi
    [ "$limit" -gt "$have" ] && limit=$have
    local t0; t0=$(date +%s)
    timeout "$limit" "${buffered[@]}" "$@" > "$log" 2>&1
    local rc=$? took=$(( $(date +%s) - t0 ))
    if [ $rc -eq 0 ]; then last_status=ok; elif [ $rc -eq 124 ]; then last_status=TIME; else last_status=FAIL; fi
    last_row=("$name" "$last_status" "${took}s")
    return $rc
}
done_row() {
    if [ "$last_status" = SKIP ]; then
        row "${last_row[0]}" SKIP "0s" "$(cat "$last_log")"
    else
        row "${last_row[0]}" "${last_row[1]}" "${last_row[2]}" "$1"
        [ "$last_status" = ok ] || row "" "" "" "  first error: $(first_error "$last_log")"
    fi
    pack
}
finish() { row "total" "" "$(( $(date +%s) - t_all ))s" "$1"; pack; rm -rf "$logs"; exit "${2:-0}"; }

{ echo "dptrain gpu_check $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), budget ${budget}s"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -2 | sed "s/^/gpu: /"
  printf '%-46s %-8s %5s  %s\n' step status time result; } | tee -a "$table"
py=$(command -v python3)

# 0. the toolchain [1 s]: the compilers, and where cuBLAS, cuDNN and NCCL are (the toolkit's
# folder, or the pip packages of the python3 that holds PyTorch); a missing one stops here
{ for tool in make cc nvcc python3; do printf '%-8s %s\n' "$tool" "$(command -v "$tool" || echo MISSING)"; done
  cuda_home=$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")
  nv=$("$py" -c 'import nvidia, os; print(" ".join(nvidia.__path__))' 2>/dev/null)
  for lib in cublas cudnn nccl; do
      found=$(ls "$cuda_home"/lib64/lib$lib.so* "$cuda_home"/lib/lib$lib.so* $(for p in $nv; do echo "$p"/*/lib/lib$lib.so*; done) 2>/dev/null | head -1)
      printf '%-8s %s\n' "$lib" "${found:-MISSING}"
  done; } > "$logs/toolchain.log" 2>&1
missing=$(grep MISSING "$logs/toolchain.log" | awk '{print $1}' | tr '\n' ' ')
row "toolchain (make cc nvcc; cuBLAS cuDNN NCCL)" "$([ -z "$missing" ] && echo ok || echo FAIL)" "0s" \
    "$([ -z "$missing" ] && echo "all found" || echo "missing: $missing")"
sed 's/^/    /' "$logs/toolchain.log" | tee -a "$table"
[ -z "$missing" ] || finish "stopped: the image lacks $missing" 1
[ -f .gpu/include/cblas.h ] || { row "bundle .gpu/" "FAIL" "0s" "missing: run make gpu-bundle where apt works and carry .gpu"; finish "stopped: no bundle" 1; }

# 1. build [60 s]: only sm_90 (an H200); MPI=0 (no MPI here); BLAS, cmocka, zlib from the bundle
mk=(make -j"$(nproc)" MPI=0 CUDA_ARCHS=90 GPU_BUNDLE=.gpu)
step "build (make MPI=0 CUDA_ARCHS=90 GPU_BUNDLE=.gpu)" 60 240 build.log "${mk[@]}" train tests \
    build/bench/bench_step build/bench/bench_conv build/tools/make_image_folder build/tools/text_tokens
done_row "$("${mk[@]}" -s summary 2>/dev/null | tail -1 | sed 's/dptrain build: //' | cut -c1-150)"
[ "$last_status" = ok ] || finish "stopped: no build" 1

# 2. --env [5 s]: driver, CUDA, cuDNN, NCCL, each GPU, NVML stats. The CUDA code is a plugin
# (build/libdpt_cuda.so) loaded on first use: if it does not load, or sees no GPU where
# nvidia-smi does, every later step would quietly run on the CPU or skip: stop here, saying why.
step "./train --env (CUDA plugin, GPUs, NVML stats)" 5 30 env.log ./train --env
gpus_smi=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$last_status" = ok ] && { ! grep -q "^cuda: driver [0-9]" "$last_log" ||
    { [ "${gpus_smi:-0}" -gt 0 ] && grep -q "^gpus: none visible" "$last_log"; }; }; then
    last_status=FAIL; last_row[1]=FAIL
fi
done_row "$(grep -m1 '^cuda:' "$last_log" | cut -c1-70) | $(grep -m1 '^nvml:' "$last_log" | cut -c1-60)"
sed 's/^/    /' "$last_log" | head -12
[ "$last_status" = ok ] || finish "stopped: the CUDA plugin did not load or sees no GPU (nvidia-smi lists ${gpus_smi:-0}): $(grep -m1 '^cuda:' "$last_log" | cut -c1-200)" 1

# 3. correctness [60 s]: every CUDA op and layer against the CPU, the loader, NCCL, DDP; each
# test in a child of its own (a fatal error in one is that test's failure, not the binary's)
step "test_cuda (ops, layers, loader, NCCL, DDP)" 30 180 test_cuda.log env DPT_TEST_FORK=1 build/tests/test_cuda
done_row "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ test' "$last_log" | tr '\n' ' ')"
grep -E "^\[  FAILED  \] test|ERROR|max rel|worst error|skipped" "$last_log" | awk '!seen[$0]++' | head -16 | sed 's/^/    /' | tee -a "$table"

# 4. ResNet-50 224px [120 s], the main result: ours and PyTorch's img/s at batch 256, turn by
# turn, in FP32 and bf16 (ours: [train] precision = bf16; PyTorch: torch.autocast), then TF32
# and bf16 channels-last (ours: [train] memory_format = nhwc; PyTorch: channels_last) if time is left
torch_ok=0
"$py" -c "import torch; assert torch.cuda.is_available()" 2> /dev/null && torch_ok=1
for math in fp32 bf16 tf32 bf16-nhwc; do
    mode=cuda-$math; [ $math = fp32 ] && mode=cuda
    step "ResNet-50 batch 256 $math: dptrain" 40 $([ $math = bf16-nhwc ] && echo 60 || echo 90) "r50_$math.log" \
        env DPT_CUDNN_LOG=1 build/bench/bench_step resnet50 256 1 20 "$mode"
    ours=$(grep -o '"img_s":[0-9.]*' "$last_log" | cut -d: -f2)
    done_row "${ours:-?} img/s"
    [ $torch_ok = 1 ] || continue
    step "ResNet-50 batch 256 $math: PyTorch" 40 90 "torch_r50_$math.log" "$py" bench/peer_pytorch.py --one \
        --device cuda --models resnet50 --batch 256 --steps 20 $([ $math = tf32 ] && echo --tf32) \
        $(case $math in bf16*) echo --bf16 ;; esac) $([ $math = bf16-nhwc ] && echo --channels-last)
    peer=$(grep -o '"img_s": [0-9.]*' "$last_log" | awk '{print $2}')
    done_row "${peer:-?} img/s | ratio $(awk -v a="${ours:-0}" -v b="${peer:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }')"
done
# 4a. bf16 with cuDNN's algorithms measured per shape ([train] cudnn_benchmark) [40 s]: beside
# the heuristic choice above (r50_bf16.log has each shape's algorithm, math type, workspace)
step "ResNet-50 batch 256 bf16, algorithms measured" 40 60 r50_bf16_find.log env DPT_CUDNN_LOG=1 \
    build/bench/bench_step resnet50 256 1 10 cuda-bf16-find
ours=$(grep -o '"img_s":[0-9.]*' "$last_log" | cut -d: -f2)
done_row "${ours:-?} img/s | math types chosen: $(grep -o 'math [0-9]' "$last_log" | sort | uniq -c | tr -s ' ' | tr '\n' ' ')"

# 4b. GPT-2 small (124M) on cuda:0 [80 s]: tokens/s at B 8, T 1024, fp32, AdamW, beside PyTorch
# (its fused attention where it has one); the tokens are this repository's docs as bytes
step "GPT-2 small B8 T1024: dptrain" 40 90 gpt2.log sh -c "build/tools/text_tokens --val-fraction 0.1 \
    /tmp/dpt_gpu_text README.md docs/*.md > /dev/null && ./train configs/gpt_fortunes.ini --set train.device=cuda \
    --set model.n_layer=12 --set model.n_head=12 --set model.n_embd=768 --set model.padded_vocab_size=50304 \
    --set data.vocab_size=50257 --set data.seq_len=1024 --set 'data.train=/tmp/dpt_gpu_text/train_*.bin' \
    --set 'data.val=/tmp/dpt_gpu_text/val_*.bin' --set data.test_limit=8 --set train.batch=8 --set train.eval_batch=4 \
    --set train.epochs=3 --set train.max_steps=25 --set optim.warmup_epochs=0 --set log.interval=5 \
    --set checkpoint.every_epochs=0"
ours=$(grep -o '[0-9]* tok/s' "$last_log" | tail -1 | cut -d' ' -f1)
done_row "$(grep -o 'loss [0-9][0-9.]*' "$last_log" | sed -n '1p;$p' | tr '\n' ' ')| ${ours:-?} tok/s"
if [ $torch_ok = 1 ]; then
    step "GPT-2 small B8 T1024: PyTorch" 30 90 torch_gpt2.log "$py" bench/peer_gpt.py --device cuda --layers 12 \
        --heads 12 --channels 768 --seq 1024 --batch 8 --steps 20
    peer=$(grep -o '"tok_s": [0-9.]*' "$last_log" | tail -1 | awk '{printf "%.0f", $2}')
    done_row "${peer:-?} tok/s | ratio $(awk -v a="${ours:-0}" -v b="${peer:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }')"
fi

# 5. training on cuda:0 [90 s]: the loss must fall
# (no checkpoints: a run would refuse a folder holding an earlier step's)
data="--set data.dir=.gpu/data/fashion-mnist --set data.train_images=t10k-images-idx3-ubyte.gz
      --set data.train_labels=t10k-labels-idx1-ubyte.gz --set data.test_limit=2000 --set checkpoint.every_epochs=0"
step "MLP on cuda:0, 2 epochs of 10000" 20 90 mlp.log ./train configs/fmnist_mlp.ini $data --set train.device=cuda \
    --set train.epochs=2 --set log.interval=50
done_row "$(grep -o 'loss [0-9][0-9.]*' "$last_log" | sed -n '1p;$p' | tr '\n' ' ')| $(grep -o 'final test acc [0-9.]*%' "$last_log")"
for prec in fp32 bf16 fp16; do
    extra=(); [ $prec = fp16 ] && extra=(--set train.loss_scale=dynamic)
    step "ResNet-20 $prec on cuda:0, 150 steps" 30 120 "resnet20_$prec.log" ./train configs/resnet.ini $data \
        --set train.device=cuda --set train.precision=$prec "${extra[@]}" --set train.max_steps=150 --set log.interval=25
    done_row "$(grep -o 'loss [0-9][0-9.]*' "$last_log" | sed -n '1p;$p' | tr '\n' ' ')| $(grep -o '[0-9]* img/s' "$last_log" | tail -1)"
done

# 6. [train] deterministic on cuda:0 [30 s]: two runs, the same weights (deterministic cuDNN
# algorithms, fixed-order reductions, gather pooling backward); the tree sum on the host
step "deterministic on cuda:0: two runs, one hash" 30 120 det.log sh -c "for i in 1 2; do ./train configs/fmnist_cnn.ini \
    $(echo $data) --set train.device=cuda --set train.deterministic=true --set train.threads=1 --set train.global_batch=64 \
    --set train.max_steps=30 --set log.interval=10 | grep '^weights sha256'; done"
det_hashes=$(grep -c '^weights sha256 [0-9a-f]' "$last_log"); det_distinct=$(grep '^weights sha256' "$last_log" | sort -u | wc -l)
[ "$last_status" = ok ] && { [ "$det_hashes" != 2 ] || [ "$det_distinct" != 1 ]; } && { last_status=FAIL; last_row[1]=FAIL; }
done_row "$(head -1 "$last_log" | cut -c1-40)... $det_hashes runs, $det_distinct distinct"

# 7. a folder of JPEGs on cuda:0 [40 s]: decoding workers, uint8 batches in pinned memory,
# images_to_float on the device; the loader must keep up (no "waiting on data" share)
step "JPEG folder: ResNet-50 on cuda:0, 40 steps" 40 90 folder.log sh -c "build/tools/make_image_folder \
    /tmp/dpt_gpu_images --train 40 --val 5 --source synthetic && ./train configs/resnet50_imagenet.ini \
    --set data.dir=/tmp/dpt_gpu_images --set train.device=cuda --set train.global_batch=64 --set train.max_steps=40 \
    --set train.eval_batch=50 --set optim.warmup_epochs=0 --set log.interval=10 --set checkpoint.every_epochs=0"
done_row "$(grep -o 'loss [0-9][0-9.]*' "$last_log" | sed -n '1p;$p' | tr '\n' ' ')| $(grep -o '[0-9]* img/s.*' "$last_log" | tail -1)"

# 8. the out-of-memory report [10 s]: a 600 MiB cap, the estimate off so the allocator trips
step "out-of-memory report (memory_limit_mb 600)" 10 60 oom.log ./train configs/resnet50_synthetic.ini \
    --set train.device=cuda --set train.memory_limit_mb=600 --set train.memory_check=false
[ "$last_status" = FAIL ] && grep -q 'out of memory on cuda:0: asked for' "$last_log" && last_status=ok && last_row[1]=ok
done_row "$(grep -m1 'out of memory' "$last_log" | cut -c1-110)"

# 9. GEMM and convolution GFLOP/s [40 s]
step "bench_conv on cuda (GEMM, ResNet conv shapes)" 40 120 bench_conv.log env DPT_BENCH_DEVICE=cuda build/bench/bench_conv
done_row "GEMM 4096^3 $(awk '$1 == 4096 {print $3}' "$last_log") GFLOP/s FP32; convs $(awk '$1 == "resnet50" {printf "%s ", $NF}' "$last_log")"

# 10. DDP over NCCL at world size 1 [30 s], last: DataParallel on cuda:0 (no MPI here); the
# header line must name the nccl communicator
step "DDP over NCCL, world 1 (devices = cuda:0)" 30 90 nccl.log env NCCL_DEBUG=INFO ./train configs/fmnist_mlp.ini $data \
    --set distributed.devices=cuda:0 --set train.max_steps=300 --set log.interval=100
comm=$(grep -o 'comm [a-z]*' "$last_log" | grep -m1 -o 'nccl')
[ "$last_status" = ok ] && [ "$comm" != nccl ] && { last_status=FAIL; last_row[1]=FAIL; echo "error: the header names no nccl communicator" >> "$last_log"; }
done_row "comm ${comm:-not nccl} | $(grep -o 'final test acc [0-9.]*%' "$last_log")"

finish "summary.txt and logs.tgz in $out"
