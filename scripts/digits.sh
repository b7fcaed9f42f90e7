#!/usr/bin/env bash
# digits.sh OUT: UCI's optical handwritten digits (1,797 8x8 images: 64 columns of 0-16, then the
# label) as the CSV that Debian's python3-sklearn ships, copied to OUT. Taken from the installed
# package when it is there, else from its .deb (apt-get download, no install: scikit-learn's
# dependencies are not needed for one data file). configs/digits_csv.ini reads it.
set -euo pipefail
out=$1
src=usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz
mkdir -p "$(dirname "$out")"
if [ -f "/$src" ]; then
    cp "/$src" "$out"
    exit 0
fi
work=$(mktemp -d /tmp/dpt_digits.XXXXXX)
trap 'rm -rf "$work"' EXIT
if ! (cd "$work" && apt-get download python3-sklearn > "$work/log" 2>&1); then
    cat "$work/log" >&2
    echo "error: apt-get download python3-sklearn failed (the digits CSV comes from that package)" >&2
    echo "HINT: run 'apt-get update' as root first, or install python3-sklearn" >&2
    exit 1
fi
dpkg-deb -x "$work"/python3-sklearn_*.deb "$work/x"
cp "$work/x/$src" "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out ($(zcat "$out" | wc -l) rows)"
