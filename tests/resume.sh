#!/usr/bin/env bash
# resume.sh: a run stopped and resumed equals a run never stopped: the same per-step losses
# and a byte-identical final checkpoint. Alone, under mpirun -np 2, and stopped by SIGTERM.
set -u
cd "$(dirname "$0")/.."
MPIRUN="mpirun --oversubscribe --allow-run-as-root"
work=$(mktemp -d /tmp/dpt_resume_XXXXXX)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }

# per-step losses after step $2 (timing fields removed)
losses_after() { grep '"kind":"train"' "$1" | sed 's/,"img_s".*//' | awk -F'"step":' -v k="$2" '{split($2,a,","); if (a[1] > k) print}'; }

# run_pair NAME K CONFIG LAUNCH... : uninterrupted run vs K steps + resume, same checkpoint
# dir name. (The schedule must not depend on max_steps, which sets the cosine horizon.)
run_pair() {
    local name=$1 k=$2 config=$3
    shift 3
    local common="$config --set train.threads=1 --set data.train_limit=4000 --set train.epochs=3
        --set log.interval=1 --set optim.warmup_epochs=0.5 --set checkpoint.every_epochs=1 --set checkpoint.dir=$work/ck
        --set log.metrics=$work/m.jsonl"
    rm -rf "$work/ck"
    "$@" ./train $common > "$work/full.log" 2>&1 || { bad "$name: uninterrupted run failed"; tail "$work/full.log"; return; }
    rm -rf "$work/ck_full"; mv "$work/ck" "$work/ck_full"; cp "$work/m.jsonl" "$work/full.jsonl"
    "$@" ./train $common --set checkpoint.every_steps=$k --set train.max_steps=$k > "$work/first.log" 2>&1
    "$@" ./train $common --resume latest > "$work/resumed.log" 2>&1 || { bad "$name: resumed run failed"; tail "$work/resumed.log"; return; }
    local last=$(ls "$work/ck_full" | tail -n 1)
    if cmp -s "$work/ck_full/$last" "$work/ck/$last" && diff -q <(losses_after "$work/full.jsonl" $k) <(losses_after "$work/m.jsonl" $k) > /dev/null \
        && [ -n "$(losses_after "$work/m.jsonl" $k)" ]; then
        ok "$name: $k steps + resume == uninterrupted (losses after step $k and $last identical)"
    else
        bad "$name: resumed run differs"; diff <(losses_after "$work/full.jsonl" $k) <(losses_after "$work/m.jsonl" $k) | head -5
        ls -l "$work/ck_full" "$work/ck"; tail -n 3 "$work/first.log" "$work/resumed.log"
    fi
}

run_pair "1 process" 70 configs/fmnist_mlp.ini
run_pair "mpirun -np 2" 40 configs/fmnist_mlp.ini $MPIRUN -np 2
run_pair "cnn: batch norm buffers and dropout RNG" 45 "configs/fmnist_cnn.ini --set optim.schedule=constant --set data.test_limit=500"

# SIGTERM mid-run: the job finishes the step, writes a checkpoint, exits 0; resuming ends
# with the same final checkpoint as an uninterrupted run.
common="configs/fmnist_mlp.ini --set train.threads=1 --set data.train_limit=30000 --set train.epochs=6
    --set checkpoint.every_epochs=1 --set checkpoint.dir=$work/cks --set log.interval=100"
./train $common > /dev/null 2>&1 && mv "$work/cks" "$work/cks_full"
./train $common > "$work/sig.log" 2>&1 &
pid=$!
sleep 1.5
kill -TERM $pid
wait $pid; rc=$?
if [ $rc -eq 0 ] && grep -q "stopped by signal 15 after step" "$work/sig.log" && grep -q "resume with: ./train" "$work/sig.log"; then
    # the printed command itself, run as printed (it carries every --set of the original)
    eval "$(sed -n 's/.*resume with: //p' "$work/sig.log")" > "$work/sig2.log" 2>&1
    last=$(ls "$work/cks_full" | tail -n 1)
    if grep -q "^done" "$work/sig2.log" && cmp -s "$work/cks_full/$last" "$work/cks/$last"; then
        ok "SIGTERM at $(grep -o 'after step [0-9]*' "$work/sig.log"), resumed with the printed command: final checkpoint identical"
    else
        bad "SIGTERM resume differs"; tail -3 "$work/sig2.log"
    fi
else
    bad "SIGTERM: exit $rc"; tail -5 "$work/sig.log"
fi

echo "resume: $passed passed, $failed failed"
[ $failed -eq 0 ]
