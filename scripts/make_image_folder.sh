#!/usr/bin/env bash
# make_image_folder.sh OUT [options]: write a small ImageNet-shaped folder of JPEGs
# (OUT/train/<class>/, OUT/val/<class>/; 10 classes of Fashion-MNIST pictures at about
# 500x375, or synthetic shapes without the data set) for [data] source = folder.
# Options: see `build/tools/make_image_folder` (--train N --val N per class, --width, --height,
# --vary, --quality, --png-every K, --source fmnist|synthetic).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s --no-print-directory build/tools/make_image_folder >/dev/null
exec build/tools/make_image_folder "$@"
