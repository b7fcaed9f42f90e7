#!/usr/bin/env bash
# fuzz.sh SECONDS [HARNESS...]: run each libFuzzer harness (build-fuzz/fuzz/fuzz_*) for SECONDS
# on a scratch copy of its corpus (tests/fuzz/corpus/NAME), after replaying every kept crash
# input (tests/fuzz/regressions/NAME-*, each fixed since). New crash inputs are written to
# tests/fuzz/crashes/; MERGE=1 adds the inputs that found new coverage to the corpus.
# Prints one "ok"/"FAIL" line per harness with its executions (make test reads these).
# FUZZ_JOBS=N runs N harnesses at once.
set -u
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for bin in build-fuzz/fuzz/fuzz_*; do [ -x "$bin" ] && names+=("$(basename "$bin" | sed 's/^fuzz_//')"); done
fi
mkdir -p tests/fuzz/crashes
jobs=${FUZZ_JOBS:-1} # harnesses at once (each is one thread): make test runs 2 on its 2 cores

# One harness: its lines into $out/NAME.txt, its exit status into $out/NAME.rc.
fuzz_one() { # name
    local name=$1 bin=build-fuzz/fuzz/fuzz_$1
    (
    [ -x "$bin" ] || { echo "FAIL fuzz $name: $bin not built (make fuzz-build)"; exit 1; }
    # 1. every kept crash input, fixed since, must now run clean
    regressions=(tests/fuzz/regressions/"$name"-*)
    if [ -e "${regressions[0]}" ]; then
        if ! "$bin" "${regressions[@]}" > /tmp/dpt_fuzz_$name.log 2>&1; then
            echo "FAIL fuzz $name: a kept crash input crashes again"; tail -n 20 /tmp/dpt_fuzz_$name.log; exit 1
        fi
    fi
    # 2. fuzz for the budget, starting from the corpus
    work=$(mktemp -d /tmp/dpt_fuzz_${name}_XXXXXX)
    cp tests/fuzz/corpus/"$name"/* "$work"/ 2>/dev/null
    start=$(date +%s)
    "$bin" "$work" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
        -artifact_prefix="tests/fuzz/crashes/$name-" -print_final_stats=1 > /tmp/dpt_fuzz_$name.log 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' /tmp/dpt_fuzz_$name.log)
    per_s=$(sed -n 's/^stat::average_exec_per_sec: *//p' /tmp/dpt_fuzz_$name.log)
    files=$(ls "$work" | wc -l)
    if [ $rc -eq 0 ]; then
        echo "ok   fuzz $name: ${execs:-?} executions in $(( $(date +%s) - start )) s (${per_s:-?}/s), corpus $files inputs, no finding"
    else
        echo "FAIL fuzz $name: exit $rc after ${execs:-?} executions; the input is in tests/fuzz/crashes/"
        grep -E "ERROR|SUMMARY|runtime error|^    #[0-9]" /tmp/dpt_fuzz_$name.log | head -n 20
    fi
    [ "${MERGE:-0}" = 1 ] && "$bin" -merge=1 tests/fuzz/corpus/"$name" "$work" > /dev/null 2>&1
    rm -rf "$work"
    exit $((rc != 0))
    ) > "$out/$name.txt" 2>&1
    echo $? > "$out/$name.rc"
}

out=$(mktemp -d /tmp/dpt_fuzz_out_XXXXXX)
running=0
for name in "${names[@]}"; do
    if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
    fuzz_one "$name" &
    running=$((running + 1))
done
wait
failed=0
for name in "${names[@]}"; do # in order, whatever order they ended in
    cat "$out/$name.txt"
    [ "$(cat "$out/$name.rc" 2>/dev/null)" = 0 ] || failed=1
done
rm -rf "$out"
exit $failed
