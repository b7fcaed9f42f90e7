#!/usr/bin/env bash
# tsan.sh [TRAIN]: the threaded parts of a run under ThreadSanitizer, one ok/FAIL line per case:
# DataParallel's replicas with ZeRO 2, bucket_mb and zero_overlap = auto (the thread
# communicator, the all-gather thread); the DDP engine's own test (tests/mpi_ddp, built beside
# TRAIN: overlap, SyncBN, accumulation) under mpirun; mpirun's ranks with ZeRO 1 and its overlap
# thread, and with zero 2 and grad_compression = auto, stopped by SIGUSR1 (the DDP communication
# thread, the signal thread); the folder loader's decoding workers. TRAIN is a ./train built
# with -fsanitize=thread (make tsan builds build-tsan/train and tests/mpi_ddp, then runs this).
#
# What is not ours is left out, each for a reason: oneDNN's and Open MPI's own synchronisation
# is not instrumented, so TSan reads their locks and atomics as races. oneDNN's primitive cache
# (shared by the replicas' contexts) is switched off for the run (ONEDNN_PRIMITIVE_CACHE_CAPACITY
# = 0: each context creates its own primitives, the way they were before the cache existed);
# scripts/tsan.supp names the rest (oneDNN's lazily made globals, Open MPI's TCP start-up's lock
# order). MPI calls are serialised for the run (below). Any other report is a FAIL.
cd "$(dirname "$0")/.."
. tests/common.sh
train=${1:-build-tsan/train}
[ -x "$train" ] || { echo "FAIL $train: not built (make tsan builds it)"; exit 1; }
export TSAN_OPTIONS="halt_on_error=0 history_size=4 suppressions=$PWD/scripts/tsan.supp"
export ONEDNN_PRIMITIVE_CACHE_CAPACITY=0
# every MPI call under dptrain's one lock (as with an MPI that gives MPI_THREAD_SERIALIZED only):
# any thread's MPI_Test progresses every thread's requests, copying one thread's buffers from
# another, and the owner learns of the completion through Open MPI's atomics, which TSan cannot
# see; through the lock it sees that order, so a buffer of ours touched while MPI owns it is a race
export DPT_MPI_SERIALIZE=1
cnn=(configs/fmnist_cnn.ini --set train.threads=1 --set data.test_limit=200 --set log.interval=20)

races() { # LOG: the unsuppressed reports' summaries, or nothing
    grep "^SUMMARY: ThreadSanitizer" "$1" | sort | uniq -c
}

case_run() { # NAME LOG EXPECT_RC: the run's exit status was EXPECT_RC and no report was left
    local found
    found=$(races "$2")
    [ -z "$found" ] && [ "$3" = ok ]
    check "$1" $? "$(if [ -n "$found" ]; then echo "reports:"; echo "$found"; grep -m1 -A16 'WARNING: ThreadSanitizer' "$2"; else tail -n 5 "$2"; fi)"
}

"$train" "${cnn[@]}" --set train.max_steps=60 --set checkpoint.dir="$tmp/dp" --set distributed.devices=cpu:0,cpu:1 \
    --set distributed.zero=2 --set distributed.bucket_mb=auto --set distributed.zero_overlap=auto > "$tmp/dp.log" 2>&1
rc=$?
case_run "DataParallel 2 x cpu, zero 2, bucket_mb and zero_overlap = auto" "$tmp/dp.log" "$([ $rc -eq 0 ] && echo ok)"

if [ $mpi -eq 1 ]; then
    ddp=$(dirname "$train")/tests/mpi_ddp
    if [ -x "$ddp" ]; then
        mpirun --oversubscribe --allow-run-as-root -np 2 "$ddp" > "$tmp/ddp.log" 2>&1
        rc=$?
        case_run "mpi_ddp's DDP engine cases (overlap, SyncBN, accumulation, 16-bit AllReduce)" "$tmp/ddp.log" \
            "$([ $rc -eq 0 ] && grep -q ' 0 failed' "$tmp/ddp.log" && echo ok)"
    fi
    mpirun --oversubscribe --allow-run-as-root -np 2 "$train" "${cnn[@]}" --set train.max_steps=40 \
        --set checkpoint.dir="$tmp/z1" --set distributed.zero=1 --set distributed.zero_overlap=true > "$tmp/z1.log" 2>&1
    rc=$?
    case_run "mpirun -np 2, zero 1 with the all-gather on its thread" "$tmp/z1.log" "$([ $rc -eq 0 ] && echo ok)"

    mpirun --oversubscribe --allow-run-as-root -np 2 "$train" "${cnn[@]}" --set train.max_steps=2000 \
        --set checkpoint.dir="$tmp/sig" --set distributed.zero=2 --set distributed.bucket_mb=auto \
        --set distributed.grad_compression=auto > "$tmp/sig.log" 2>&1 &
    job=$!
    for _ in $(seq 120); do grep -q "step *40/" "$tmp/sig.log" && break; sleep 0.5; done
    kill -USR1 "$job"
    wait "$job"
    rc=$?
    ok=$([ $rc -eq 0 ] && grep -q "received SIGUSR1" "$tmp/sig.log" && echo ok)
    case_run "mpirun -np 2, zero 2 and grad_compression = auto, stopped by SIGUSR1" "$tmp/sig.log" "$ok"
else
    echo "skipped: mpirun cases (no MPI build or no mpirun)"
fi

if "$train" --config-reference 2>/dev/null | grep -q 'folder'; then
    MAKEFLAGS= scripts/make_image_folder.sh "$tmp/img" --train 12 --val 4 --width 96 --height 72 --png-every 5 >/dev/null
    printf '[model]\nname = cnn\n' > "$tmp/cnn.ini"
    "$train" "$tmp/cnn.ini" --set data.source=folder --set data.dir="$tmp/img" --set data.image_size=32 \
        --set data.resize_size=36 --set data.hflip=true --set train.epochs=2 --set train.batch=8 \
        --set train.threads=1 --set data.workers=3 --set checkpoint.dir="$tmp/folder" > "$tmp/folder.log" 2>&1
    rc=$?
    case_run "image folder with 3 decoding workers" "$tmp/folder.log" "$([ $rc -eq 0 ] && echo ok)"
fi
exit $((failed > 0))
