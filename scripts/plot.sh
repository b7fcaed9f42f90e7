#!/usr/bin/env bash
# plot.sh METRICS.jsonl [OUT.png]: draw loss, accuracy and throughput of a run from its
# [log] metrics file into a PNG with gnuplot (Debian package gnuplot-nox, installed by make deps).
set -euo pipefail
in=${1:?usage: scripts/plot.sh METRICS.jsonl [OUT.png]}
out=${2:-${in%.jsonl}.png}
[ -r "$in" ] || { echo "error: cannot read $in" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "error: gnuplot not found; HINT: make deps (gnuplot-nox)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# field NAME from a JSON line (flat objects of numbers and strings, as dptrain writes them)
field() { sed -n "s/.*\"$1\":\\([^,}]*\\).*/\\1/p"; }
grep '"kind":"train"' "$in" | while IFS= read -r line; do
    printf '%s %s %s %s\n' "$(field step <<<"$line")" "$(field loss <<<"$line")" \
        "$(field acc <<<"$line")" "$(field img_s <<<"$line")"
done > "$tmp/train.dat"
grep '"kind":"eval"' "$in" | while IFS= read -r line; do
    printf '%s %s %s\n' "$(field step <<<"$line")" "$(field test_loss <<<"$line")" "$(field test_acc <<<"$line")"
done > "$tmp/eval.dat"
[ -s "$tmp/train.dat" ] || { echo "error: $in has no train records" >&2; exit 1; }
gnuplot <<GP
set terminal pngcairo size 1200,900 font ",10" noenhanced
set output "$out"
set multiplot layout 3,1 title "$(basename "$in")"
set grid
set xlabel "step"
set ylabel "loss"
plot "$tmp/train.dat" using 1:2 with lines title "train loss", \
     "$tmp/eval.dat" using 1:2 with linespoints title "test loss"
set ylabel "accuracy (%)"
plot "$tmp/train.dat" using 1:(\$3*100) with lines title "train acc", \
     "$tmp/eval.dat" using 1:(\$3*100) with linespoints title "test acc"
set ylabel "img/s"
plot "$tmp/train.dat" using 1:4 with lines title "throughput"
unset multiplot
GP
echo "wrote $out"
