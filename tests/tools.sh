#!/usr/bin/env bash
# tools.sh: the scripts around a run: plot.sh turns a real run's metrics into a PNG.
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
echo "tools: $passed passed, $failed failed"
[ $failed -eq 0 ]
