#!/usr/bin/env bash
# mpi_failures.sh: failures under mpirun end the whole job in bounded time with the failing
# rank's message: mismatched configs/models, a rank that exits, hangs or sees NaN, a data
# error on one rank only, and a parameter that gets no gradient.
set -u
cd "$(dirname "$0")/.."
MPIRUN="mpirun --oversubscribe --allow-run-as-root"
SMALL="--set data.train_limit=2000 --set data.test_limit=500 --set train.threads=1 --set log.interval=1000"
passed=0 failed=0

expect() { # name limit_s needle command...
    local name=$1 limit=$2 needle=$3
    shift 3
    local start=$(date +%s)
    local out rc
    out=$(timeout $((limit + 30)) "$@" 2>&1); rc=$?
    local took=$(( $(date +%s) - start ))
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le "$limit" ] && grep -qF -- "$needle" <<<"$out"; then
        echo "ok   $name (exit $rc in ${took}s)"
        passed=$((passed + 1))
    else
        echo "FAIL $name: exit $rc in ${took}s (limit ${limit}s), expected output with: $needle"
        echo "$out" | tail -n 15 | sed 's/^/     | /'
        failed=$((failed + 1))
    fi
}

expect "config mismatch" 60 "rank 1 differs from rank 0 in the config" \
    $MPIRUN -np 1 ./train configs/fmnist_mlp.ini $SMALL --set train.seed=1 : \
            -np 1 ./train configs/fmnist_mlp.ini $SMALL --set train.seed=2
expect "model mismatch" 60 "rank 1 differs from rank 0 in the parameter list" \
    $MPIRUN -np 1 ./train configs/fmnist_mlp.ini $SMALL : \
            -np 1 ./train configs/fmnist_mlp.ini $SMALL --set model.hidden=128
expect "bucket mismatch" 60 "the bucket plan" \
    $MPIRUN -np 1 ./train configs/fmnist_mlp.ini $SMALL --set distributed.bucket_mb=0.1 : \
            -np 1 ./train configs/fmnist_mlp.ini $SMALL
expect "data error on one rank" 60 "cannot open data file /nonexistent/t10k-images-idx3-ubyte.gz" \
    $MPIRUN -np 1 ./train configs/fmnist_mlp.ini $SMALL : \
            -np 1 ./train configs/fmnist_mlp.ini $SMALL --set data.test_images=/nonexistent/t10k-images-idx3-ubyte.gz
expect "rank exits mid-run" 60 "fault injection: rank 1 exit at step 5" \
    $MPIRUN -np 2 ./train configs/fmnist_mlp.ini $SMALL --set distributed.fault=exit \
            --set distributed.fault_rank=1 --set distributed.fault_step=5
expect "rank hangs: collective timeout" 60 "collective timed out after 3 s: allreduce of bucket 0 of 2, step 3" \
    $MPIRUN -np 2 ./train configs/fmnist_mlp.ini $SMALL --set distributed.fault=hang \
            --set distributed.fault_rank=1 --set distributed.fault_step=3 --set distributed.comm_timeout_s=3
expect "nan on one rank" 60 "rank 0: loss is nan at step 4" \
    $MPIRUN -np 2 ./train configs/fmnist_mlp.ini $SMALL --set distributed.fault=nan \
            --set distributed.fault_rank=0 --set distributed.fault_step=4
expect "unused parameter" 60 "received no gradient in step 0: spare.weight, spare.bias" \
    $MPIRUN -np 2 build/tests/mpi_ddp --unused
expect "devices under mpirun" 60 "DataParallel runs in one process" \
    $MPIRUN -np 2 ./train configs/fmnist_mlp.ini $SMALL --set distributed.devices=cpu:0,cpu:1

echo "mpi_failures: $passed passed, $failed failed"
[ $failed -eq 0 ]
