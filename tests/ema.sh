#!/usr/bin/env bash
# ema.sh: [train] ema_decay, the weight averages. The CNN (batch norm: parameters and buffers)
# trained 20 steps with decay 0.8, a checkpoint every step: the last checkpoint's averages
# equal PyTorch's formula (torch.optim.swa_utils.get_ema_multi_avg_fn: avg += (1 - decay) *
# (w - avg)) recomputed in float64 by NumPy from the weights of the start (a run at learning
# rate 0) and of every step, all exported by --export npz, also with ema_warmup. Keeping averages changes no weight;
# a resume continues them bit for bit; a checkpoint without them starts them from its weights,
# saying so; --eval --ema gives the epoch line's "ema test loss"; [model] init = ema:CKPT starts
# from them; --ema without averages, or
# without --eval/--predict/--sample/--export, is refused; deterministic mode keeps them
# bit-identical on 1 and 2 ranks; DDP, ZeRO 1 and DataParallel on 2 agree. One ok/FAIL line per case.
cd "$(dirname "$0")/.."
. tests/common.sh
py=/usr/bin/python3
cnn=(configs/fmnist_cnn.ini --set train.threads=1 --set data.train_limit=640 --set data.test_limit=200
     --set train.batch=64 --set train.epochs=2 --set log.interval=1000 --set checkpoint.keep_last=0)
ema=(--set train.ema_decay=0.8)

# the averages against NumPy's, from the weights of every step (the run writes in $tmp/run, moved
# to $tmp/a: the resume below writes there too, so their config records are the same)
./train "${cnn[@]}" "${ema[@]}" --set checkpoint.dir="$tmp/run" --set checkpoint.every_steps=1 > "$tmp/a.log" 2>&1
rc=$?
mv "$tmp/run" "$tmp/a"
# the start: the parameters of a step at learning rate 0 (its batch norm statistics did move)
./train "${cnn[@]}" --set optim.lr=0 --set train.max_steps=1 --set checkpoint.every_steps=1 \
    --set checkpoint.dir="$tmp/w0" > "$tmp/w0.log" 2>&1
rc0=$?
ok=$([ $rc -eq 0 ] && [ $rc0 -eq 0 ] && echo 0 || echo 1)
check "a CNN run keeping averages (decay 0.8), a checkpoint every step" "$ok" "$(tail -n 3 "$tmp/a.log" "$tmp/w0.log")"
mkdir -p "$tmp/npz"
./train --export npz "$tmp/w0/ckpt-step00000001.dpt" "$tmp/npz/w0.npz" > /dev/null 2>&1 || echo "w0 export failed"
for s in $(seq 1 20); do
    ./train --export npz "$tmp/a/ckpt-step$(printf %08d "$s").dpt" "$tmp/npz/w$s.npz" > /dev/null 2>&1 || echo "w$s export failed"
done
./train --export npz "$tmp/a/ckpt-step00000020.dpt" "$tmp/npz/ema20.npz" --ema > "$tmp/e.log" 2>&1 || cat "$tmp/e.log"
# the same run with ema_warmup (the same weights: averages change no weight), its last averages
./train "${cnn[@]}" "${ema[@]}" --set train.ema_warmup=true --set checkpoint.dir="$tmp/wu" \
    --set checkpoint.every_steps=20 > "$tmp/wu.log" 2>&1 || tail -n 3 "$tmp/wu.log"
./train --export npz "$tmp/wu/ckpt-step00000020.dpt" "$tmp/npz/wu20.npz" --ema > "$tmp/e.log" 2>&1 || cat "$tmp/e.log"
averages_check() { # NAME WARMUP: NumPy's recurrence against npz/NAME.npz
$py - "$tmp/npz" "$1" "$2" <<'PY' 2>&1
import sys
import numpy as np
d, name, warmup = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
decay = 0.8
w0 = np.load(f"{d}/w0.npz")
avg = {k: w0[k].astype(np.float64) for k in w0.files}
for k in avg:  # batch norm's statistics start at mean 0, variance 1 (torch.nn.BatchNorm2d's)
    if k.endswith("running_mean"): avg[k][:] = 0
    if k.endswith("running_var"): avg[k][:] = 1
for s in range(1, 21):
    w = np.load(f"{d}/w{s}.npz")
    # warm-up: TensorFlow's ExponentialMovingAverage(num_updates = s)
    ds = min(decay, (1 + s) / (10 + s)) if warmup else decay
    for k in avg:  # torch.optim.swa_utils.get_ema_multi_avg_fn, in float64
        avg[k] += (1 - ds) * (w[k].astype(np.float64) - avg[k])
got = np.load(f"{d}/{name}.npz")
assert sorted(got.files) == sorted(avg), (got.files, list(avg))
worst = 0.0
for k in avg:
    # float32 updates: each rounds by 2^-24 of |avg| (and of the weights' term); the recurrence
    # shrinks old errors by the decay, so they stay within a few 2^-24 of the largest magnitude
    scale = max(np.abs(avg[k]).max(), 1e-30)
    err = np.abs(got[k].astype(np.float64) - avg[k]).max() / scale
    worst = max(worst, err)
    assert err < 64 * 2.0**-24, (k, err)
buffers = [k for k in avg if "running" in k]
assert buffers, "no buffer averaged"
print(f"{len(avg)} tensors ({len(buffers)} buffers), largest error {worst:.2e} of each tensor's magnitude")
PY
}
out=$(averages_check ema20 0)
check "the averages after 20 steps are NumPy's float64 recurrence from the weights of every step: $out" $? "$out"
out=$(averages_check wu20 1)
check "with ema_warmup, the recurrence at min(0.8, (1 + k) / (10 + k)): $out" $? "$out"
out=$(averages_check wu20 0)
[ $? -ne 0 ]
check "(and the warm-up's averages are not the plain recurrence's)" $? "$out"

# keeping averages changes no weight
./train "${cnn[@]}" --set checkpoint.dir="$tmp/b" --set checkpoint.every_steps=1 > "$tmp/b.log" 2>&1
[ -n "$(sha < "$tmp/a.log")" ] && [ "$(sha < "$tmp/a.log")" = "$(sha < "$tmp/b.log")" ] &&
    grep -q "ema test loss" "$tmp/a.log" && ! grep -q "ema test loss" "$tmp/b.log"
ok=$? # before the message: a $(...) in it would set $? to its own status
check "the weights of the run without averages ($(sha < "$tmp/b.log" | cut -c1-16)...), the epoch lines with ema test loss" $ok \
    "$(sha < "$tmp/a.log") vs $(sha < "$tmp/b.log")"

# a resume continues the averages bit for bit: step 13's checkpoint alone, run to the end
mkdir -p "$tmp/run" && cp "$tmp/a/ckpt-step00000013.dpt" "$tmp/run/"
out=$(./train "${cnn[@]}" "${ema[@]}" --set checkpoint.dir="$tmp/run" --set checkpoint.every_steps=1 --resume latest 2>&1)
rc=$?
[ $rc -eq 0 ] && cmp -s "$tmp/a/ckpt-step00000020.dpt" "$tmp/run/ckpt-step00000020.dpt" &&
    ./train --inspect "$tmp/run/ckpt-step00000020.dpt" | grep -q "^averages sha256"
check "resumed at step 13: step 20's checkpoint, averages included, is the uninterrupted run's byte for byte" $? \
    "exit $rc: $(tail -3 <<<"$out")"

# a checkpoint written without averages: they start from its weights, said once
mkdir -p "$tmp/n" && cp "$tmp/b/ckpt-step00000010.dpt" "$tmp/n/"
out=$(./train "${cnn[@]}" "${ema[@]}" --set checkpoint.dir="$tmp/n" --resume latest 2>&1)
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c "holds no weight averages: \[train\] ema_decay's start from its weights" <<<"$out")" = 1 ] &&
    grep -q "ema test loss" <<<"$out"
check "resumed from a checkpoint without averages: they start from its weights, said once" $? "exit $rc: $(tail -3 <<<"$out")"

# --eval --ema: the last epoch line's ema test loss; --eval alone: its test loss
last=$(grep "^epoch 2 done" "$tmp/a.log")
want_ema=$(sed -n 's/.*ema test loss \([0-9.]*\).*/\1/p' <<<"$last")
want=$(sed -n 's/.*| test loss \([0-9.]*\).*/\1/p' <<<"$last")
got_ema=$(./train "${cnn[@]}" --eval "$tmp/a/ckpt-step00000020.dpt" --ema 2>&1 | sed -n 's/^eval .*(weight averages) | test loss \([0-9.]*\).*/\1/p')
got=$(./train "${cnn[@]}" --eval "$tmp/a/ckpt-step00000020.dpt" 2>&1 | sed -n 's/^eval | [^|]* | test loss \([0-9.]*\).*/\1/p')
[ -n "$want_ema" ] && [ "$got_ema" = "$want_ema" ] && [ -n "$want" ] && [ "$got" = "$want" ] && [ "$want" != "$want_ema" ]
check "--eval --ema: the epoch line's ema test loss ($want_ema); --eval: its test loss ($want)" $? \
    "ema $got_ema vs $want_ema, weights $got vs $want"

# fine-tuning from the averages: [model] init = ema:CKPT, one step at learning rate 0 (the MLP:
# no statistics move) ends with the weights hash --inspect gives the averages
mlp=(configs/fmnist_mlp.ini --set train.threads=1 --set data.train_limit=640 --set data.test_limit=100
     --set train.epochs=1 --set log.interval=1000)
./train "${mlp[@]}" "${ema[@]}" --set checkpoint.dir="$tmp/m" --set checkpoint.every_epochs=1 > /dev/null 2>&1
want=$(./train --inspect "$tmp/m" 2>&1 | sed -n 's/^averages sha256 //p')
out=$(./train "${mlp[@]}" --set model.init="ema:$tmp/m" --set optim.lr=0 --set train.max_steps=1 --set checkpoint.dir="$tmp/m2" 2>&1)
[ -n "$want" ] && [ "$(sha <<<"$out")" = "$want" ] && grep -q "^init from the weight averages of " <<<"$out"
check "[model] init = ema:CKPT, learning rate 0: the weights are the checkpoint's averages (${want:0:16}...)" $? \
    "$(sha <<<"$out") vs $want: $(grep init <<<"$out")"

# refused: averages a checkpoint lacks; --ema with nothing to choose for
out=$(./train "${cnn[@]}" --eval "$tmp/b/ckpt-step00000020.dpt" --ema 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "ckpt-step00000020.dpt holds no weight averages" <<<"$out" && grep -q "HINT: .*leave out --ema" <<<"$out"
check "--eval --ema on a checkpoint without averages: exit 1, the file named, with a HINT" $? "exit $rc: $out"
out=$(./train --export npz "$tmp/b/ckpt-step00000020.dpt" "$tmp/x.npz" --ema 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "holds no weight averages" <<<"$out" && [ ! -e "$tmp/x.npz" ]
check "--export --ema on it: exit 1, no file" $? "exit $rc: $out"
out=$(./train "${cnn[@]}" --ema 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "goes with --eval, --predict, --sample or --export" <<<"$out" && grep -q "ema_decay" <<<"$out"
check "--ema while training: usage error naming [train] ema_decay" $? "exit $rc: $out"
out=$(./train "${cnn[@]}" --set train.ema_decay=1 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "ema_decay" <<<"$out"
check "ema_decay = 1 (averages that never move): refused naming the key" $? "exit $rc: $out"

# deterministic mode: the averages bit-identical on 1 and 2 ranks (the whole checkpoint's tensors)
if [ $mpi -eq 1 ]; then
    det=(configs/fmnist_mlp.ini --set train.threads=1 --set data.train_limit=3200 --set data.test_limit=500
         --set log.interval=1000 --set train.global_batch=64 --set train.deterministic=true --set train.max_steps=20
         "${ema[@]}" --set checkpoint.every_steps=20)
    ./train "${det[@]}" --set checkpoint.dir="$tmp/d1" > "$tmp/d1.log" 2>&1
    timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2 ./train "${det[@]}" --set checkpoint.dir="$tmp/d2" > "$tmp/d2.log" 2>&1
    a1=$(./train --inspect "$tmp/d1/ckpt-step00000020.dpt" 2>&1 | sed -n 's/^averages sha256 //p')
    a2=$(./train --inspect "$tmp/d2/ckpt-step00000020.dpt" 2>&1 | sed -n 's/^averages sha256 //p')
    [ -n "$a1" ] && [ "$a1" = "$a2" ] && [ -n "$(sha < "$tmp/d1.log")" ] && [ "$(sha < "$tmp/d1.log")" = "$(sha < "$tmp/d2.log")" ]
    check "deterministic: the averages (${a1:0:16}...) and the weights bit-identical on 1 and 2 ranks" $? \
        "averages $a1 vs $a2: $(tail -n 2 "$tmp/d1.log"; tail -n 2 "$tmp/d2.log")"
    # DDP, ZeRO stage 1 (each rank steps its share, the parameters gathered before the averages
    # move) and DataParallel's replicas: the same averages
    base=(configs/fmnist_mlp.ini --set data.train_limit=1280 --set data.test_limit=300 --set train.epochs=1
          --set train.threads=1 --set log.interval=1000 "${ema[@]}" --set checkpoint.every_epochs=1)
    M="timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2"
    $M ./train "${base[@]}" --set checkpoint.dir="$tmp/p1" > /dev/null 2>&1
    $M ./train "${base[@]}" --set distributed.zero=1 --set checkpoint.dir="$tmp/p2" > /dev/null 2>&1
    ./train "${base[@]}" --set distributed.devices=cpu:0,cpu:1 --set checkpoint.dir="$tmp/p3" > /dev/null 2>&1
    hashes=$(for p in p1 p2 p3; do ./train --inspect "$tmp/$p" 2>&1 | sed -n 's/^averages sha256 //p'; done)
    [ "$(wc -l <<<"$hashes")" = 3 ] && [ "$(sort -u <<<"$hashes" | wc -l)" = 1 ] && [ -n "$(head -1 <<<"$hashes")" ]
    check "mpirun -np 2, the same with zero = 1, DataParallel 2 x cpu: the same averages" $? "$hashes"
else
    echo "skip deterministic on 2 ranks: no MPI build"
fi

echo "ema: $failed failed"
[ $failed -eq 0 ]
