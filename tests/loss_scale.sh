#!/usr/bin/env bash
# loss_scale.sh: [train] loss_scale = dynamic. Powers of two scale and unscale exactly, so a
# run without overflow ends with the unscaled run's weights, its scale doubled every
# loss_scale_growth steps; a NaN on one rank of 2 or 3 makes every rank skip the step and halve
# the scale (all ranks end with the same weights); fp16 gradients on the wire from a scale of
# 1e12 back off until they fit and train; killed and resumed, the scale and its counter continue
# (the uninterrupted run's scale at the end); a diverging model stops once the scale is below 1,
# with a HINT naming bf16. One ok/FAIL line per case.
cd "$(dirname "$0")/.."
. tests/common.sh

base=(configs/fmnist_mlp.ini --set train.threads=1 --set data.train_limit=3200 --set data.test_limit=1000
      --set train.epochs=1 --set log.interval=1)
dyn=(--set train.loss_scale=dynamic --set train.loss_scale_init=1024 --set train.loss_scale_growth=10)
last() { # KEY FILE: the last value of a metrics key
    grep -o "\"$1\":[0-9.e+-]*" "$2" | tail -1 | cut -d: -f2
}

plain=$(./train "${base[@]}" --set checkpoint.dir="$tmp/p" 2>&1 | sha)
out=$(./train "${base[@]}" "${dyn[@]}" --set checkpoint.dir="$tmp/d" --set log.metrics="$tmp/d.jsonl" 2>&1); rc=$?
[ $rc -eq 0 ] && [ -n "$plain" ] && [ "$(sha <<<"$out")" = "$plain" ] && [ "$(last loss_scale "$tmp/d.jsonl")" = 32768 ] &&
    [ "$(last scale_skips "$tmp/d.jsonl")" = 0 ] && grep -q "| scale 32768" <<<"$out"
check "no overflow: the unscaled run's weights, scale x2 every 10 steps (1024 -> 32768 in 50 steps)" $? \
    "exit $rc, $(sha <<<"$out") vs $plain, scale $(last loss_scale "$tmp/d.jsonl")"

acc=(--set distributed.accum_steps=2 --set data.drop_last=false --set data.train_limit=3232)
plain=$(./train "${base[@]}" "${acc[@]}" --set checkpoint.dir="$tmp/pa" 2>&1 | sha)
out=$(./train "${base[@]}" "${dyn[@]}" "${acc[@]}" --set checkpoint.dir="$tmp/da" 2>&1); rc=$?
[ $rc -eq 0 ] && [ -n "$plain" ] && [ "$(sha <<<"$out")" = "$plain" ]
check "accumulation over 2 micro-batches and an uneven last batch: the unscaled run's weights" $? \
    "exit $rc, $(sha <<<"$out") vs $plain"

if [ $mpi -eq 1 ]; then
    for np in 2 3; do
        nan=(--set distributed.fault=nan --set distributed.fault_rank=$((np - 1)) --set distributed.fault_step=5)
        first=$(timeout 300 mpirun --oversubscribe --allow-run-as-root -np $np ./train "${base[@]}" "${dyn[@]}" \
                "${nan[@]}" --set checkpoint.dir="$tmp/n$np" --set log.metrics="$tmp/n$np.jsonl" 2>&1); rc=$?
        h=$(sha <<<"$first")
        # each rank checks its own weights against rank 0's: all must have taken the same decisions
        again=$(timeout 300 mpirun --oversubscribe --allow-run-as-root -np $np ./train "${base[@]}" "${dyn[@]}" \
                "${nan[@]}" --set checkpoint.dir="$tmp/m$np" --expect "weights_sha256 == $h" 2>&1); rc2=$?
        [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ -n "$h" ] && [ "$(last scale_skips "$tmp/n$np.jsonl")" = 1 ] &&
            grep -q "inf or nan gradients at step 6: step skipped, scale" <<<"$first"
        check "-np $np, a NaN on rank $((np - 1)) only: every rank skips, same weights on all" $? \
            "exit $rc/$rc2, skips $(last scale_skips "$tmp/n$np.jsonl"): $(grep -i 'scale\|error\|FAIL' <<<"$first$again" | head -3)"
    done
fi

out=$(./train "${base[@]}" --set data.train_limit=12800 --set train.loss_scale=dynamic --set train.loss_scale_init=1e12 \
      --set distributed.grad_compression=fp16 --set distributed.devices=cpu:0,cpu:1 --set log.interval=1000 \
      --set checkpoint.dir="$tmp/f" --set log.metrics="$tmp/f.jsonl" 2>&1); rc=$?
skips=$(last scale_skips "$tmp/f.jsonl")
acc=$(grep -o 'final test acc [0-9.]*' <<<"$out" | grep -o '[0-9.]*$')
[ $rc -eq 0 ] && [ "${skips:-0}" -ge 15 ] && awk "BEGIN{exit !($acc > 75)}"
check "fp16 on the wire from a scale of 1e12: backs off ($skips skips), then trains ($acc%)" $? "exit $rc: $(tail -3 <<<"$out")"

# killed at step 25, resumed: the scale goes on from the checkpoint's (uninterrupted: 2^16 at step 60)
full=(--set data.train_limit=3840 --set checkpoint.every_steps=5)
./train "${base[@]}" "${dyn[@]}" "${full[@]}" --set checkpoint.dir="$tmp/u" --set log.metrics="$tmp/u.jsonl" >/dev/null 2>&1
./train "${base[@]}" "${dyn[@]}" "${full[@]}" --set checkpoint.dir="$tmp/r" --set distributed.fault=exit \
    --set distributed.fault_step=25 >/dev/null 2>&1
saved=$(./train --inspect "$tmp/r/ckpt-step00000025.dpt" 2>&1 | grep "^loss_scale")
out=$(./train "${base[@]}" "${dyn[@]}" "${full[@]}" --set checkpoint.dir="$tmp/r" --set log.metrics="$tmp/r.jsonl" \
      --resume auto 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(last loss_scale "$tmp/u.jsonl")" = 65536 ] &&
    [ "$(last loss_scale "$tmp/r.jsonl")" = "$(last loss_scale "$tmp/u.jsonl")" ] &&
    grep -q "resumed from $tmp/r/ckpt-step00000025" <<<"$out" && grep -q "^loss_scale *4096$" <<<"$saved"
check "killed at step 25, resumed: the scale continues (4096 in the checkpoint, 65536 at the end)" $? \
    "exit $rc, scale $(last loss_scale "$tmp/r.jsonl") vs $(last loss_scale "$tmp/u.jsonl")"

out=$(./train "${base[@]}" --set train.loss_scale=dynamic --set optim.name=sgd --set optim.lr=100 --set optim.momentum=0 --set checkpoint.dir="$tmp/x" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "error: the loss scale fell below 1 at step" <<<"$out" && grep -q "HINT: .*precision = bf16" <<<"$out"
check "a diverging model: stopped when the scale falls below 1, HINT bf16" $? "exit $rc: $(tail -3 <<<"$out")"

[ $failed -eq 0 ]
