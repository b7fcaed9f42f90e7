#!/usr/bin/env bash
# folder.sh: [data] source = folder end to end. A folder written by scripts/make_image_folder.sh
# (JPEGs and PNGs of varied sizes, 10 classes) trains the same weights with 0 and 3 decoding
# workers; the file list is cached and read back; an interrupted run resumed mid-epoch ends
# with the uninterrupted run's weights; 2 ranks under mpirun share it; a truncated JPEG stops
# the job naming it (bad_files = stop) or is skipped and counted (skip); bad settings and an
# empty class folder are refused naming the key or folder; [train] deterministic gives one
# process and two replicas the same weights. One ok/FAIL line per case.
cd "$(dirname "$0")/.."
. tests/common.sh

if ! ./train --config-reference 2>/dev/null | grep -q 'folder'; then echo "skipped: no folder source"; exit 0; fi
scripts/make_image_folder.sh "$tmp/img" --train 12 --val 4 --width 96 --height 72 --png-every 5 >/dev/null ||
    { echo "FAIL make_image_folder.sh"; exit 1; }
printf '[model]\nname = cnn\n' > "$tmp/cnn.ini"
run=("$tmp/cnn.ini" --set data.source=folder --set data.dir="$tmp/img" --set data.image_size=32
     --set data.resize_size=36 --set data.hflip=true --set data.mean=0.485,0.456,0.406
     --set data.std=0.229,0.224,0.225 --set train.epochs=2 --set train.batch=8 --set train.threads=1
     --set log.interval=1000)

a=$(./train "${run[@]}" --set data.workers=0 --set checkpoint.dir="$tmp/a" 2>&1); rc=$?
b=$(./train "${run[@]}" --set data.workers=3 --set checkpoint.dir="$tmp/b" 2>&1); rcb=$?
[ $rc -eq 0 ] && [ $rcb -eq 0 ] && [ -n "$(sha <<<"$a")" ] && [ "$(sha <<<"$a")" = "$(sha <<<"$b")" ]
check "0 and 3 workers: the same weights" $? "exit $rc/$rcb, $(sha <<<"$a") vs $(sha <<<"$b")"
# TrivialAugmentWide on the decoded crops, then the batch augmentations after the loader
# (random erasing, mixup, cutmix): torchvision's ResNet-50 recipe
mixed=(--set data.auto_augment=trivial_wide --set data.random_erase=0.25 --set data.mixup=0.2 --set data.cutmix=1)
c=$(./train "${run[@]}" "${mixed[@]}" --set data.workers=0 --set checkpoint.dir="$tmp/c" 2>&1); rc=$?
d=$(./train "${run[@]}" "${mixed[@]}" --set data.workers=3 --set checkpoint.dir="$tmp/d" 2>&1); rcb=$?
[ $rc -eq 0 ] && [ $rcb -eq 0 ] && [ -n "$(sha <<<"$c")" ] && [ "$(sha <<<"$c")" = "$(sha <<<"$d")" ] &&
    [ "$(sha <<<"$c")" != "$(sha <<<"$a")" ]
check "with TrivialAugmentWide, random erasing, mixup and cutmix too (and other weights than without)" $? "exit $rc/$rcb, $(sha <<<"$c") vs $(sha <<<"$d")"
grep -q "^augment | hflip | TrivialAugmentWide | random erasing 0.25" <<<"$c"
check "the header says which augmentations run" $? "$(grep '^augment' <<<"$c")"
e=$(./train "${run[@]}" --set data.auto_augment=rand --set data.workers=0 --set checkpoint.dir="$tmp/e" 2>&1); rc=$?
f=$(./train "${run[@]}" --set data.auto_augment=rand --set data.workers=3 --set checkpoint.dir="$tmp/f" 2>&1); rcb=$?
[ $rc -eq 0 ] && [ $rcb -eq 0 ] && [ -n "$(sha <<<"$e")" ] && [ "$(sha <<<"$e")" = "$(sha <<<"$f")" ] &&
    [ "$(sha <<<"$e")" != "$(sha <<<"$a")" ] && grep -q "RandAugment (2 ops, magnitude 9 of 30)" <<<"$e"
check "RandAugment: the same weights with 0 and 3 workers, others than without" $? "exit $rc/$rcb, $(sha <<<"$e") vs $(sha <<<"$f")"
g=$(./train "${run[@]}" --set data.repeated_augment=3 --set data.workers=0 --set checkpoint.dir="$tmp/g" 2>&1); rc=$?
k=$(./train "${run[@]}" --set data.repeated_augment=3 --set data.workers=3 --set checkpoint.dir="$tmp/k" 2>&1); rcb=$?
[ $rc -eq 0 ] && [ $rcb -eq 0 ] && [ -n "$(sha <<<"$g")" ] && [ "$(sha <<<"$g")" = "$(sha <<<"$k")" ] &&
    [ "$(sha <<<"$g")" != "$(sha <<<"$a")" ] && grep -q "repeated augmentation x3" <<<"$g"
check "repeated augmentation: the same weights with 0 and 3 workers, others than without" $? "exit $rc/$rcb, $(sha <<<"$g") vs $(sha <<<"$k")"
grep -q "^10 classes: 0 00_tshirt (12), 1 01_trouser (12)" <<<"$a" &&
    grep -q "data $tmp/img | train 120 per rank of 120 | test 40 | 3x32x32 | 10 classes" <<<"$a"
check "header: classes with counts, 3x32x32" $? "$(head -8 <<<"$a")"
grep -q "train: walked, file list cached in $tmp/img/.dptrain-files-train" <<<"$a" &&
    grep -q "train: file list from $tmp/img/.dptrain-files-train" <<<"$b"
check "file list cached, then read back" $? "$(grep '^images' <<<"$a$b")"
# a cache rewritten to name a file outside the folder (anyone who can write the data folder can
# write it, mtimes and all): not trusted, walked again, the file outside never opened
cp -r "$tmp/img" "$tmp/esc" && rm -f "$tmp/esc"/.dptrain-files-*
./train "${run[@]}" --set data.dir="$tmp/esc" --set checkpoint.dir="$tmp/esc_a" --set train.max_steps=1 >/dev/null 2>&1
sed -i 's#^0 00_tshirt/00001.jpg$#0 00_tshirt/../../../../../../../etc/passwd#' "$tmp/esc/.dptrain-files-train"
e=$(./train "${run[@]}" --set data.dir="$tmp/esc" --set checkpoint.dir="$tmp/esc_b" --set train.max_steps=1 2>&1); rc=$?
grep -q '/etc/passwd' "$tmp/esc/.dptrain-files-train" 2>/dev/null; planted=$?
[ $rc -eq 0 ] && [ $planted -ne 0 ] && grep -q "train: walked, file list cached in $tmp/esc/.dptrain-files-train" <<<"$e"
check "a cache naming ../../etc/passwd: refused, the folder walked and cached again" $? \
    "exit $rc, planted still there: $((1 - planted)): $(grep '^images\|error' <<<"$e")"
# a FIFO planted where the cache goes: no cache (not opened blocking, not read), walked; it is
# not replaced (what is not dptrain's own file is refused, not mended) and the note says why
cp -r "$tmp/img" "$tmp/pipe" && rm -f "$tmp/pipe"/.dptrain-files-* && mkfifo "$tmp/pipe/.dptrain-files-train"
e=$(timeout 60 ./train "${run[@]}" --set data.dir="$tmp/pipe" --set checkpoint.dir="$tmp/pipe_a" --set train.max_steps=1 2>&1); rc=$?
[ $rc -eq 0 ] && [ -p "$tmp/pipe/.dptrain-files-train" ] && grep -q "train: walked (file list not cached: cannot write $tmp/pipe/.dptrain-files-train: something that is not a regular file (a FIFO, a device or a socket) stands at its name; " <<<"$e"
check "a FIFO where the file-list cache goes: walked, not waited on, not replaced, and the note says why" $? \
    "exit $rc: $(grep '^images\|error' <<<"$e")"

# interrupted at step 20 (mid epoch 2 of 15 steps), resumed: the uninterrupted weights
./train "${run[@]}" --set checkpoint.dir="$tmp/c" --set checkpoint.every_steps=5 --set distributed.fault=exit \
    --set distributed.fault_step=20 >/dev/null 2>&1
c=$(./train "${run[@]}" --set checkpoint.dir="$tmp/c" --set checkpoint.every_steps=5 --resume auto 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(sha <<<"$c")" = "$(sha <<<"$a")" ] && grep -q "resumed from $tmp/c/ckpt-step00000020" <<<"$c"
check "killed at step 20, resumed mid-epoch: the uninterrupted weights" $? \
    "exit $rc, $(sha <<<"$c") vs $(sha <<<"$a"): $(grep -i resum <<<"$c")"

# the folder changed under a checkpoint: the resume goes on, saying so
cp -r "$tmp/img" "$tmp/grown" && rm -f "$tmp/grown"/.dptrain-files-*
./train "${run[@]}" --set data.dir="$tmp/grown" --set checkpoint.dir="$tmp/g" --set checkpoint.every_steps=5 \
    --set distributed.fault=exit --set distributed.fault_step=10 >/dev/null 2>&1
cp "$tmp/grown/train/00_tshirt/00001.jpg" "$tmp/grown/train/00_tshirt/00001b.jpg"
g=$(./train "${run[@]}" --set data.dir="$tmp/grown" --set checkpoint.dir="$tmp/g" --set checkpoint.every_steps=5 \
    --resume auto 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "warning: $tmp/g/ckpt-step00000010.dpt was written on other data than $tmp/grown/train holds now" <<<"$g"
check "a file added since the checkpoint: resumed, with a warning naming the folder" $? "exit $rc: $(grep -i 'warn\|error' <<<"$g")"

if [ $mpi -eq 1 ]; then
    m=$(timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2 ./train "${run[@]}" --set data.workers=1 \
        --set checkpoint.dir="$tmp/m" 2>&1); rc=$?
    [ $rc -eq 0 ] && grep -q "train 60 per rank of 120" <<<"$m" && [ -n "$(sha <<<"$m")" ]
    check "mpirun -np 2: 60 files per rank, trains" $? "exit $rc: $(tail -3 <<<"$m")"
    # rank 1 reads another copy of the folder, one file renamed (the same count): refused
    cp -r "$tmp/img" "$tmp/img_1" && rm -f "$tmp/img_1"/.dptrain-files-* && cp -r "$tmp/img" "$tmp/img_0"
    mv "$tmp/img_1/train/04_coat/00003.jpg" "$tmp/img_1/train/04_coat/00003b.jpg"
    m=$(timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2 sh -c \
        "exec ./train $(printf '%q ' "${run[@]}") --set data.dir=$tmp/img_\$OMPI_COMM_WORLD_RANK --set checkpoint.dir=$tmp/m2" 2>&1); rc=$?
    [ $rc -ne 0 ] && grep -q "rank 1 differs from rank 0 in the data set's files" <<<"$m"
    check "mpirun -np 2, rank 1 on another copy of the folder: refused, naming it" $? "exit $rc: $(grep -m2 -i 'error\|differ' <<<"$m")"
fi

# [train] deterministic over the folder (its block sampler; draws seeded by the sample):
# one process and two DataParallel replicas end with the same weights (an MLP: the quickest)
printf '[model]\nname = mlp\n' > "$tmp/mlp.ini"
det=("$tmp/mlp.ini" "${run[@]:1}" --set train.deterministic=true --set train.global_batch=32
     --set train.deterministic_shard=8 --set train.epochs=1)
one=$(./train "${det[@]}" --set checkpoint.dir="$tmp/det1" 2>&1 | sha)
two=$(./train "${det[@]}" --set checkpoint.dir="$tmp/det2" --set distributed.devices=cpu:0,cpu:1 2>&1 | sha)
[ -n "$one" ] && [ "$one" = "$two" ]
check "deterministic: 1 process and 2 replicas, the same weights" $? "$one vs $two"

# a truncated JPEG: stop names it; skip counts it
cp -r "$tmp/img" "$tmp/bad"
victim="$tmp/bad/train/03_dress/00002.jpg"
head -c 1000 "$tmp/img/train/03_dress/00002.jpg" > "$victim"
out=$(./train "${run[@]}" --set data.dir="$tmp/bad" --set checkpoint.dir="$tmp/d" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: $victim: truncated JPEG" <<<"$out" && grep -q "HINT: .*bad_files = skip" <<<"$out"
check "truncated JPEG, bad_files = stop: exit 1 naming it" $? "exit $rc: $(tail -3 <<<"$out")"
out=$(./train "${run[@]}" --set data.dir="$tmp/bad" --set data.bad_files=skip --set checkpoint.dir="$tmp/e" \
      --set log.metrics="$tmp/e.jsonl" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "warning: $victim: truncated JPEG" <<<"$out" && grep -q "epoch 2 done.*| 1 bad file skipped" <<<"$out" &&
    grep -q '"bad_files":1' "$tmp/e.jsonl" && [ "$(grep -c "warning: $victim" <<<"$out")" = 1 ]
check "truncated JPEG, bad_files = skip: skipped, counted once (not once an epoch) in the log and metrics, warned once" $? "exit $rc: $(grep -i bad <<<"$out")"

# refused settings and layouts, each named
refused() { # NAME EXPECTED-TEXT ARGS...
    local name=$1 want=$2; shift 2
    out=$(./train "${run[@]}" --set checkpoint.dir="$tmp/r" "$@" 2>&1); rc=$?
    [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q -- "$want" <<<"$out"
    check "$name" $? "exit $rc: $(head -3 <<<"$out")"
}
refused "two means for three channels" "\[data\] mean has 2 values, and the images have 3 channels" --set data.mean=0.5,0.5
refused "resize_size below image_size" "resize_size = 30 is smaller than the evaluation's crop, image_size = 32" --set data.resize_size=30
refused "resize_size below eval_image_size" "resize_size = 36 is smaller than the evaluation's crop, eval_image_size = 40" --set data.eval_image_size=40
refused "eval_image_size for a model whose parameters depend on the size" "model cnn's parameters depend on the image size (fc1.weight: 524288 values at 32x32, 819200 at 40x40)" --set data.eval_image_size=40 --set data.resize_size=44
# FixRes: a resnet trained on 32x32 crops, evaluated on 40x40 ones: the training run's last test
# loss is --eval's of its checkpoint at 40, and another at 32 (the evaluation did crop 40)
fix=("${run[@]}" --set model.name=resnet --set model.depth=8 --set data.eval_image_size=40 --set data.resize_size=44
     --set train.epochs=1 --set checkpoint.dir="$tmp/fix" --set checkpoint.final=true)
fa=$(./train "${fix[@]}" 2>&1); rc=$?
fb=$(./train "${fix[@]}" --eval latest 2>&1); rcb=$?
fc=$(./train "${fix[@]}" --set data.eval_image_size=0 --eval latest 2>&1); rcc=$?
la=$(grep "^epoch 1 done" <<<"$fa" | grep -o "test loss [0-9.]*" | grep -o "[0-9.]*$") lb=$(grep -o "loss [0-9.]*" <<<"$fb" | tail -n 1 | grep -o "[0-9.]*$")
lc=$(grep -o "loss [0-9.]*" <<<"$fc" | tail -n 1 | grep -o "[0-9.]*$")
[ $rc -eq 0 ] && [ $rcb -eq 0 ] && [ $rcc -eq 0 ] && grep -q "3x32x32 (test 3x40x40) | 10 classes" <<<"$fa" &&
    [ -n "$la" ] && [ "$la" = "$lb" ] && [ -n "$lc" ] && [ "$lc" != "$la" ]
check "eval_image_size: trains at 32, evaluates at 40 (loss $la; --eval at 40: $lb, at 32: $lc)" $? "exit $rc/$rcb/$rcc: $(grep '^data\|loss' <<<"$fa$fb" | head -5)"
refused "random_crop_pad with a folder" "random_crop_pad is for images in memory" --set data.random_crop_pad=4
refused "scale min > max" "\[data\] scale needs two numbers, min,max" --set data.scale=0.9,0.1
mkdir "$tmp/bad/train/10_empty"
refused "an empty class folder" "$tmp/bad/train/10_empty: class folder without" --set data.dir="$tmp/bad"
refused "no such folder" "$tmp/none/train: no such folder" --set data.dir="$tmp/none"
refused "[data] classes = 2 for 10 class folders" "\[data\] classes = 2, but $tmp/img/train has 10 class folders" --set data.classes=2

# names in output (issue 27 item 8): a FIFO and a link to itself named like images are said to
# be what they are (not "without a .jpg name"), a name with a newline is listed but not cached
# (saying why, not that the folder is read-only), and an escape sequence in a name reaches the
# terminal as '?'
cp -r "$tmp/img" "$tmp/odd" && rm -f "$tmp/odd"/.dptrain-files-*
mkfifo "$tmp/odd/train/01_trouser/pipe.jpg"
ln -s loop.jpg "$tmp/odd/train/01_trouser/loop.jpg"
cp "$tmp/img/train/01_trouser/00001.jpg" "$tmp/odd/train/01_trouser/new"$'\n'"line.jpg"
out=$(timeout 60 ./train "${run[@]}" --set data.dir="$tmp/odd" --set checkpoint.dir="$tmp/od" --set train.max_steps=1 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "train: walked (file list not cached: a file or folder name holds a newline); 2 named like an image but not a regular file" <<<"$out" &&
    grep -q "1 01_trouser (13)" <<<"$out"
check "a FIFO and a looping link named .jpg said to be so; a newline in a name: listed, not cached, saying why" $? "exit $rc: $(grep -m3 'train:\|trouser\|error' <<<"$out")"
esc=$'\e[31m'
out=$(./train "${run[@]}" --set data.dir="$tmp/no${esc}such" --set checkpoint.dir="$tmp/oe" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "$tmp/no?\[31msuch" <<<"$out" && ! grep -q $'\e' <<<"$out"
check "an escape sequence in a value: shown as ?, never sent raw" $? "exit $rc: $(head -2 <<<"$out" | cat -v)"

# links: 22 levels of two links each to the next level (no loop) under one class, one JPEG at
# the bottom. Each real folder is walked once (2^22 walks otherwise, a start-up that never
# ends): the class gains that one file, and start-up takes seconds (issue 27 item 6)
cp -r "$tmp/img" "$tmp/maze" && rm -f "$tmp/maze"/.dptrain-files-*
for i in $(seq 0 22); do mkdir -p "$tmp/mazestore/d$i"; done
for i in $(seq 0 21); do ln -s "../d$((i + 1))" "$tmp/mazestore/d$i/a"; ln -s "../d$((i + 1))" "$tmp/mazestore/d$i/b"; done
cp "$tmp/img/train/00_tshirt/00001.jpg" "$tmp/mazestore/d22/deep.jpg"
ln -s "$tmp/mazestore/d0" "$tmp/maze/train/00_tshirt/maze"
out=$(timeout 60 ./train "${run[@]}" --set data.dir="$tmp/maze" --set checkpoint.dir="$tmp/mz" --set train.max_steps=1 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "0 00_tshirt (13)" <<<"$out" && grep -q "train 121 per rank of 121" <<<"$out"
check "22 levels of two links each: every folder walked once, the deep file listed once" $? "exit $rc: $(grep -m3 'tshirt\|error\|train 1' <<<"$out")"

[ $failed -eq 0 ]
