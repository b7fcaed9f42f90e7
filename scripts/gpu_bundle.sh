#!/usr/bin/env bash
# gpu_bundle.sh (make gpu-bundle): the few files a bare GPU image lacks for building and
# checking dptrain, unpacked from Debian's packages into .gpu/ (ignored by git, carried to the
# GPU machine; at most 40 MiB). The image has CUDA, cuDNN and NCCL (PyTorch's pip packages)
# and a compiler, but no BLAS, cmocka, zlib headers, MPI or data. So:
#   include/  cblas.h (Debian's reference CBLAS; the CPU there only checks the GPU's numbers),
#             cmocka.h, zlib.h, zconf.h, jpeglib.h (+ jconfig.h, jmorecfg.h, jerror.h), png.h
#             (+ pngconf.h, pnglibconf.h), openssl/ (OpenSSL 3's headers)
#   lib/      libblas.so (+ libgfortran, libquadmath it needs), libcmocka.so, libz.so, libjpeg.so
#             (libjpeg-turbo), libpng16.so: the folder source and its tests; libcrypto.so
#             (OpenSSL 3): the weights' SHA-256, so GPU runs print a hash to compare
#   data/fashion-mnist/  the t10k files of Debian's dataset-fashion-mnist (10000 images)
# The build finds .gpu/ by itself (Makefile: GPU_BUNDLE); MPI is left out (make MPI=0 there).
# Only apt-get download is used: no root, nothing installed here.
set -euo pipefail
cd "$(dirname "$0")/.."
limit_mb=40
pkgs=(libblas3 libblas-dev libgfortran5 libquadmath0 libcmocka0 libcmocka-dev zlib1g zlib1g-dev
      libjpeg62-turbo libjpeg62-turbo-dev libpng16-16 libpng-dev libssl3 libssl-dev dataset-fashion-mnist)
work=$(mktemp -d /tmp/dpt_gpu_bundle_XXXXXX)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download "${pkgs[@]}" > "$work/download.log" 2>&1) || {
    echo "gpu-bundle: apt-get download failed:" >&2
    tail -5 "$work/download.log" >&2
    echo "HINT: run 'apt-get update' (as root), or 'make deps', then retry" >&2
    exit 1
}
for deb in "$work"/*.deb; do dpkg -x "$deb" "$work/root"; done
r=$work/root
rm -rf .gpu
mkdir -p .gpu/include .gpu/lib .gpu/data/fashion-mnist
multiarch=usr/lib/x86_64-linux-gnu
# CBLAS: Debian installs cblas.h as an alternative pointing at cblas-netlib.h
cp "$r/usr/include/x86_64-linux-gnu/cblas-netlib.h" .gpu/include/cblas.h
cp "$r/usr/include/x86_64-linux-gnu/cblas_mangling.h" .gpu/include/
cp -P "$r/$multiarch/blas/libblas.so.3"* .gpu/lib/
ln -sf libblas.so.3 .gpu/lib/libblas.so
cp -P "$r/$multiarch"/libgfortran.so.5* "$r/$multiarch"/libquadmath.so.0* .gpu/lib/
cp "$r/usr/include/cmocka.h" .gpu/include/
cp -P "$r/$multiarch"/libcmocka.so* .gpu/lib/
cp "$r/usr/include/zlib.h" "$r/usr/include/zconf.h" .gpu/include/
cp -P "$r/$multiarch"/libz.so.1* .gpu/lib/ 2>/dev/null || cp -P "$r"/lib/x86_64-linux-gnu/libz.so.1* .gpu/lib/
ln -sf libz.so.1 .gpu/lib/libz.so
cp "$r/usr/include/jpeglib.h" "$r/usr/include/jmorecfg.h" "$r/usr/include/jerror.h" .gpu/include/
cp "$r/usr/include/x86_64-linux-gnu/jconfig.h" .gpu/include/
cp -P "$r/$multiarch"/libjpeg.so* .gpu/lib/
cp "$r/usr/include/libpng16/png.h" "$r/usr/include/libpng16/pngconf.h" "$r/usr/include/libpng16/pnglibconf.h" .gpu/include/
cp -P "$r/$multiarch"/libpng16.so* .gpu/lib/
mkdir -p .gpu/include/openssl
cp "$r/usr/include/openssl/"*.h "$r/usr/include/x86_64-linux-gnu/openssl/"*.h .gpu/include/openssl/
cp -P "$r/$multiarch"/libcrypto.so.3 .gpu/lib/
ln -sf libcrypto.so.3 .gpu/lib/libcrypto.so
cp "$r/usr/share/datasets/fashion-mnist/"t10k-* .gpu/data/fashion-mnist/
grep -q '^/.gpu/' .gitignore 2>/dev/null || echo '/.gpu/' >> .gitignore
size_kb=$(du -sk .gpu | cut -f1)
printf 'gpu-bundle: .gpu/ holds %d files, %.1f MiB (limit %d MiB):\n' "$(find .gpu -type f -o -type l | wc -l)" \
    "$(echo "$size_kb / 1024" | bc -l)" "$limit_mb"
(cd .gpu && find . -type f -o -type l | sort | sed 's/^/  /')
[ "$size_kb" -le $((limit_mb * 1024)) ] || { echo "gpu-bundle: over $limit_mb MiB" >&2; exit 1; }
