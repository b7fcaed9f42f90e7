#!/usr/bin/env bash
# doc_trainer.sh: the program of docs/writing-a-model.md that trains its own model through
# dpt_train_main, built against libdpt.a and include/ only (make builds build/tests/doc_trainer):
# under mpirun -np 2 it trains, its key is validated and listed, and a run whose rank 1 dies
# at step 120 resumes from the step-100 checkpoint and ends exactly where an uninterrupted
# run ends. Prints one ok/FAIL line per case.
cd "$(dirname "$0")/.."
. tests/common.sh
bin=${BUILD:-build}/tests/doc_trainer
ini=${BUILD:-build}/tests/doc_trainer.ini
if [ $mpi -eq 1 ]; then
    launch=(timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2)
    two=()
else
    launch=(timeout 300) # an MPI=0 build: the same two replicas as DataParallel threads
    two=(--set distributed.devices=cpu:0,cpu:1)
fi
common=(--set train.threads=1 --set data.test_limit=2000 "${two[@]}")

# its key is the schema's: listed, validated, suggested
ref=$("$bin" --config-reference)
grep -qF '| `wide_units` | int in [8, 65536] | `512` | wide_mlp: hidden units |' <<<"$ref"
check "--config-reference lists the model's own key" $? "$(grep wide <<<"$ref")"
out=$("$bin" "$ini" --set model.wide_unit=3 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "unknown key 'wide_unit' in \[model\]; did you mean 'wide_units'" <<<"$out"
check "a misspelt model key is refused with a suggestion" $? "exit $rc: $out"
out=$("$bin" "$ini" --set model.wide_units=4 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "\[model\] wide_units = 4: out of range" <<<"$out"
check "a model key out of its declared range is refused" $? "exit $rc: $out"

# uninterrupted, 2 ranks: 150 steps (19200 samples / 2 ranks / 64), checkpoints every 50
full=$("${launch[@]}" "$bin" "$ini" "${common[@]}" --set checkpoint.dir="$tmp/full" 2>&1); rc=$?
final=$(grep -o 'test loss [0-9.]* acc [0-9.]*%' <<<"$full")
[ $rc -eq 0 ] && [ -n "$final" ] && grep -q "model wide_mlp" <<<"$full" && grep -q "pass  final_test_acc >= 75%" <<<"$full"
check "2 ranks train the doc's own model and meet its [expect]" $? "exit $rc: $(tail -5 <<<"$full")"

# rank 1 dies at step 120; the job ends; the resumed run continues from step 100
out=$("${launch[@]}" "$bin" "$ini" "${common[@]}" --set checkpoint.dir="$tmp/cut" --set distributed.fault=exit \
      --set distributed.fault_rank=1 --set distributed.fault_step=120 2>&1); rc=$?
[ $rc -ne 0 ] && [ -f "$tmp/cut/ckpt-step00000100.dpt" ]
check "a rank that dies ends the job; the step-100 checkpoint is there" $? "exit $rc: $(ls "$tmp/cut" 2>&1)"
out=$("${launch[@]}" "$bin" "$ini" "${common[@]}" --set checkpoint.dir="$tmp/cut" --resume latest 2>&1); rc=$?
resumed=$(grep -o 'test loss [0-9.]* acc [0-9.]*%' <<<"$out")
[ $rc -eq 0 ] && grep -q "resumed from $tmp/cut/ckpt-step00000100.dpt" <<<"$out" && [ -n "$resumed" ] &&
    [ "$resumed" = "$final" ] && [ -n "$(sha <<<"$full")" ] && [ "$(sha <<<"$out")" = "$(sha <<<"$full")" ]
ok=$? # before the message: a $(...) in it would set $? to its own status
check "resumed from the checkpoint, it ends where the uninterrupted run ends ($final, the same weights)" $ok \
    "exit $rc, '$resumed' vs '$final': $(tail -4 <<<"$out")"
[ $failed -eq 0 ]
