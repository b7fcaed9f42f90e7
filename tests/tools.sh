#!/usr/bin/env bash
# tools.sh: the scripts around a run: plot.sh turns a real run's metrics into a PNG; the
# timeline and --profile (op kinds and layers); make_image_folder refuses a planted link.
set -u
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/dpt_tools_XXXXXX)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
./train configs/fmnist_mlp.ini --set train.epochs=2 --set data.train_limit=3200 --set log.interval=10 \
    --set log.metrics="$work/m.jsonl" > /dev/null 2>&1
if scripts/plot.sh "$work/m.jsonl" "$work/m.png" > /dev/null && [ "$(head -c 4 "$work/m.png" | tail -c 3)" = "PNG" ] \
    && [ "$(stat -c %s "$work/m.png")" -gt 10000 ]; then
    echo "ok   plot.sh: $(grep -c '"train"' "$work/m.jsonl") train and $(grep -c '"eval"' "$work/m.jsonl") eval records -> PNG"
    passed=$((passed + 1))
else
    echo "FAIL plot.sh did not produce a PNG"; failed=$((failed + 1))
fi
if ! scripts/plot.sh /nonexistent.jsonl 2>&1 | grep -q "cannot read /nonexistent.jsonl"; then
    echo "FAIL plot.sh on a missing file"; failed=$((failed + 1))
else
    echo "ok   plot.sh names a missing file"; passed=$((passed + 1))
fi
# The timeline of a 2-rank run: one Chrome-trace file per rank, valid JSON, with compute and
# communication spans.
mpirun --oversubscribe --allow-run-as-root -np 2 ./train configs/fmnist_mlp.ini --set train.threads=1 \
    --set data.train_limit=1280 --set data.test_limit=200 --set train.epochs=1 \
    --set log.timeline="$work/trace.json" > /dev/null 2>&1
check='import json,sys
ev=[e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph")=="X"]
names={e["name"] for e in ev}
need={"forward","backward","allreduce","optimizer","data","wait allreduce"}
assert need <= names, names
assert all(e["dur"] >= 0 for e in ev)
print(len(ev))'
ok_tl=1
for r in 0 1; do
    n=$(python3 -c "$check" "$work/trace.rank$r.json" 2>&1) || { ok_tl=0; echo "$n" | tail -2; }
done
if [ $ok_tl -eq 1 ]; then echo "ok   timeline: trace.rank0/1.json parse as Chrome traces with compute and allreduce spans"; passed=$((passed + 1))
else echo "FAIL timeline"; failed=$((failed + 1)); fi

# --profile: a table of op kinds whose rows add up to its "ops" line, convolutions on top for
# the CNN (their share of a CNN step is what PyTorch's profiler shows too), under the step time
out=$(./train configs/fmnist_cnn.ini --set train.threads=2 --set train.max_steps=30 --set data.test_limit=500 \
      --set log.interval=1000 --set checkpoint.dir="$work/pf" --set log.timeline="$work/pf.json" --profile 2>&1)
res=$(python3 -c '
import sys, re
text = sys.stdin.read()
m = re.search(r"^profile \| (\d+) steps \| ops ([\d.]+) ms a step of ([\d.]+) ms", text, re.M)
rows = re.findall(r"^(\w+) +[\d.]+ +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)%$", text, re.M)
assert m and rows, "no table"
steps, ops, step = int(m.group(1)), float(m.group(2)), float(m.group(3))
total = sum(float(r[3]) for r in rows)
assert steps == 29, steps                          # from step 2 on
assert abs(total - ops) <= 0.02 * ops + 0.01 * len(rows), (total, ops)
assert rows[0][0] == "conv2d", rows[0]
assert ops <= step * 1.001, (ops, step)
assert all(abs(float(r[1]) + float(r[2]) - float(r[3])) <= 0.002 for r in rows)
print("ok")' <<<"$out" 2>&1 | tail -1)
if [ "$res" = ok ]; then echo "ok   --profile: op rows add up to the ops line, conv2d on top for the CNN"; passed=$((passed + 1))
else echo "FAIL --profile: $res"; grep -A12 "^profile" <<<"$out"; failed=$((failed + 1)); fi
# its layers (issue 28 item 13): one row per layer's op, named by the parameters' names (the
# CNN's conv1, conv2, bn1, bn2, fc1, fc2), adding up to the layers line, which with the ops
# without parameters makes the ops line; the timeline holds a forward and a backward span per
# layer per profiled step (29), inside the step's forward and backward phases
res=$(python3 -c '
import sys, re, json
text = open(sys.argv[1]).read()
m = re.search(r"^profile \| (\d+) steps \| ops ([\d.]+) ms", text, re.M)
l = re.search(r"^layers \| (\d+) with parameters: ([\d.]+) ms a step; ops without parameters ([\d.]+) ms", text, re.M)
rows = re.findall(r"^([\w.]+) +(\w+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)%$", text, re.M)
assert m and l and rows, "no layer table"
layers = {r[0]: r for r in rows}
assert set(layers) == {"conv1", "conv2", "bn1", "bn2", "fc1", "fc2"}, sorted(layers)
assert layers["conv1"][1] == "conv2d" and layers["bn1"][1] == "batchnorm", layers
assert all(float(r[2]) == 1.0 for r in rows), rows                     # once a step each
total = sum(float(r[5]) for r in rows)
# as printed: the rows to 0.001 ms, the header lines to 0.1 ms (each off by up to half of that)
assert abs(total - float(l.group(2))) <= 0.05 + 0.0005 * len(rows) + 1e-9, (total, l.group(2))
assert abs(float(l.group(2)) + float(l.group(3)) - float(m.group(2))) <= 0.15 + 1e-9, (l.groups(), m.group(2))
ev = [e for e in json.load(open(sys.argv[2]))["traceEvents"] if e.get("ph") == "X"]
names = [e["name"] for e in ev]
assert names.count("conv1 conv2d") == 29 and names.count("conv1 conv2d backward") == 29, (names.count("conv1 conv2d"))
assert names.count("fc2 linear backward") == 29 and "maxpool2d backward" in names, sorted(set(names))
fw = [e for e in ev if e["name"] == "forward"][-1]
inner = [e for e in ev if e["name"] == "conv1 conv2d" and fw["ts"] - 1 <= e["ts"] <= fw["ts"] + fw["dur"] + 1]
assert len(inner) == 1, (fw, len(inner))
print("ok")' <(cat <<<"$out") "$work/pf.json" 2>&1 | tail -1)
if [ "$res" = ok ]; then echo "ok   --profile: a row per layer (conv1 conv2 bn1 bn2 fc1 fc2) adding up, and its spans in the timeline"; passed=$((passed + 1))
else echo "FAIL --profile's layers: $res"; grep -A12 "^layers" <<<"$out"; failed=$((failed + 1)); fi

# make_image_folder writes through no link: one planted at an image's name is refused, by name,
# and the file it points at is left as it was
echo keep > "$work/victim"
mkdir -p "$work/img/train/00_tshirt" && ln -s "$work/victim" "$work/img/train/00_tshirt/00000.jpg"
out=$(build/tools/make_image_folder "$work/img" --train 2 --val 1 --width 20 --height 16 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "00000.jpg: it is a symbolic link" <<<"$out" && [ "$(cat "$work/victim")" = keep ]; then
    echo "ok   make_image_folder: a link planted at an image's name refused, its target untouched"; passed=$((passed + 1))
else echo "FAIL make_image_folder through a planted link: exit $rc, $out"; failed=$((failed + 1)); fi

# make_image_folder under a folder path of 2,400 characters (it cut paths at 2,000: the images
# went elsewhere or nowhere), and numbers atoi bent ("12x" was 12, 99999999999 overflowed)
long="$work"
for _ in $(seq 12); do long="$long/$(printf 'd%.0s' $(seq 200))"; done
mkdir -p "$long"
out=$(build/tools/make_image_folder "$long/img" --train 1 --val 1 --width 20 --height 16 --source synthetic 2>&1); rc=$?
o1=$(build/tools/make_image_folder "$work/img2" --train 12x 2>&1); r1=$?
o2=$(build/tools/make_image_folder "$work/img2" --width 99999999999 2>&1); r2=$?
if [ $rc -eq 0 ] && [ -f "$long/img/train/09_ring9/00000.jpg" ] && [ -f "$long/img/val/00_ring0/00000.jpg" ] &&
    [ $r1 -eq 2 ] && grep -q -- "--train 12x: expected a whole number from 1 to 1000000" <<<"$o1" &&
    [ $r2 -eq 2 ] && grep -q -- "--width 99999999999: expected a whole number" <<<"$o2" && [ ! -e "$work/img2" ]; then
    echo "ok   make_image_folder: a ${#long}-character folder path used whole; '12x' and 99999999999 refused"; passed=$((passed + 1))
else echo "FAIL make_image_folder long path or numbers: exit $rc $r1 $r2: $out | $o1 | $o2" | cut -c1-600; failed=$((failed + 1)); fi
rm -rf "$work/d"*

# text_tokens writes its shards as dptrain writes its files: a link planted at the temporary
# name it used to use is not written through; one planted at a shard's own name is refused, named
# (dptrain replaces no link), and the file it points at is left as it was
mkdir -p "$work/tok" && echo keep > "$work/victim2"
ln -s "$work/victim2" "$work/tok/train_000000.bin.tmp" && ln -s "$work/victim2" "$work/tok/val_000000.bin"
printf 'one line\nanother line\nthe last\n' > "$work/text.txt"
out=$(build/tools/text_tokens --val-fraction 0.3 "$work/tok" "$work/text.txt" 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(cat "$work/victim2")" = keep ] && [ -L "$work/tok/val_000000.bin" ] &&
    grep -q "val_000000.bin: a symbolic link stands at its name" <<<"$out"; then
    echo "ok   text_tokens: no write through planted links; the one at a shard's name refused by name"; passed=$((passed + 1))
else echo "FAIL text_tokens through planted links: exit $rc, victim now '$(head -c 16 "$work/victim2" | tr -c '[:print:]' '.')', $(tail -1 <<<"$out")"; failed=$((failed + 1)); fi
rm -f "$work/tok/val_000000.bin"
out=$(build/tools/text_tokens --val-fraction 0.3 "$work/tok" "$work/text.txt" 2>&1); rc=$?
size() { stat -c %s "$1"; }
if [ $rc -eq 0 ] && [ $(( $(size "$work/tok/train_000000.bin") + $(size "$work/tok/val_000000.bin") )) -eq $(( 2 * 1024 + 2 * 31 )) ]; then
    echo "ok   text_tokens: the link gone, the shards whole (2 headers + 31 tokens)"; passed=$((passed + 1))
else echo "FAIL text_tokens after the link is removed: exit $rc, $(tail -1 <<<"$out")"; failed=$((failed + 1)); fi

# make print-libs answers with the link flags alone (docs: cc ... $(make -s print-libs)), whatever
# the options: it neither records the build's configuration nor says that it changed (it did both:
# the message, on stdout, reached the compiler's command line, and the next make rebuilt all)
stamp=build/build-config.txt
before=$(cat "$stamp" 2>/dev/null)
libs=$(make -s print-libs OPT=-O1 2>/dev/null); rc=$?
if [ $rc -eq 0 ] && [ "$(cat "$stamp" 2>/dev/null)" = "$before" ] && grep -q -- "-lm" <<<"$libs" &&
    ! grep -qv -- '^-\|^/' <<<"$(tr ' ' '\n' <<<"$libs" | grep .)"; then
    echo "ok   make print-libs: flags only, the build's recorded configuration untouched"; passed=$((passed + 1))
else echo "FAIL make print-libs with other options: exit $rc, '$libs'"; failed=$((failed + 1)); fi

echo "tools: $passed passed, $failed failed"
[ $failed -eq 0 ]
