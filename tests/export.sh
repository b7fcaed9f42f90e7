#!/usr/bin/env bash
# export.sh: ./train --export FORMAT CKPT OUT. safetensors and npz from a checkpoint alone:
# NumPy reads both (the npz with np.load, the safetensors with the 12-line reader of
# docs/checkpoints.md), every tensor equal between them, and the SHA-256 NumPy computes over
# them by the digest's definition (name, NUL, ndim, dims, float32 values) equals the one
# --inspect prints for the checkpoint. llmc from a gpt run: the header llm.c's loader checks,
# every tensor equal to the npz's in llm.c's order, and a run that starts from the file
# (init = llmc:OUT) with a zero learning rate ends with the checkpoint's weights hash. A memory
# limit too small for training does not stop --sample or --eval.
cd "$(dirname "$0")/.."
. tests/common.sh
py=/usr/bin/python3
printf 'the quick brown fox jumps over the lazy dog. %.0s' $(seq 1 300) > "$tmp/text.txt"
build/tools/text_tokens --val-fraction 0.1 "$tmp/tok" "$tmp/text.txt" > /dev/null
gpt=(configs/gpt_fortunes.ini --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32
     --set "data.train=$tmp/tok/train_*.bin" --set "data.val=$tmp/tok/val_*.bin" --set data.seq_len=32
     --set train.batch=4 --set train.epochs=1 --set train.max_steps=3 --set data.test_limit=8
     --set log.interval=1000)
./train "${gpt[@]}" --set checkpoint.dir="$tmp/ck" --set checkpoint.every_steps=3 > "$tmp/run.log" 2>&1
check "a gpt run writes its checkpoint" $? "$(tail -3 "$tmp/run.log")"
ck=$tmp/ck/ckpt-step00000003.dpt
want=$(./train --inspect "$ck" | sha)

./train --export safetensors "$tmp/ck" "$tmp/w.safetensors" > "$tmp/e1.log" 2>&1 &&
    ./train --export npz "$tmp/ck/latest" "$tmp/w.npz" > "$tmp/e2.log" 2>&1
check "--export safetensors and npz" $? "$(cat "$tmp/e1.log" "$tmp/e2.log")"
# after a CONFIG, `latest` is its [checkpoint] dir's (as for --eval), not the working folder's
./train "${gpt[@]}" --set checkpoint.dir="$tmp/ck" --export safetensors latest "$tmp/w2.safetensors" > "$tmp/e1b.log" 2>&1 &&
    cmp -s "$tmp/w.safetensors" "$tmp/w2.safetensors"
ok=$?
check "CONFIG --export safetensors latest: the config's checkpoint folder's newest" $ok "$(cat "$tmp/e1b.log")"
out=$($py - "$tmp/w.safetensors" "$tmp/w.npz" "$want" <<'PY' 2>&1
import hashlib, json, struct, sys
import numpy as np
def read_safetensors(path):  # the reader docs/checkpoints.md shows
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], "<f4").reshape(v["shape"])
            for k, v in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])}
st = read_safetensors(sys.argv[1])
z = np.load(sys.argv[2])
assert list(st) == list(z.files), (list(st)[:4], z.files[:4])
for k in st:
    assert st[k].shape == z[k].shape and np.array_equal(st[k], z[k]), k
h = hashlib.sha256()
for k, a in st.items():  # the weights digest: name, NUL, ndim (u32), dims (i64), float32 values
    h.update(k.encode() + b"\0" + struct.pack("<I", a.ndim) + struct.pack(f"<{a.ndim}q", *a.shape) +
             a.astype("<f4").tobytes())
assert h.hexdigest() == sys.argv[3], (h.hexdigest(), sys.argv[3])
print(f"{len(st)} tensors, {sum(a.size for a in st.values())} values, sha256 {h.hexdigest()[:16]}")
PY
)
check "NumPy reads both, tensor for tensor, and their SHA-256 is --inspect's ($out)" $? "$out"

./train "${gpt[@]}" --export llmc "$ck" "$tmp/w.bin" > "$tmp/e3.log" 2>&1
check "--export llmc" $? "$(tail -3 "$tmp/e3.log")"
out=$($py - "$tmp/w.bin" "$tmp/w.npz" <<'PY' 2>&1
import sys
import numpy as np
h = np.fromfile(sys.argv[1], "<i4", 256)
assert h[0] == 20240326 and h[1] == 3, h[:2]  # llm.c's magic, version 3 (fp32)
maxT, V, L, NH, C, Vp = (int(v) for v in h[2:8])
w = np.fromfile(sys.argv[1], "<f4", offset=1024)
z = np.load(sys.argv[2])
per = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
       "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
       "mlp.c_proj.weight", "mlp.c_proj.bias"]
order = ["wte", "wpe"] + [[f"h.{l}.{p}" for l in range(L)] for p in per] + ["ln_f.weight", "ln_f.bias"]
at = 0
for item in order:
    for name in (item if isinstance(item, list) else [item]):
        n = z[name].size
        assert np.array_equal(w[at:at + n], z[name].ravel()), name
        at += n
assert at == w.size, (at, w.size)
print(f"L={L} NH={NH} C={C} maxT={maxT} V={V} Vp={Vp}, {at} values in llm.c's order")
PY
)
check "llm.c's header and order, every tensor the npz's ($out)" $? "$out"
got=$(./train "${gpt[@]}" --set model.init="llmc:$tmp/w.bin" --set optim.lr=0 --set train.max_steps=1 \
      --set checkpoint.every_epochs=0 2>&1 | sha)
check "init = llmc:the export, learning rate 0: the checkpoint's weights hash" \
    $([ -n "$got" ] && [ "$got" = "$want" ]; echo $?) "got $got, want $want"
mkfifo "$tmp/fifo.bin"
msg=$(timeout 30 ./train "${gpt[@]}" --set model.init="llmc:$tmp/fifo.bin" --set train.max_steps=1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "init = llmc:$tmp/fifo.bin: not a regular file" <<<"$msg"
check "init = llmc:a FIFO: refused at once, not waited on" $? "exit $rc: $(tail -3 <<<"$msg")"

# the other way round: a file written in llm.c's layout by NumPy (every tensor random, so no two
# of one shape can be swapped unseen), loaded (init = llmc:), checkpointed untouched (lr 0) and
# exported again: the same bytes
$py - "$tmp/x0.bin" <<'PY'
import sys
import numpy as np
L, H, C, V, VP, T = 2, 2, 32, 256, 256, 32
rng = np.random.default_rng(7)
shapes = [(VP, C), (T, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C), (L, C), (L, C),
          (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
h = np.zeros(256, np.int32)
h[:8] = [20240326, 3, T, V, L, H, C, VP]
with open(sys.argv[1], "wb") as f:
    f.write(h.tobytes())
    for s in shapes:
        f.write((rng.standard_normal(s) * 0.1).astype("<f4").tobytes())
PY
./train "${gpt[@]}" --set model.init="llmc:$tmp/x0.bin" --set optim.lr=0 --set train.max_steps=1 \
    --set checkpoint.dir="$tmp/ck0" --set checkpoint.final=true > "$tmp/r0.log" 2>&1 &&
    ./train "${gpt[@]}" --export llmc "$tmp/ck0" "$tmp/x1.bin" > "$tmp/r1.log" 2>&1
check "llm.c's layout written by NumPy -> init = llmc: -> checkpoint -> --export llmc: the same bytes" \
    $(cmp -s "$tmp/x0.bin" "$tmp/x1.bin"; echo $?) "$(tail -n 2 "$tmp/r0.log" "$tmp/r1.log"; cmp "$tmp/x0.bin" "$tmp/x1.bin")"

./train --export llmc "$ck" "$tmp/x.bin" > "$tmp/e4.log" 2>&1
check "llmc without a config: refused, saying why" \
    $([ $? = 2 ] && grep -q "needs the run's CONFIG" "$tmp/e4.log"; echo $?) "$(cat "$tmp/e4.log")"
./train configs/fmnist_mlp.ini --export llmc "$ck" "$tmp/x.bin" > "$tmp/e5.log" 2>&1
check "llmc of an mlp config: refused, naming the formats" \
    $([ $? != 0 ] && grep -q "not a format of model mlp" "$tmp/e5.log"; echo $?) "$(tail -2 "$tmp/e5.log")"
./train --export safetensors "$tmp/ck/9" "$tmp/x.st" > "$tmp/e6.log" 2>&1
check "a missing checkpoint: named, nothing written" \
    $([ $? = 1 ] && grep -q "9: no such checkpoint" "$tmp/e6.log" && [ ! -e "$tmp/x.st" ] &&
      [ -z "$(ls "$tmp" | grep 'x.st.')" ]; echo $?) "$(cat "$tmp/e6.log")"
# reading weights only does not need what training would: a machine (the allocator's limit
# standing in) too small for this config's training batch still samples, evaluates and
# exports its checkpoint, with no optimizer built (the header has no optim line) and no
# training loader (a batch larger than the training set is no error there; training is refused
# for it, before the model is built)
small=(--set train.batch=2000 --set train.eval_batch=8 --set train.memory_limit_mb=48)
./train "${gpt[@]}" "${small[@]}" > "$tmp/m1.log" 2>&1
rc1=$?
./train "${gpt[@]}" "${small[@]}" --sample "$ck" --tokens 5 --prompt the > "$tmp/m2.log" 2> "$tmp/m2.err"
rc2=$?
./train "${gpt[@]}" "${small[@]}" --eval "$ck" > "$tmp/m3.log" 2>&1
rc3=$?
[ $rc1 -eq 1 ] && grep -q "fewer than one step of 2000" "$tmp/m1.log" && [ $rc2 -eq 0 ] &&
    [ "$(wc -c < "$tmp/m2.log")" -ge 8 ] && [ $rc3 -eq 0 ] && grep -q "^eval | " "$tmp/m3.log" &&
    ! grep -q "^optim " "$tmp/m2.err" "$tmp/m3.log"
check "a machine too small for training at batch 2000 (more than the 379 samples): training refused, --sample and --eval run without an optimizer" \
    $? "exit $rc1 $rc2 $rc3: $(head -c 300 "$tmp/m1.log") | $(tail -n 2 "$tmp/m2.err") | $(tail -n 2 "$tmp/m3.log")"
# --sample llmc:FILE samples from llm.c's file as from the checkpoint it was exported from (the
# same weights: the same tokens); --tokenizer prints each token as llm.c's tokenizer file spells
# it (here one whose letters are upper case: the same draws, upper-cased); a tokenizer of
# another vocabulary, a truncated one, and --tokenizer without --sample are refused
samp=(--tokens 24 --prompt the --seed 7)
./train "${gpt[@]}" --sample "$ck" "${samp[@]}" > "$tmp/s1.txt" 2> "$tmp/s1.err"
rc1=$?
./train "${gpt[@]}" --sample "llmc:$tmp/w.bin" "${samp[@]}" > "$tmp/s2.txt" 2> "$tmp/s2.err"
rc2=$?
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$(wc -c < "$tmp/s1.txt")" -ge 20 ] && cmp -s "$tmp/s1.txt" "$tmp/s2.txt"
check "--sample llmc:FILE draws what --sample of the checkpoint it came from draws" $? \
    "exit $rc1 $rc2: $(head -c 80 "$tmp/s1.txt") | $(head -c 80 "$tmp/s2.txt") | $(tail -n 2 "$tmp/s2.err")"
$py - "$tmp" <<'PY'
import struct, sys
def write(path, toks, version=2, eot=0, cut=0):
    data = struct.pack("<4I", 20240328, version, len(toks), eot) + bytes(1024 - 16)
    data += b"".join(bytes([len(t)]) + t for t in toks)
    open(path, "wb").write(data[:len(data) - cut])
upper = [bytes([b]).upper() for b in range(256)]
write(sys.argv[1] + "/upper.bin", upper, eot=10)
write(sys.argv[1] + "/wide.bin", upper + [b"x"] * 44, eot=10)
write(sys.argv[1] + "/cut.bin", upper, eot=10, cut=1)
PY
./train "${gpt[@]}" --sample "$ck" "${samp[@]}" --tokenizer "$tmp/upper.bin" > "$tmp/s3.txt" 2> "$tmp/s3.err"
rc3=$?
want=$(printf 'the%s' "$(tail -c +4 "$tmp/s1.txt" | tr 'a-z' 'A-Z')")
[ $rc3 -eq 0 ] && [ "$(cat "$tmp/s3.txt")" = "$want" ]
check "--tokenizer: each drawn token printed as the tokenizer's bytes" $? "exit $rc3: '$(cat "$tmp/s3.txt")' vs '$want' $(tail -n 2 "$tmp/s3.err")"
./train "${gpt[@]}" --sample "$ck" --tokenizer "$tmp/wide.bin" > /dev/null 2> "$tmp/s4.err"
rc4=$?
./train "${gpt[@]}" --sample "$ck" --tokenizer "$tmp/cut.bin" > /dev/null 2> "$tmp/s5.err"
rc5=$?
./train "${gpt[@]}" --tokenizer "$tmp/upper.bin" > /dev/null 2> "$tmp/s6.err"
rc6=$?
[ $rc4 -eq 1 ] && grep -q "wide.bin holds 300 tokens; this model draws from a vocabulary of 256" "$tmp/s4.err" &&
    [ $rc5 -eq 1 ] && grep -q "cut.bin: token 255 at byte 1534: its bytes run past the end of the file" "$tmp/s5.err" &&
    [ $rc6 -eq 2 ] && grep -q "goes with --sample" "$tmp/s6.err"
check "a tokenizer of 300 tokens, a truncated one, --tokenizer without --sample: refused by name" $? \
    "exit $rc4 $rc5 $rc6: $(cat "$tmp/s4.err" "$tmp/s5.err" "$tmp/s6.err" | grep -v '^dptrain\|^model\|^device\|^data\|^memory')"
./train --export npz "$ck" /nonexistent/w.npz > "$tmp/e7.log" 2>&1
check "an unwritable destination: named" $([ $? = 1 ] && grep -q "cannot write /nonexistent/w.npz" "$tmp/e7.log"; echo $?) \
    "$(cat "$tmp/e7.log")"
# A file the run reads is never replaced by one it writes: an export or predictions given the
# checkpoint's own path (or another path to it: a hard link) or the --input file's, a JUnit
# report or a metrics file given the config's, a metrics file given the resumed checkpoint's.
# Each refused naming the file and what it is; the files unchanged. A newer best.dpt of the
# run still replaces the one it resumed from.
cp configs/gpt_fortunes.ini "$tmp/own.ini"
cp "$ck" "$tmp/keep.dpt" && ln "$tmp/keep.dpt" "$tmp/keep-link.dpt"
own=("$tmp/own.ini" "${gpt[@]:1}")
before=$(sha256sum "$tmp/keep.dpt" "$tmp/own.ini")
bad=""
./train --export safetensors "$tmp/keep.dpt" "$tmp/keep.dpt" > "$tmp/s1.log" 2>&1
[ $? = 1 ] && grep -q "cannot write $tmp/keep.dpt: it is the checkpoint this run reads" "$tmp/s1.log" ||
    bad="$bad export: $(head -2 "$tmp/s1.log");"
./train --export npz "$tmp/keep.dpt" "$tmp/keep-link.dpt" > "$tmp/s2.log" 2>&1
[ $? = 1 ] && grep -q "cannot write $tmp/keep-link.dpt: it is the checkpoint this run reads (the same file, by this name or another)" "$tmp/s2.log" ||
    bad="$bad export to a hard link: $(head -2 "$tmp/s2.log");"
./train "${own[@]}" --predict "$tmp/keep.dpt" --out "$tmp/keep.dpt" > "$tmp/s3.log" 2>&1
[ $? = 1 ] && grep -q "cannot write $tmp/keep.dpt: it is the checkpoint this run reads" "$tmp/s3.log" ||
    bad="$bad predict: $(tail -2 "$tmp/s3.log");"
cp "$tmp/text.txt" "$tmp/in.txt"
./train "${own[@]}" --predict "$tmp/keep.dpt" --input "$tmp/in.txt" --out "$tmp/in.txt" > "$tmp/s7.log" 2>&1
[ $? = 1 ] && grep -q "cannot write $tmp/in.txt: it is the --input file this run reads" "$tmp/s7.log" &&
    cmp -s "$tmp/text.txt" "$tmp/in.txt" || bad="$bad predictions onto --input: $(tail -2 "$tmp/s7.log");"
./train "${own[@]}" --set checkpoint.dir="$tmp/ck4" --junit "$tmp/./own.ini" > "$tmp/s4.log" 2>&1
[ $? = 1 ] && grep -q "cannot write $tmp/./own.ini: it is the config file this run reads" "$tmp/s4.log" ||
    bad="$bad junit: $(tail -2 "$tmp/s4.log");"
./train "${own[@]}" --set checkpoint.dir="$tmp/ck5" --set log.metrics="$tmp/own.ini" > "$tmp/s5.log" 2>&1
[ $? = 1 ] && grep -q "cannot write the metrics file $tmp/own.ini: it is the config file this run reads" "$tmp/s5.log" ||
    bad="$bad metrics: $(tail -2 "$tmp/s5.log");"
cp "$ck" "$tmp/keep2.dpt" # one name only (a hard link is refused for a reason of its own)
./train "${gpt[@]}" --set checkpoint.dir="$tmp/ck8" --resume "$tmp/keep2.dpt" --set log.metrics="$tmp/keep2.dpt" > "$tmp/s8.log" 2>&1
[ $? = 1 ] && grep -q "cannot write the metrics file $tmp/keep2.dpt: it is the checkpoint this run reads" "$tmp/s8.log" &&
    cmp -s "$ck" "$tmp/keep2.dpt" || bad="$bad metrics onto the resumed checkpoint: $(tail -2 "$tmp/s8.log");"
[ "$(sha256sum "$tmp/keep.dpt" "$tmp/own.ini")" = "$before" ] || bad="$bad a file changed;"
mlp=(configs/fmnist_mlp.ini --set train.threads=1 --set data.train_limit=2000 --set data.test_limit=300
     --set log.interval=1000 --set checkpoint.every_epochs=1 --set checkpoint.dir="$tmp/ck6")
./train "${mlp[@]}" --set train.epochs=1 > "$tmp/s6.log" 2>&1 &&
    ./train "${mlp[@]}" --set train.epochs=3 --resume "$tmp/ck6/best.dpt" >> "$tmp/s6.log" 2>&1
[ $? = 0 ] && grep -q "^best so far: $tmp/ck6/best.dpt (epoch [23])" "$tmp/s6.log" ||
    bad="$bad resume from best.dpt: $(grep -v '^epoch' "$tmp/s6.log" | tail -3);"
[ -z "$bad" ]
check "the checkpoint, the --input file and the config never replaced by an export, predictions (also through a hard link), JUnit or metrics; a resume from best.dpt still runs" $? "$bad"

exit $failed
