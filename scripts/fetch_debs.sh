#!/usr/bin/env bash
# fetch_debs.sh: download (not install) the Debian packages dptrain's build and tests need,
# with their dependencies, into .debs/, for a GPU machine that cannot reach the archive
# (scripts/gpu_check.sh unpacks them there).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .debs
grep -q '^/.debs/' .git/info/exclude 2>/dev/null || echo '/.debs/' >> .git/info/exclude
pkgs="libopenblas-dev libopenblas0-openmp libopenblas0-pthread libopenblas0 libopenmpi-dev openmpi-bin libopenmpi3 libcmocka-dev libcmocka0 zlib1g-dev dataset-fashion-mnist"
deps=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances $pkgs | grep '^\w' | sort -u)
(cd .debs && apt-get download $deps 2>/dev/null || true)
du -sh .debs
