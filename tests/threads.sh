#!/usr/bin/env bash
# threads.sh: [train] threads = 0 (the default) under mpirun and DataParallel takes this node's
# cores divided by the ranks (replicas) on it, or the cores mpirun bound a rank to, and says so
# in the header; more threads than the node has cores draws a warning; with the defaults,
# mpirun -np 2 and DataParallel over 2 CPUs give the same weights (the same thread count each).
cd "$(dirname "$0")/.."
. tests/common.sh
# threads kept off their cores: 2 threads pinned to one core (taskset) wait for it about half
# the time, which the progress line, the metrics' core_wait and one warning say; 1 thread on
# that core waits for nothing of ours, and draws no warning; with adapt_threads the run goes
# down to 1 thread by itself (and adapt_threads is refused in the deterministic mode)
if command -v taskset > /dev/null; then
    pin=(configs/fmnist_cnn.ini --set train.max_steps=40 --set data.train_limit=3000 --set data.test_limit=200
         --set log.interval=20 --set checkpoint.every_epochs=0)
    waits() { grep -o '"core_wait":[0-9.]*' "$1" | cut -d: -f2 | sort -n | tail -1; }
    two=$(taskset -c 0 ./train "${pin[@]}" --set train.threads=2 --set checkpoint.dir="$tmp/pin2" \
          --set log.metrics="$tmp/pin2.jsonl" 2>&1)
    one=$(taskset -c 0 ./train "${pin[@]}" --set train.threads=1 --set checkpoint.dir="$tmp/pin1" \
          --set log.metrics="$tmp/pin1.jsonl" 2>&1)
    w2=$(waits "$tmp/pin2.jsonl"); w1=$(waits "$tmp/pin1.jsonl")
    grep -q "warning: this run's threads waited for a core [0-9]*% of the last" <<< "$two" &&
        grep -q "HINT: while the cores are shared, set \[train\] threads" <<< "$two" &&
        grep -q "| waiting for cores [0-9]*%" <<< "$two" && ! grep -q "waited for a core" <<< "$one" &&
        awk -v a="$w2" -v b="$w1" 'BEGIN { exit !(a >= 0.3 && a <= 1.0 && b != "" && a > 3 * b) }'
    check "2 threads pinned to one core wait for it (core_wait $w2, said with a HINT); 1 thread there: $w1" $? \
        "core_wait '$w2' / '$w1'; $(grep -m2 'warning\|waiting' <<< "$two")"
    # [train] adapt_threads: the same 2 threads, waiting for the core about a third of the time, try
    # the 1 core they get, and the verdict follows the trial's own measure: kept (the metrics' last
    # windows ran 1 thread) when 1 thread ran at least 3% faster, else given up (2 again). Which
    # one depends on the machine: 2 threads on one core ran the CNN 10x slower than 1 on an AMD
    # EPYC VM, and 3-8% slower on an Intel Xeon VM, where 1 of 4 runs gave up. No warning either
    # way; windows of 40 steps
    ad=$(taskset -c 0 ./train "${pin[@]}" --set data.train_limit=8000 --set train.max_steps=200 --set log.interval=40 \
         --set train.threads=2 --set train.adapt_threads=true --set checkpoint.dir="$tmp/pin3" \
         --set log.metrics="$tmp/pin3.jsonl" 2>&1)
    last=$(grep -o '"threads":[0-9]*' "$tmp/pin3.jsonl" | tail -1 | cut -d: -f2)
    verdict=$(grep -m1 "^threads 1 \(kept\|given up\): [0-9]* img/s against [0-9]* with 2$" <<< "$ad")
    grep -q "^device .*2 threads (adapting to the free cores)" <<< "$ad" &&
        grep -q "^threads 2 -> 1: they waited for a core [0-9]*% of the last window" <<< "$ad" &&
        ! grep -q "warning: this run's threads waited" <<< "$ad" &&
        awk -v v="$verdict" -v last="$last" 'BEGIN { n = split(v, w, " "); x = w[n - 5]; y = w[n - 2];
            kept = index(v, "kept") > 0; exit !(v != "" && (kept ? x >= 1.03 * y && last == 1 : x < 1.03 * y && last == 2)) }'
    check "adapt_threads: 2 threads on one core try 1, and keep it only if faster ($verdict; last windows $last)" $? \
        "last threads '$last'; $(grep '^threads\|^error\|warning' <<< "$ad")"
fi
out=$(./train configs/fmnist_mlp.ini --set train.deterministic=true --set train.threads=1 --set train.global_batch=64 \
      --set train.adapt_threads=true 2>&1)
[ $? -eq 1 ] && grep -q "deterministic with \[train\] adapt_threads = true" <<< "$out" && grep -q "^HINT: set adapt_threads = false" <<< "$out"
check "adapt_threads is refused in the deterministic mode, naming both keys" $? "$out"

[ $mpi = 1 ] || { echo "ok   threads.sh: skipped (no mpirun or no MPI build)"; exit 0; }
MPIRUN="mpirun --oversubscribe --allow-run-as-root"
small=(configs/fmnist_mlp.ini --set data.train_limit=2000 --set data.test_limit=500 --set train.max_steps=12
       --set log.interval=1000 --set checkpoint.every_epochs=0)
cores=$(nproc)
half=$(( cores / 2 > 0 ? cores / 2 : 1 ))
threads_of() { grep -m1 '^device ' | grep -o '| [0-9]* threads\?' | grep -o '[0-9]*'; }

out=$($MPIRUN --bind-to none -np 2 ./train "${small[@]}" 2>&1)
n=$(threads_of <<< "$out")
check "mpirun -np 2, unbound: $cores cores / 2 ranks = $half threads each" \
    $([ "$n" = "$half" ] && grep -q "($cores cores / 2 ranks on this node)" <<< "$out"; echo $?) \
    "got '$(grep -m1 '^device' <<< "$out")'"
grep -q "exceed its" <<< "$out"; check "no oversubscription warning with the default" $((1 - $?)) "warned"
hash_mpi=$(sha <<< "$out")

out=$($MPIRUN -np 2 ./train "${small[@]}" 2>&1)
n=$(threads_of <<< "$out")
check "mpirun -np 2, default binding: at most the node's share" \
    $([ -n "$n" ] && [ $(( n * 2 )) -le $(( cores > 2 ? cores : 2 )) ]; echo $?) "got '$(grep -m1 '^device' <<< "$out")'"

if [ "$cores" -ge 2 ]; then
    out=$($MPIRUN --bind-to none -np 2 ./train "${small[@]}" --set train.threads=$cores 2>&1)
    check "mpirun -np 2 x $cores threads on $cores cores: a warning with the fair share" \
        $(grep -q "warning: 2 ranks x $cores threads on this node exceed its $cores cores" <<< "$out" &&
          grep -q "set it to $half" <<< "$out"; echo $?) "$(grep -m2 -E 'warning|HINT' <<< "$out")"
fi

out=$(./train "${small[@]}" --set distributed.devices=cpu:0,cpu:1 2>&1)
n=$(threads_of <<< "$out")
check "DataParallel over 2 CPUs: $half threads each, said" \
    $([ "$n" = "$half" ] && grep -q "cores / 2 replicas)" <<< "$out"; echo $?) "got '$(grep -m1 '^device' <<< "$out")'"
hash_dp=$(sha <<< "$out")
check "defaults: mpirun -np 2 and DataParallel give one weights hash" \
    $([ -n "$hash_mpi" ] && [ "$hash_mpi" = "$hash_dp" ]; echo $?) "mpirun $hash_mpi, DataParallel $hash_dp"

out=$(./train "${small[@]}" 2>&1)
n=$(threads_of <<< "$out")
check "one process: all $cores cores, header unchanged" \
    $([ "$n" = "$cores" ] && grep -q "| $cores thread" <<< "$out" && ! grep -q "cores /" <<< "$out"; echo $?) \
    "got '$(grep -m1 '^device' <<< "$out")'"
exit $failed
