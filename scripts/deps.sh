#!/usr/bin/env bash
# deps.sh: check the Debian packages dptrain needs; install the missing ones when root.
set -euo pipefail
packages=(build-essential libopenblas-dev libopenblas0-openmp libopenmpi-dev openmpi-bin zlib1g-dev libcmocka-dev
          libdnnl-dev libssl-dev libjpeg62-turbo-dev libpng-dev dataset-fashion-mnist fortunes gnuplot-nox clang libclang-rt-14-dev)
# make test also runs what its scripts call (checks in Python and NumPy, PIL as the reference of
# the image augmentations, Python's regex module as the GPT-2 tokenizer's, pgrep, valgrind, the
# network lab's ip, tc and bc: a fresh Debian 12 has none of them); make bench needs the peer it
# is measured against (and iproute2 for scripts/netlab.sh); make gpu-selftest a Debian chroot
[ "${1:-}" = test ] && packages+=(python3 python3-numpy python3-pil python3-regex procps valgrind iproute2 bc)
[ "${1:-}" = bench ] && packages+=(python3-torch python3-torchvision iproute2)
[ "${1:-}" = selftest ] && packages+=(debootstrap)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "deps: all present (${packages[*]})"
    exit 0
fi
echo "deps: missing: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "deps: not root; install them with:" >&2
    echo "    sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "deps: installed ${missing[*]}"
