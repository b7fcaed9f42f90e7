#!/usr/bin/env bash
# llama.sh: the built-in llama (models/llama.c) against Hugging Face's LlamaForCausalLM written
# again in float64 NumPy (tests/llama_reference.py), on folders laid out as the hub's
# (config.json + model.safetensors, random weights of std 0.2 so that the model is far from
# uniform and a mis-rotated or mis-grouped head moves the loss by far more than the tolerance):
# grouped-query (4 query heads on 2 key/value heads, an untied head) and multi-query (1
# key/value head, tied embeddings, rope_theta 500000, eps 1e-6). --eval hf:DIR's loss equals
# the reference's within 1e-4 (fp32: sums of at most 256 terms, a few 1e-6 off; a head rotated
# the other way or grouped in the other order moves it by more than 1e-2); --sample's greedy
# tokens are the reference's, with and without the KV cache; 5 steps from hf:DIR and --export hf
# give a folder whose reference loss is the checkpoint's; a config.json that disagrees with the
# [model] keys is refused naming the --set lines that make it agree, and damaged folders
# (truncated or mistyped config.json, a FIFO, split or truncated weights) are refused naming the
# file. Where PyTorch is installed (make bench's peers), 8 AdamW steps give PyTorch's per-step
# losses within 1e-4.
cd "$(dirname "$0")/.."
. tests/common.sh
py=/usr/bin/python3
ref=tests/llama_reference.py
val=$tmp/val.bin
# a token shard of the fortunes' bytes (vocabulary 256): llm.c's header, then uint16 ids
$py - "$val" <<'PY'
import glob, sys
import numpy as np
text = b"".join(open(f, "rb").read() for f in sorted(glob.glob("/usr/share/games/fortunes/*")) if "." not in f.split("/")[-1])
ids = np.frombuffer(text[:20000], dtype=np.uint8).astype(np.uint16)
header = np.zeros(256, np.int32)
header[:3] = [20240520, 1, len(ids)]
with open(sys.argv[1], "wb") as f:
    f.write(header.tobytes() + ids.tobytes())
PY

cases=("gqa|--layers 2 --hidden 64 --heads 4 --kv 2 --inter 160 --tie 0 --theta 10000 --eps 1e-5|--set model.num_key_value_heads=2 --set model.tie_word_embeddings=false --set model.rope_theta=10000 --set model.rms_norm_eps=1e-5"
       "mqa|--layers 3 --hidden 48 --heads 4 --kv 1 --inter 96 --tie 1 --theta 500000 --eps 1e-6|--set model.num_key_value_heads=1 --set model.tie_word_embeddings=true --set model.rope_theta=500000 --set model.rms_norm_eps=1e-6")
for c in "${cases[@]}"; do
    IFS='|' read -r name wargs sets <<<"$c"
    # shellcheck disable=SC2086 # word lists
    $py $ref write "$tmp/$name" $wargs --std 0.2
    layers=$(grep -o -- '--layers [0-9]*' <<<"$wargs" | cut -d' ' -f2)
    hidden=$(grep -o -- '--hidden [0-9]*' <<<"$wargs" | cut -d' ' -f2)
    inter=$(grep -o -- '--inter [0-9]*' <<<"$wargs" | cut -d' ' -f2)
    # shellcheck disable=SC2206
    run=(./train configs/llama_fortunes.ini --set model.num_hidden_layers="$layers" --set model.hidden_size="$hidden"
         --set model.num_attention_heads=4 --set model.intermediate_size="$inter" $sets --set data.train="$val"
         --set data.val="$val" --set data.seq_len=32 --set data.shuffle=false --set train.threads=1
         --set checkpoint.dir="$tmp/ck_$name")

    want=$($py $ref loss "$tmp/$name" "$val" --seq 32 --batch 4 --batches 2 | grep -o '[0-9.]*}' | tr -d '}')
    lo=$(awk -v w="$want" 'BEGIN { printf "%.6f", w - 1e-4 }'); hi=$(awk -v w="$want" 'BEGIN { printf "%.6f", w + 1e-4 }')
    out=$("${run[@]}" --eval "hf:$tmp/$name" --set data.test_limit=8 --set train.eval_batch=4 \
          --expect "final_test_loss >= $lo" --expect "final_test_loss <= $hi" 2>&1); rc=$?
    check "$name: --eval hf:DIR = float64 LlamaForCausalLM's loss $want within 1e-4" $rc "exit $rc: $(grep 'eval |\|expect\|error' <<<"$out")"

    prompt="He"
    want_ids=$($py $ref greedy "$tmp/$name" --prompt 72,101 --tokens 12 | grep -o '\[.*\]' | tr -d '[] ')
    got=$("${run[@]}" --sample "hf:$tmp/$name" --temperature 0 --tokens 12 --prompt "$prompt" 2>/dev/null |
          $py -c "import sys; print(','.join(str(b) for b in sys.stdin.buffer.read()[:14]))")
    nocache=$("${run[@]}" --sample "hf:$tmp/$name" --temperature 0 --tokens 12 --prompt "$prompt" --no-kv-cache 2>/dev/null |
              $py -c "import sys; print(','.join(str(b) for b in sys.stdin.buffer.read()[:14]))")
    [ -n "$want_ids" ] && [ "$got" = "$want_ids" ] && [ "$nocache" = "$want_ids" ]
    check "$name: --sample --temperature 0 draws the reference's 12 tokens, with and without the KV cache" $? \
        "want $want_ids, got $got, without the cache $nocache"
done

# a tokenizer beside the weights that is not GPT-2's kind (a LLaMA's SentencePiece tokenizer.json):
# --sample says so and goes on as the model's vocabulary reads (here bytes), the same tokens
printf '{"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Metaspace"}}' \
    > "$tmp/gqa/tokenizer.json"
g1=(./train configs/llama_fortunes.ini --set model.num_hidden_layers=2 --set model.hidden_size=64
    --set model.num_attention_heads=4 --set model.num_key_value_heads=2 --set model.intermediate_size=160
    --set data.train="$val" --set data.val="$val" --set data.seq_len=32 --set train.threads=1 --set checkpoint.dir="$tmp/ck_tk")
want_ids=$($py $ref greedy "$tmp/gqa" --prompt 72,101 --tokens 12 | grep -o '\[.*\]' | tr -d '[] ')
got=$("${g1[@]}" --sample "hf:$tmp/gqa" --temperature 0 --tokens 12 --prompt He 2> "$tmp/tk.err" |
      $py -c "import sys; print(','.join(str(b) for b in sys.stdin.buffer.read()[:14]))")
[ "$got" = "$want_ids" ] && grep -q "note: the tokenizer beside the weights is not read (.*Metaspace" "$tmp/tk.err"
check "an unreadable tokenizer.json beside hf:DIR: a note, and the sample as the vocabulary reads" $? \
    "$got vs $want_ids: $(cat "$tmp/tk.err" | tail -3)"
rm "$tmp/gqa/tokenizer.json"

# trained from hf:DIR, written back with --export hf: the reference's loss on the exported folder
# is the checkpoint's --eval loss, and --eval hf:OUT gives it too (the round trip a fine-tuning
# run makes: the hub's folder in, a folder from_pretrained reads out)
g=(./train configs/llama_fortunes.ini --set model.num_hidden_layers=2 --set model.hidden_size=64
   --set model.num_attention_heads=4 --set model.num_key_value_heads=2 --set model.intermediate_size=160
   --set data.train="$val" --set data.val="$val" --set data.seq_len=32 --set data.shuffle=false --set train.threads=1
   --set data.test_limit=8 --set train.eval_batch=4 --set checkpoint.dir="$tmp/ck_rt")
"${g[@]}" --set model.init="hf:$tmp/gqa" --set train.batch=4 --set train.max_steps=5 --set optim.lr=1e-2 > "$tmp/rt.log" 2>&1
"${g[@]}" --export hf latest "$tmp/out" > "$tmp/ex.log" 2>&1; rc=$?
want=$($py $ref loss "$tmp/out" "$val" --seq 32 --batch 4 --batches 2 | grep -o '[0-9.]*}' | tr -d '}')
a=$("${g[@]}" --eval latest 2>&1 | grep -o 'test loss [0-9.]*' | grep -o '[0-9.]*$')
b=$("${g[@]}" --eval "hf:$tmp/out" 2>&1 | grep -o 'test loss [0-9.]*' | grep -o '[0-9.]*$')
before=$($py $ref loss "$tmp/gqa" "$val" --seq 32 --batch 4 --batches 2 | grep -o '[0-9.]*}' | tr -d '}')
names=$($py -c "import json,sys; sys.path.insert(0,'tests'); from llama_reference import read_safetensors as r; \
print(len(r(sys.argv[1])), any(k.startswith('rope') for k in r(sys.argv[1])))" "$tmp/out/model.safetensors")
[ $rc -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && [ "$names" = "21 False" ] &&
    awk -v w="$want" -v a="$a" -v z="$before" 'BEGIN { d = w - a; exit !(d < 1e-4 && d > -1e-4 && (w - z > 1e-3 || z - w > 1e-3)) }'
check "5 steps from hf:DIR, --export hf: float64 loss $want of the folder = --eval's $a = --eval hf:OUT's $b (before training $before; 21 tensors, no rotary tables)" $? \
    "exit $rc: $(tail -2 "$tmp/ex.log"), $names"

# config.json against the keys: each difference named with the --set that fixes it
msg=$(./train configs/llama_fortunes.ini --set model.num_hidden_layers=2 --set model.hidden_size=64 \
      --set model.num_attention_heads=4 --set model.intermediate_size=160 --set model.num_key_value_heads=4 \
      --set model.rope_theta=500000 --set data.train="$val" --set data.val="$val" --set data.seq_len=32 \
      --set model.init="hf:$tmp/gqa" --dry-run 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "$tmp/gqa/config.json describes another model" <<<"$msg" &&
    grep -q "HINT: as the file says: --set model.num_key_value_heads=2 --set model.rope_theta=10000" <<<"$msg"
check "a config.json that disagrees (key/value heads, rope_theta): refused with the --set lines" $? "exit $rc: $msg"
msg=$(./train configs/llama_fortunes.ini --set model.init="hf:$tmp/gqa" --set data.train="$val" --set data.val="$val" \
      --set model.name=gpt --dry-run 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "hf:$tmp/gqa" <<<"$msg"
check "hf: for gpt on a LLaMA folder: refused naming it" $? "exit $rc: $msg"
sed -i 's/"model_type": "llama"/"model_type": "qwen2"/' "$tmp/mqa/config.json"
msg=$(./train configs/llama_fortunes.ini --set model.init="hf:$tmp/mqa" --set data.train="$val" --set data.val="$val" \
      --dry-run 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q 'model_type "qwen2"' <<<"$msg"
check "another model_type: refused naming it" $? "exit $rc: $msg"

# damaged folders: each refused naming the file and what is wrong (exit 1), none waited on
bad() { # NAME WANT: $tmp/bad as the caller left it
    local msg rc
    msg=$(timeout 30 ./train configs/llama_fortunes.ini --set model.num_hidden_layers=2 --set model.hidden_size=64 \
          --set model.num_attention_heads=4 --set model.num_key_value_heads=2 --set model.intermediate_size=160 \
          --set data.train="$val" --set data.val="$val" --set data.seq_len=32 --set model.init="hf:$tmp/bad" \
          --dry-run 2>&1); rc=$?
    [ $rc -eq 1 ] && grep -q -- "$2" <<<"$msg"
    check "refused: $1" $? "exit $rc: $msg"
}
cp -r "$tmp/gqa" "$tmp/bad"
head -c 100 "$tmp/gqa/config.json" > "$tmp/bad/config.json"; bad "a truncated config.json" "$tmp/bad/config.json"
sed 's/"hidden_size": 64/"hidden_size": "64"/' "$tmp/gqa/config.json" > "$tmp/bad/config.json"
bad "hidden_size as a string" "not a number"
sed 's/"rope_theta": 10000.0/"rope_theta": 1e999/' "$tmp/gqa/config.json" > "$tmp/bad/config.json"
bad "rope_theta out of range" "out of range"
rm "$tmp/bad/config.json"; mkfifo "$tmp/bad/config.json"; bad "a FIFO named config.json" "not a regular file"
rm "$tmp/bad/config.json"; cp "$tmp/gqa/config.json" "$tmp/bad/"
mv "$tmp/bad/model.safetensors" "$tmp/bad/model-00001-of-00002.safetensors"; echo '{}' > "$tmp/bad/model.safetensors.index.json"
bad "weights split over several files" "split over several files"
head -c 5000 "$tmp/gqa/model.safetensors" > "$tmp/bad/model.safetensors"; bad "a truncated model.safetensors" "$tmp/bad/model.safetensors"

# training against PyTorch's autograd and AdamW, where PyTorch is installed
if $py -c "import torch" 2>/dev/null; then
    $py $ref write "$tmp/t" --layers 2 --hidden 64 --heads 4 --kv 2 --inter 160 --tie 0 --std 0.2
    want=$($py $ref train "$tmp/t" "$val" --seq 32 --batch 4 --steps 8 --lr 1e-3)
    ./train configs/llama_fortunes.ini --set model.num_hidden_layers=2 --set model.hidden_size=64 \
        --set model.num_attention_heads=4 --set model.num_key_value_heads=2 --set model.intermediate_size=160 \
        --set model.init="hf:$tmp/t" --set data.train="$val" --set data.val="$val" --set data.seq_len=32 \
        --set data.shuffle=false --set data.test_limit=4 --set train.batch=4 --set train.max_steps=8 \
        --set train.threads=1 --set optim.lr=1e-3 --set optim.beta2=0.999 --set optim.weight_decay=0 \
        --set optim.clip_norm=0 --set optim.schedule=constant --set optim.warmup_epochs=0 --set log.interval=1 \
        --set log.metrics="$tmp/t.jsonl" --set checkpoint.dir="$tmp/ck_t" > "$tmp/t.log" 2>&1
    worst=$($py - "$tmp/t.jsonl" "$want" <<'PY'
import json, sys
ours = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"kind":"train"' in l]
theirs = json.loads(sys.argv[2])["losses"]
print(max(abs(a - b) for a, b in zip(ours, theirs)) if len(ours) == len(theirs) else "steps differ")
PY
)
    awk -v w="$worst" 'BEGIN { exit !(w + 0 == w && w < 1e-4) }'
    check "8 AdamW steps from hf:DIR: PyTorch's per-step losses within 1e-4 (largest difference $worst)" $? "$(tail -3 "$tmp/t.log")"
else
    echo "skip training against PyTorch: python3-torch is not installed (scripts/deps.sh bench installs it)"
fi
exit $((failed > 0))
