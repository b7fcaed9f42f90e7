#!/usr/bin/env bash
# predict.sh: ./train CONFIG --predict CKPT. On Fashion-MNIST's test set: a row per sample in the
# file's order; the label column equals the IDX file's labels (read here with od); the share of
# rows whose top class is the label equals --eval's accuracy for the same checkpoint; with
# --top-k 0 every class, probabilities falling and summing to 1. On an image folder: each row
# names its file, the labels and classes by the folder's names, and a row's label is its file's
# class folder; --input, the same images copied without class folders (renamed, nested), gives
# each its labelled row's classes and probabilities with an empty label, as does the IDX test
# image file alone for the Fashion-MNIST model. A regression's rows
# give --eval's test loss as their mean squared error. Under mpirun -np 2 it is refused, saying
# why. And --show-batch: its grid's tiles are the training images (mixed as it says).
cd "$(dirname "$0")/.."
. tests/common.sh
mlp=(configs/fmnist_mlp.ini --set data.train_limit=3000 --set data.test_limit=700 --set train.epochs=1
     --set train.threads=1 --set log.interval=1000 --set checkpoint.dir="$tmp/ck")
./train "${mlp[@]}" --set checkpoint.final=true > "$tmp/train.log" 2>&1
check "an mlp run writes its checkpoint" $? "$(tail -3 "$tmp/train.log")"

./train "${mlp[@]}" --predict latest --out "$tmp/p.csv" > "$tmp/p.log" 2>&1 &&
    grep -q "predicted 700 samples of idx into $tmp/p.csv" "$tmp/p.log"
check "--predict writes 700 rows" $? "$(tail -3 "$tmp/p.log")"
[ "$(head -1 "$tmp/p.csv")" = "index,label,top1,p1,top2,p2,top3,p3,top4,p4,top5,p5" ] && [ "$(wc -l < "$tmp/p.csv")" -eq 701 ]
check "header and row count (5 classes a row by default)" $? "$(head -2 "$tmp/p.csv")"

dir=$(./train configs/fmnist_mlp.ini --dry-run 2>/dev/null | awk -F' = ' '$1 == "dir" {print $2; exit}')
zcat "$dir/t10k-labels-idx1-ubyte.gz" | tail -c +9 | head -c 700 | od -An -v -tu1 | tr -s ' ' '\n' | grep -v '^$' > "$tmp/want"
tail -n +2 "$tmp/p.csv" | cut -d, -f2 > "$tmp/got"
cmp -s "$tmp/want" "$tmp/got" && [ "$(wc -l < "$tmp/want")" -eq 700 ]
check "the label column is the IDX file's labels, in order" $? "$(diff "$tmp/want" "$tmp/got" | head -3)"

acc=$(./train "${mlp[@]}" --eval latest 2>&1 | grep -o 'acc [0-9.]*%' | grep -o '[0-9.]*')
mine=$(tail -n +2 "$tmp/p.csv" | awk -F, '$2 == $3 {r++} END {printf "%.2f", 100 * r / NR}')
[ -n "$acc" ] && [ "$acc" = "$mine" ]
check "top-1 accuracy from the file equals --eval's" $? "--eval $acc%, the file $mine%"

./train "${mlp[@]}" --predict latest --top-k 0 --out "$tmp/all.csv" > /dev/null 2>&1 &&
    tail -n +2 "$tmp/all.csv" | awk -F, '
        NF != 22 { bad = "fields " NF; exit }
        { s = 0; for (j = 4; j <= 22; j += 2) { s += $j; if (j > 4 && $j > $(j - 2)) { bad = "not falling at row " NR; exit } }
          if (s < 0.9999 || s > 1.0001) { bad = "sum " s " at row " NR; exit } }
        END { if (bad) { print bad; exit 1 } }'
check "--top-k 0: all 10 classes a row, probabilities falling, summing to 1" $? "$(head -2 "$tmp/all.csv")"

./train "${mlp[@]}" --predict latest --out /nonexistent/p.csv > "$tmp/bad.log" 2>&1
[ $? -ne 0 ] && grep -q "/nonexistent" "$tmp/bad.log"
check "an unwritable --out: refused, naming it" $? "$(cat "$tmp/bad.log")"

if ./train --config-reference 2>/dev/null | grep -q 'folder'; then
    scripts/make_image_folder.sh "$tmp/img" --train 6 --val 3 --width 40 --height 30 > /dev/null
    img=(configs/fmnist_mlp.ini --set data.source=folder --set data.dir="$tmp/img" --set data.image_size=16
         --set data.resize_size=16 --set train.epochs=1 --set train.batch=8 --set train.threads=1
         --set log.interval=1000 --set checkpoint.dir="$tmp/ick")
    ./train "${img[@]}" --set checkpoint.final=true > "$tmp/itrain.log" 2>&1 &&
        ./train "${img[@]}" --predict latest --top-k 2 --out "$tmp/img.csv" > "$tmp/ip.log" 2>&1
    check "a folder model's predictions" $? "$(tail -n 3 "$tmp/itrain.log" "$tmp/ip.log")"
    [ "$(head -1 "$tmp/img.csv")" = "index,name,label,top1,p1,top2,p2" ] && [ "$(wc -l < "$tmp/img.csv")" -eq 31 ] &&
        tail -n +2 "$tmp/img.csv" | awk -F, '{ split($2, part, "/"); if (part[1] != $3 || $4 !~ /^[0-9][0-9]_/) { print; exit 1 } }'
    check "folder rows: each file's name, its class folder as the label, classes by name" $? "$(head -3 "$tmp/img.csv")"

    # --input: the validation images copied without their class folders (renamed, nested, beside
    # a file that is no image) give each image the labelled run's probabilities, no label
    mkdir -p "$tmp/in/deep/er"
    echo "not an image" > "$tmp/in/notes.txt"
    k=0
    for f in $(cd "$tmp/img/val" && ls */*); do
        k=$((k + 1)); [ $((k % 2)) -eq 0 ] && to="deep/er/img$k.${f##*.}" || to="img$k.${f##*.}"
        cp "$tmp/img/val/$f" "$tmp/in/$to"
        echo "$f $to" >> "$tmp/in.map"
    done
    ./train "${img[@]}" --predict latest --top-k 2 --input "$tmp/in" --out "$tmp/in.csv" > "$tmp/in.log" 2>&1; rc=$?
    same=0
    while read -r from to; do
        a=$(grep ",$from," "$tmp/img.csv" | cut -d, -f4-) b=$(grep ",$to," "$tmp/in.csv" | cut -d, -f4-)
        [ -n "$a" ] && [ "$a" = "$b" ] && [ -z "$(grep ",$to," "$tmp/in.csv" | cut -d, -f3)" ] || same=1
    done < "$tmp/in.map"
    [ $rc -eq 0 ] && [ $same -eq 0 ] && [ "$(head -1 "$tmp/in.csv")" = "index,name,label,top1,p1,top2,p2" ] &&
        [ "$(wc -l < "$tmp/in.csv")" -eq $((k + 1)) ] && grep -q "deep/er/img2\." "$tmp/in.csv"
    check "--input FOLDER: $k unlabelled images (nested, renamed) get the labelled run's classes and probabilities, no label" $? \
        "exit $rc, same $same: $(head -3 "$tmp/in.csv"; tail -2 "$tmp/in.log")"
    one=$(sed -n 1p "$tmp/in.map")
    ./train "${img[@]}" --predict latest --top-k 2 --input "$tmp/in/${one#* }" --out "$tmp/one.csv" > /dev/null 2>&1
    [ "$(wc -l < "$tmp/one.csv")" -eq 2 ] &&
        [ "$(tail -1 "$tmp/one.csv" | cut -d, -f4-)" = "$(grep ",${one% *}," "$tmp/img.csv" | cut -d, -f4-)" ]
    check "--input one image: one row, its probabilities" $? "$(cat "$tmp/one.csv")"
    for bad in "$tmp/nothing-here" "$tmp/in/notes.txt"; do
        ./train "${img[@]}" --predict latest --input "$bad" --out "$tmp/bad.csv" > "$tmp/bad.log" 2>&1
        [ $? -ne 0 ] && grep -q "^error: --input $bad" "$tmp/bad.log" && grep -q HINT "$tmp/bad.log" && [ ! -e "$tmp/bad.csv" ]
        ok=$? # before the message: a $(...) in it would set $? to its own status
        check "--input $(basename "$bad"): refused, naming it" $ok "$(cat "$tmp/bad.log")"
    done
fi
# --input of an IDX model: the test set's image file alone, all 10000 images, without labels;
# the first 700 rows are the labelled run's (p.csv) but for the empty label
./train "${mlp[@]}" --predict latest --input "$dir/t10k-images-idx3-ubyte.gz" --out "$tmp/idx.csv" > "$tmp/idx.log" 2>&1
[ $? -eq 0 ] && [ "$(wc -l < "$tmp/idx.csv")" -eq 10001 ] && [ -z "$(tail -n +2 "$tmp/idx.csv" | cut -d, -f2 | sort -u)" ] &&
    cmp -s <(sed -n 2,701p "$tmp/idx.csv" | cut -d, -f1,3-) <(tail -n +2 "$tmp/p.csv" | cut -d, -f1,3-)
check "--input an IDX image file: 10000 rows without labels, the first 700 the labelled run's" $? "$(tail -2 "$tmp/idx.log"; sed -n 2,3p "$tmp/idx.csv")"
./train "${mlp[@]}" --predict latest --input "$dir/t10k-labels-idx1-ubyte.gz" --out "$tmp/bad.csv" > "$tmp/bad.log" 2>&1
[ $? -ne 0 ] && grep -q "t10k-labels-idx1-ubyte.gz" "$tmp/bad.log" && grep -q "HINT: --input takes an IDX image file" "$tmp/bad.log" && [ ! -e "$tmp/bad.csv" ]
check "--input a labels file where images are wanted: refused, naming it" $? "$(cat "$tmp/bad.log")"
./train "${mlp[@]}" --input "$tmp" > "$tmp/bad.log" 2>&1
[ $? -eq 2 ] && grep -q "goes with --predict" "$tmp/bad.log"
check "--input without --predict: a usage error" $? "$(cat "$tmp/bad.log")"

# a regression: the targets and the model's values; their mean squared error is --eval's test loss
reg=(configs/regression_mlp.ini --set train.epochs=1 --set data.test_limit=300 --set checkpoint.dir="$tmp/rg")
./train "${reg[@]}" --set checkpoint.final=true > /dev/null 2>&1
./train "${reg[@]}" --predict latest --out "$tmp/r.csv" > /dev/null 2>&1
loss=$(./train "${reg[@]}" --eval latest 2>&1 | grep -o 'test loss [0-9.]*' | grep -o '[0-9.]*$')
mse=$(tail -n +2 "$tmp/r.csv" | awk -F, '{ s += ($4 - $2)^2 + ($5 - $3)^2; n += 2 } END { printf "%.4f", s / n }')
[ "$(head -1 "$tmp/r.csv")" = "index,target0,target1,value0,value1" ] && [ -n "$loss" ] && [ "$loss" = "$mse" ]
check "a regression's rows: their mean squared error is --eval's test loss" $? "--eval $loss, the file $mse"
./train "${reg[@]}" --predict latest --input "$tmp" --out "$tmp/bad.csv" > "$tmp/bad.log" 2>&1
[ $? -ne 0 ] && grep -q "source = regression has no unlabelled input" "$tmp/bad.log" && [ ! -e "$tmp/bad.csv" ]
check "--input under a source that has none (regression): refused, saying which sources take it" $? "$(cat "$tmp/bad.log")"

# a language model: --input a text (a byte-level GPT reads its bytes) or a token shard, in rows
# of seq_len tokens, the last row the input's last seq_len: its top token is the one greedy
# sampling (--sample, temperature 0: the KV-cache path) puts after the same text
printf 'the quick brown fox jumps over the lazy dog. %.0s' $(seq 1 300) > "$tmp/text.txt"
build/tools/text_tokens --val-fraction 0.1 "$tmp/tok" "$tmp/text.txt" > /dev/null
gpt=(configs/gpt_fortunes.ini --set train.threads=1 --set train.max_steps=30 --set log.interval=1000
     --set data.train="$tmp/tok/train_*.bin" --set data.val="$tmp/tok/val_*.bin" --set data.seq_len=32
     --set train.batch=8 --set data.test_limit=16 --set checkpoint.dir="$tmp/lm")
./train "${gpt[@]}" > /dev/null 2>&1
printf 'the quick brown fox jumps over t' > "$tmp/in32.txt" # seq_len bytes: one row
head -c 100 "$tmp/text.txt" > "$tmp/in100.txt"              # 4 rows, the last from byte 68
./train "${gpt[@]}" --predict latest --input "$tmp/in32.txt" --top-k 3 --out "$tmp/l32.csv" > "$tmp/l.log" 2>&1
./train "${gpt[@]}" --predict latest --input "$tmp/in100.txt" --top-k 3 --out "$tmp/l100.csv" >> "$tmp/l.log" 2>&1
./train "${gpt[@]}" --predict latest --input "$tmp/tok/val_000000.bin" --out "$tmp/lv.csv" >> "$tmp/l.log" 2>&1
greedy=$(./train "${gpt[@]}" --sample latest --prompt "$(cat "$tmp/in32.txt")" --temperature 0 --tokens 1 2>/dev/null |
         head -1 | cut -c33 | tr -d '\n' | od -An -tu1 | tr -d ' ')
tail68=$(./train "${gpt[@]}" --sample latest --prompt "$(tail -c 32 "$tmp/in100.txt")" --temperature 0 --tokens 1 2>/dev/null |
         head -1 | cut -c33 | tr -d '\n' | od -An -tu1 | tr -d ' ')
ntok=$(od -An -t d4 -j 8 -N 4 "$tmp/tok/val_000000.bin" | tr -d ' ')
row=$(sed -n 2p "$tmp/l32.csv")
[ "$(head -1 "$tmp/l32.csv")" = "index,label,top1,p1,top2,p2,top3,p3" ] && [ "$(wc -l < "$tmp/l32.csv")" = 2 ] &&
    [ "$(cut -d, -f1-3 <<<"$row")" = "0,,$greedy" ] &&
    awk -F, '{ exit !($4 > 0 && $4 <= 1 && $4 >= $6 && $6 >= $8 && $4 + $6 + $8 <= 1.0001) }' <<<"$row" &&
    [ "$(wc -l < "$tmp/l100.csv")" = 5 ] && [ "$(sed -n 2p "$tmp/l100.csv")" = "$row" ] &&
    [ "$(sed -n 5p "$tmp/l100.csv" | cut -d, -f3)" = "$tail68" ] &&
    [ "$(($(wc -l < "$tmp/lv.csv") - 1))" = "$(( (ntok + 31) / 32 ))" ] &&
    grep -q "predicted 1 sample of bytes (32 tokens)" "$tmp/l.log" && grep -q "predicted 4 samples of bytes (100 tokens)" "$tmp/l.log"
check "a language model's --input: a text's rows (1 for 32 bytes, 4 for 100, the last one its last 32) and a shard's ($ntok tokens); the top token is greedy sampling's ('$greedy', '$tail68')" $? \
    "$(cat "$tmp/l.log" "$tmp/l32.csv"; tail -2 "$tmp/l100.csv")"
printf 'too short' > "$tmp/short.txt"
./train "${gpt[@]}" --predict latest --input "$tmp/short.txt" --out "$tmp/bad.csv" > "$tmp/bad.log" 2>&1
[ $? -eq 1 ] && grep -q "short.txt: 9 tokens, fewer than one sample of \[data\] seq_len = 32" "$tmp/bad.log" &&
    grep -q "HINT: --set data.seq_len=9" "$tmp/bad.log" && [ ! -e "$tmp/bad.csv" ]
check "a language model's --input shorter than seq_len: refused with the seq_len that fits" $? "$(cat "$tmp/bad.log")"

# --sample on a terminal: a model one step from random draws control bytes (ESC among them);
# a terminal gets them as \xNN (nothing it could take as a command), a pipe the bytes as drawn
if command -v script > /dev/null; then
    raw=("${gpt[@]}" --set train.max_steps=1 --set checkpoint.dir="$tmp/raw")
    ./train "${raw[@]}" > /dev/null 2>&1
    cmd="./train ${raw[*]} --sample latest --tokens 400 --seed 5"
    $cmd 2>/dev/null > "$tmp/pipe.bin"
    script -qc "$cmd 2>/dev/null" /dev/null > "$tmp/tty.bin" < /dev/null
    python3 - "$tmp/pipe.bin" "$tmp/tty.bin" <<'PY'
import re, sys
pipe, tty = (open(f, "rb").read() for f in sys.argv[1:])
tty = tty.replace(b"\r\n", b"\n")  # the terminal's line discipline
controls = lambda b: [c for c in b if (c < 0x20 or c == 0x7f) and c not in b"\n\t"]
decoded = re.sub(rb"\\x([0-9a-f]{2})", lambda m: bytes([int(m.group(1), 16)]), tty)
sys.exit(not (len(controls(pipe)) >= 3 and not controls(tty) and decoded == pipe))
PY
    ok=$? # before the message: a $(...) in it would set $? to its own status
    check "--sample on a terminal: $(python3 -c "import sys; print(sum(1 for c in open(sys.argv[1],'rb').read() if c < 32 and c not in (9, 10)))" "$tmp/pipe.bin") control bytes drawn, shown as \\xNN there and as drawn in a pipe" $ok \
        "$(od -c "$tmp/tty.bin" | head -5)"
else
    echo "skipped: --sample on a terminal (no script(1))"
fi

# --show-batch: the first training batch as a PNG grid. Without augmentation and shuffling its
# tiles are the IDX file's first images, byte for byte (the loader's normalisation undone);
# with mixup each tile is lambda x its image + (1 - lambda) x image 15-i (to one unit: lambda
# is printed to 4 digits); with cutmix the printed box holds image 15-i's bytes and the rest
# its own. The labels printed are the file's.
show=(configs/fmnist_cnn.ini --set data.shuffle=false --set train.batch=16 --set checkpoint.dir="$tmp/cks")
./train "${show[@]}" --show-batch "$tmp/plain.png" > "$tmp/sb1.log" 2>&1 &&
    ./train "${show[@]}" --set data.mixup=0.5 --show-batch "$tmp/mixup.png" > "$tmp/sb2.log" 2>&1 &&
    ./train "${show[@]}" --set data.cutmix=1 --show-batch "$tmp/cutmix.png" > "$tmp/sb3.log" 2>&1
check "--show-batch writes the grids" $? "$(tail -n 3 "$tmp/sb1.log" "$tmp/sb2.log" "$tmp/sb3.log")"
/usr/bin/python3 - "$dir" "$tmp" <<'PY'
import gzip, re, sys
import numpy as np
from PIL import Image
d, tmp = sys.argv[1], sys.argv[2]
with gzip.open(d + '/train-images-idx3-ubyte.gz') as f: img = np.frombuffer(f.read()[16:16 + 16 * 784], np.uint8).reshape(16, 28, 28)
with gzip.open(d + '/train-labels-idx1-ubyte.gz') as f: lab = np.frombuffer(f.read()[8:8 + 16], np.uint8)
def tiles(name):
    g = np.asarray(Image.open(tmp + '/' + name + '.png').convert('RGB')).astype(int)
    assert g.shape == (2 * 28 + 2, 8 * 28 + 7 * 2, 3), g.shape
    assert (g[..., 0] == g[..., 1]).all() and (g[..., 1] == g[..., 2]).all()  # gray shown as gray
    return np.stack([g[r * 30:r * 30 + 28, c * 30:c * 30 + 28, 0] for r in range(2) for c in range(8)])
def log(n): return open(tmp + '/sb%d.log' % n).read()
bad = []
if not (tiles('plain') == img).all(): bad.append('plain tiles are not the first 16 images')
if 'labels: ' + ' '.join(map(str, lab)) not in log(1): bad.append('labels')
lam = float(re.search(r'lambda ([0-9.]+)', log(2)).group(1))
want = lam * img.astype(float) + (1 - lam) * img[::-1].astype(float)
if not (0 < lam < 1) or np.abs(tiles('mixup') - want).max() > 1.0: bad.append('mixup %g: off by %g' % (lam, np.abs(tiles('mixup') - want).max()))
if 'partners\' labels: ' + ' '.join(map(str, lab[::-1])) not in log(2): bad.append('partners')
m = re.search(r'rows (\d+)-(\d+), columns (\d+)-(\d+)', log(3))
y0, y1, x0, x1 = (int(v) for v in m.groups())
want = img.copy(); want[:, y0:y1 + 1, x0:x1 + 1] = img[::-1, y0:y1 + 1, x0:x1 + 1]
if not (tiles('cutmix') == want).all(): bad.append('cutmix box %s' % (m.groups(),))
print('\n'.join(bad)); sys.exit(1 if bad else 0)
PY
check "the tiles are the images (mixed as printed), the labels the file's" $? ""
printf 'the quick brown fox jumps over the lazy dog. %.0s' $(seq 1 100) > "$tmp/text.txt"
build/tools/text_tokens --val-fraction 0.1 "$tmp/tok" "$tmp/text.txt" > /dev/null
./train configs/gpt_fortunes.ini --set data.train="$tmp/tok/train_*.bin" --set data.val="$tmp/tok/val_*.bin" \
    --set data.seq_len=16 --set train.batch=4 --show-batch "$tmp/t.png" > "$tmp/sb4.log" 2>&1
[ $? -eq 1 ] && grep -q "show-batch draws images, and this data's input (tokens)" "$tmp/sb4.log" && [ ! -e "$tmp/t.png" ]
check "--show-batch of token data: refused, nothing written" $? "$(tail -2 "$tmp/sb4.log")"
./train "${show[@]}" --show-batch "$tmp/x.png" --eval latest > "$tmp/sb5.log" 2>&1
[ $? -eq 2 ] && grep -q "error: --show-batch shows the first training batch of a new run and exits; --eval" "$tmp/sb5.log"
check "--show-batch with --eval: refused (exit 2)" $? "$(tail -2 "$tmp/sb5.log")"

if [ $mpi -eq 1 ]; then
    mpirun --oversubscribe --allow-run-as-root -np 2 ./train "${mlp[@]}" --predict latest --out "$tmp/m.csv" > "$tmp/m.log" 2>&1
    [ $? -ne 0 ] && grep -q "one process; this run has 2 ranks" "$tmp/m.log" && [ ! -e "$tmp/m.csv" ]
    check "under mpirun -np 2: refused, nothing written" $? "$(tail -3 "$tmp/m.log")"
fi
exit $((failed > 0))
