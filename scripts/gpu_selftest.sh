#!/usr/bin/env bash
# gpu_selftest.sh (make gpu-selftest): prove here, without a GPU, that the GPU machine's build
# works from the bundle alone. It builds dptrain inside a bare Debian chroot (debootstrap:
# compiler, make and python3; no OpenBLAS, MPI, cmocka, zlib headers or oneDNN), with the CUDA
# toolkit bind-mounted read-only but without cuBLAS, cuDNN and NCCL in it: those sit where the
# GPU image's PyTorch keeps them, in python3's pip packages (nvidia/cu13/lib for cuBLAS,
# nvidia/cudnn and nvidia/nccl). Then it runs ./train --env, test_cuda to its "no GPU" skip,
# test_cuda_harness (the CPU standing in for the GPU, each test in a child as gpu_check runs
# it: a test that needs what the image lacks must skip, not fail), and a short CPU training
# run on the bundle's data, and prints "gpu-selftest: ok". The chroot is cached
# (DPT_SELFTEST_ROOT) so a rerun takes a minute. Needs root; installs debootstrap itself (as
# make test installs its packages); not part of make test.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
root=${DPT_SELFTEST_ROOT:-/var/tmp/dptrain-gpu-selftest}
cuda=$(readlink -f "${CUDA_HOME:-/usr/local/cuda}")
[ "$(id -u)" = 0 ] || { echo "gpu-selftest: needs root (chroot, mounts)" >&2; exit 1; }
command -v debootstrap > /dev/null || scripts/deps.sh selftest > /dev/null ||
    { echo "gpu-selftest: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }
[ -x "$cuda/bin/nvcc" ] || { echo "gpu-selftest: no CUDA toolkit at $cuda (set CUDA_HOME)" >&2; exit 1; }
[ -f .gpu/include/cblas.h ] || { echo "gpu-selftest: no bundle; run make gpu-bundle" >&2; exit 1; }

if [ ! -x "$root/usr/bin/gcc" ] || [ ! -x "$root/usr/bin/python3" ]; then
    echo "gpu-selftest: debootstrap bookworm (minbase + gcc, g++, make, python3) into $root (once)"
    rm -rf "$root"
    debootstrap --variant=minbase --include=gcc,g++,make,libc6-dev,python3 bookworm "$root" \
        http://deb.debian.org/debian > /tmp/dpt_debootstrap.log 2>&1 || {
        tail -20 /tmp/dpt_debootstrap.log; exit 1; }
fi
for p in libopenblas0 libopenmpi3 libcmocka0 zlib1g-dev libdnnl2; do # the image's gaps, kept
    if chroot "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
        echo "gpu-selftest: the chroot has $p, which the GPU image lacks" >&2; exit 1
    fi
done

# The CUDA toolkit without cuDNN and NCCL (a link farm over the read-only mount), and cuDNN and
# NCCL laid out as the pip packages nvidia-cudnn-cu13 / nvidia-nccl-cu13 lay them out.
mkdir -p "$root/host-cuda" "$root/src"
mounted=()
cleanup() { for m in "${mounted[@]}"; do umount "$m" 2> /dev/null || umount -l "$m"; done; }
trap cleanup EXIT
mount --bind "$cuda" "$root/host-cuda" && mount -o remount,bind,ro "$root/host-cuda" && mounted+=("$root/host-cuda")
mount --bind "$repo" "$root/src" && mounted+=("$root/src")
for fs in proc dev; do mount --bind "/$fs" "$root/$fs" && mounted+=("$root/$fs"); done
farm=$root/opt/cuda
rm -rf "$farm" && mkdir -p "$farm"
for entry in "$cuda"/*; do
    name=$(basename "$entry")
    case "$name" in include | lib | lib64 | targets) ;; *) ln -s "/host-cuda/$name" "$farm/$name"; continue ;; esac
done
# the library folders without cuDNN, NCCL and cuBLAS (CUDA 13's Debian layout has lib64 -> lib:
# a link stays a link, or cuBLAS would be found in the toolkit where the image has none)
for sub in include lib lib64; do
    [ -e "$cuda/$sub" ] || continue
    if [ -L "$cuda/$sub" ]; then ln -s "$(readlink "$cuda/$sub")" "$farm/$sub"; continue; fi
    mkdir -p "$farm/$sub"
    for f in "$cuda/$sub/"*; do
        case "$(basename "$f")" in cudnn* | libcudnn* | nccl* | libnccl* | libcublas*) continue ;; esac
        ln -s "/host-cuda/$sub/$(basename "$f")" "$farm/$sub/$(basename "$f")"
    done
done
site=$root/usr/lib/python3/dist-packages/nvidia
rm -rf "$site" && mkdir -p "$site/cudnn/include" "$site/cudnn/lib" "$site/nccl/include" "$site/nccl/lib" "$site/cu13/lib"
cp -L "$cuda"/lib64/libcublas.so.[0-9]* "$cuda"/lib64/libcublasLt.so.[0-9]* "$site/cu13/lib/" # (nvidia-cublas: cu13/lib)
cp "$cuda"/include/cudnn*.h "$site/cudnn/include/"
cp -L "$cuda"/lib64/libcudnn*.so.[0-9] "$site/cudnn/lib/"
cp "$cuda"/include/nccl*.h "$site/nccl/include/"
cp -L "$cuda"/lib64/libnccl.so.[0-9] "$site/nccl/lib/"

inside() { chroot "$root" /usr/bin/env -i PATH=/opt/cuda/bin:/usr/bin:/bin HOME=/root bash -c "cd /src && $1"; }
log=/tmp/dpt_gpu_selftest.log
echo "gpu-selftest: building in the chroot (make MPI=0 BUILD=build-gpuselftest)"
start=$(date +%s)
mk="make -j$(nproc) MPI=0 CUDA_HOME=/opt/cuda GPU_BUNDLE=.gpu BUILD=build-gpuselftest"
if ! inside "$mk build-gpuselftest/train build-gpuselftest/tests/test_cuda build-gpuselftest/tests/test_cuda_harness build-gpuselftest/tests/test_image build-gpuselftest/tools/make_image_folder" \
    > "$log" 2>&1; then
    tail -30 "$log"; echo "gpu-selftest: FAILED: the build (log: $log)"; exit 1
fi
summary=$(inside "$mk -s summary")
echo "  $summary ($(( $(date +%s) - start )) s)"
for want in "cuda=yes" "cudnn=yes (/usr/lib/python3/dist-packages/nvidia/cudnn)" \
    "nccl=yes (/usr/lib/python3/dist-packages/nvidia/nccl)" "cublas=/usr/lib/python3/dist-packages/nvidia/cu13/lib/" \
    "mpi=no" "blas=cblas" "onednn=no" "sha256=yes" "jpeg=yes png=yes" "bundle .gpu"; do
    grep -qF "$want" <<< "$summary" || { echo "gpu-selftest: FAILED: the build summary lacks '$want'"; exit 1; }
done
ok=1
env_out=$(inside "build-gpuselftest/train --env" 2>&1) || ok=0
echo "$env_out" | sed 's/^/  env | /'
grep -q "mpi: not in this build" <<< "$env_out" || { echo "gpu-selftest: --env does not say MPI is not built in"; ok=0; }
# the CUDA plugin (build-gpuselftest/libdpt_cuda.so) loads with cuBLAS, cuDNN and NCCL found in the
# pip folders and answers for the CUDA libraries (without a driver it says so)
grep -q "^cuda: driver .* | cudnn .* | nccl [0-9]" <<< "$env_out" || { echo "gpu-selftest: --env shows no loaded CUDA plugin"; ok=0; }
cuda_out=$(inside "build-gpuselftest/tests/test_cuda" 2>&1) || ok=0
echo "$cuda_out" | tail -3 | sed 's/^/  test_cuda | /'
grep -q "SKIPPED" <<< "$cuda_out" || { echo "gpu-selftest: test_cuda did not reach its no-GPU skip"; ok=0; }
harness_out=$(inside "DPT_TEST_FORK=1 build-gpuselftest/tests/test_cuda_harness" 2>&1) || ok=0
echo "$harness_out" | grep -E "^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]|^\[  FAILED  \] test|^ERROR|error:" | sed 's/^/  test_cuda_harness | /'
grep -q "^\[  FAILED  \]" <<< "$harness_out" && { echo "gpu-selftest: test_cuda_harness failed as the image builds it"; ok=0; }
image_out=$(inside "build-gpuselftest/tests/test_image" 2>&1) || ok=0
echo "$image_out" | tail -1 | sed 's/^/  test_image | /'
grep -q "PASSED" <<< "$image_out" || { echo "gpu-selftest: test_image (the folder source on the bundle's libjpeg and libpng) failed"; ok=0; }
train_out=$(inside "build-gpuselftest/train configs/fmnist_mlp.ini --set data.dir=.gpu/data/fashion-mnist \
    --set data.train_images=t10k-images-idx3-ubyte.gz --set data.train_labels=t10k-labels-idx1-ubyte.gz \
    --set train.epochs=1 --set data.test_limit=2000 --set log.interval=1000" 2>&1) || ok=0
echo "$train_out" | tail -2 | sed 's/^/  train | /'
grep -q "final test acc" <<< "$train_out" || { echo "gpu-selftest: the CPU training run failed"; ok=0; }
grep -q "^weights sha256 [0-9a-f]\{64\}$" <<< "$train_out" || { echo "gpu-selftest: no weights hash (the bundle's OpenSSL)"; ok=0; }
mpirun_out=$(inside "OMPI_COMM_WORLD_SIZE=2 build-gpuselftest/train configs/fmnist_mlp.ini" 2>&1) && ok=0
grep -q "built without MPI" <<< "$mpirun_out" || { echo "gpu-selftest: a start by mpirun is not refused clearly"; ok=0; }
[ $ok = 1 ] || { echo "gpu-selftest: FAILED"; exit 1; }
echo "gpu-selftest: ok"
