#!/usr/bin/env bash
# doc_llama.sh: docs/writing-a-model.md's LLaMA-style language model (RMSNorm, rotary embeddings,
# SwiGLU; make builds build/tests/doc_llama against libdpt.a and include/ only) on token shards
# of a small text: 2 ranks train it and its validation loss falls below the first step's; the
# same run as DataParallel's 2 replicas ends with the same weights; its decoder samples what the
# full forward samples. One ok/FAIL line per case.
cd "$(dirname "$0")/.."
. tests/common.sh
bin=${BUILD:-build}/tests/doc_llama
ini=${BUILD:-build}/tests/doc_llama.ini
for i in $(seq 1 400); do printf 'the quick brown fox %d jumps over the lazy dog. ' $((i % 7)); done > "$tmp/text.txt"
${BUILD:-build}/tools/text_tokens --val-fraction 0.1 "$tmp/tok" "$tmp/text.txt" > /dev/null
common=(--set "data.train=$tmp/tok/train_*.bin" --set "data.val=$tmp/tok/val_*.bin" --set data.seq_len=32
        --set train.batch=8 --set train.max_steps=40 --set log.interval=1 --set train.threads=1)
if [ $mpi -eq 1 ]; then
    two=(timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2 "$bin" "$ini")
else
    two=(timeout 300 "$bin" "$ini" --set distributed.devices=cpu:0,cpu:1)
fi

out=$("${two[@]}" "${common[@]}" --set checkpoint.dir="$tmp/ranks" --set checkpoint.final=true 2>&1); rc=$?
ranks=$(sha <<<"$out")
first=$(grep -o 'step  *1/[0-9]* | loss [0-9.]*' <<<"$out" | grep -o '[0-9.]*$')
final=$(grep -o 'final test loss [0-9.]*' <<<"$out" | grep -o '[0-9.]*$')
[ $rc -eq 0 ] && [ -n "$ranks" ] && grep -q "model mini_llama" <<<"$out" && [ -n "$first" ] && [ -n "$final" ] &&
    awk -v a="$first" -v b="$final" 'BEGIN { exit !(b < 0.6 * a) }'
ok=$?
check "2 ranks train the doc's LLaMA-style model: validation loss ${final:-?} after 40 steps, from ${first:-?}" $ok \
    "exit $rc: $(tail -5 <<<"$out")"

out=$(timeout 300 "$bin" "$ini" "${common[@]}" --set distributed.devices=cpu:0,cpu:1 --set checkpoint.dir="$tmp/dp" 2>&1)
rc=$?
[ $rc -eq 0 ] && [ -n "$ranks" ] && [ "$(sha <<<"$out")" = "$ranks" ]
ok=$?
check "DataParallel's 2 replicas end with the 2 ranks' weights" $ok "exit $rc, $(sha <<<"$out") vs $ranks"
# --sample with the doc's decoder (a KV cache; the rotary embeddings at each new position)
# draws what the full forward a token draws: the same bytes for the same seed, within the
# context (32 positions: the prompt's 4 and 28 drawn)
gen=("$bin" "$ini" "${common[@]}" --set checkpoint.dir="$tmp/ranks" --sample latest --prompt 'the ' --tokens 28
     --temperature 0.8 --seed 5)
cached=$("${gen[@]}" 2>"$tmp/cached.err"); rc1=$?
full=$("${gen[@]}" --no-kv-cache 2>"$tmp/full.err"); rc2=$?
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && grep -q "; KV cache)" "$tmp/cached.err" && grep -q "no-kv-cache" "$tmp/full.err" &&
    [ "${#cached}" -ge 32 ] && [ "$cached" = "$full" ]
check "--sample through the doc's decoder (KV cache) draws the full forward's bytes: '$cached'" $? \
    "exit $rc1/$rc2: '$cached' against '$full'; $(tail -2 "$tmp/cached.err")"
[ $failed -eq 0 ]
