#!/usr/bin/env bash
# deterministic.sh: [train] deterministic. The MLP's weights (SHA-256) after 30 steps of a
# global batch of 64 are bit-identical on 1 rank, under mpirun -np 2 and -np 4, and on
# DataParallel 2 x cpu, with AdamW and with SGD, and the CNN's (batch norm, dropout, mixup and
# cutmix) too, also
# in bf16; 15
# steps on 2 ranks, a checkpoint, and 15 more on 4 ranks equal 30 uninterrupted steps on 1,
# mid-epoch and across an epoch end; the settings the mode cannot run with are refused naming
# the numbers. One ok/FAIL line per case.
cd "$(dirname "$0")/.."
. tests/common.sh
run() { # NP|dpN ARGS...: the final weights hash of one run (NP ranks under mpirun, or N replicas)
    local where=$1
    shift
    case $where in
    dp*) ./train "$@" --set distributed.devices=$(seq -s, -f 'cpu:%g' 0 $((${where#dp} - 1))) > "$tmp/out" 2>&1 ;;
    1) ./train "$@" > "$tmp/out" 2>&1 ;;
    *) timeout 300 mpirun --oversubscribe --allow-run-as-root -np "$where" ./train "$@" > "$tmp/out" 2>&1 ;;
    esac
    sha < "$tmp/out" || tail -5 "$tmp/out" >&2
}
det=(configs/fmnist_mlp.ini --set train.threads=1 --set data.train_limit=3200 --set data.test_limit=500
     --set log.interval=1000 --set train.global_batch=64 --set train.deterministic=true --set train.max_steps=30)
sizes="1 dp2 dp4"
[ $mpi -eq 1 ] && sizes="1 2 4 dp2"
for optim in adamw sgd; do
    want=$(run 1 "${det[@]}" --set optim.name=$optim --set optim.lr=0.01)
    all_same=0
    for w in $sizes; do
        got=$(run $w "${det[@]}" --set optim.name=$optim --set optim.lr=0.01)
        [ -n "$want" ] && [ "$got" = "$want" ] || { all_same=1; echo "     $optim on $w: $got vs $want"; }
    done
    check "$optim: bit-identical weights after 30 steps on $sizes (${want:0:16}...)" $all_same ""
done
# the CNN: batch norm per shard (ghost batch norm, the running statistics averaged through the
# same tree), dropout drawn per shard, and random erasing, mixup and cutmix drawn per shard (a
# shard's key is its place in the global order, not its rank's)
cnn=(configs/fmnist_cnn.ini --set train.threads=1 --set data.train_limit=1280 --set data.test_limit=500
     --set log.interval=1000 --set train.global_batch=64 --set train.deterministic=true --set train.max_steps=20
     --set data.mixup=0.4 --set data.cutmix=1 --set data.mixup_prob=0.8 --set data.random_erase=0.3)
want=$(run 1 "${cnn[@]}")
all_same=0
for w in $sizes; do
    got=$(run $w "${cnn[@]}")
    [ -n "$want" ] && [ "$got" = "$want" ] || { all_same=1; echo "     cnn on $w: $got vs $want"; }
done
check "cnn (batch norm, dropout, random erasing, mixup and cutmix): bit-identical weights and running statistics after 20 steps on $sizes" $all_same ""
# the same in bf16 (bf16 convolutions and activations; fp32 where the CPU has no AVX512-BF16)
bsizes="dp2"
[ $mpi -eq 1 ] && bsizes="2 dp2"
want=$(run 1 "${cnn[@]}" --set train.precision=bf16)
all_same=0
for w in $bsizes; do
    got=$(run $w "${cnn[@]}" --set train.precision=bf16)
    [ -n "$want" ] && [ "$got" = "$want" ] || { all_same=1; echo "     cnn bf16 on $w: $got vs $want"; }
done
check "cnn in bf16: bit-identical weights after 20 steps on 1 $bsizes" $all_same ""

# 15 steps on 2, then 15 on 4 == 30 on 1: mid-epoch (50 steps an epoch), and across an epoch
# end (20 steps an epoch: the checkpoint is in epoch 1, the run ends in epoch 2)
two=2 four=4
[ $mpi -eq 1 ] || { two=dp2; four=dp4; }
for limit in 3200 1280; do
    want=$(run 1 "${det[@]}" --set data.train_limit=$limit --set train.epochs=2)
    rm -rf "$tmp/ck"
    run $two "${det[@]}" --set data.train_limit=$limit --set train.epochs=2 --set checkpoint.every_steps=15 \
        --set checkpoint.dir="$tmp/ck" > /dev/null
    got=$(run $four "${det[@]}" --set data.train_limit=$limit --set train.epochs=2 --set checkpoint.dir="$tmp/ck4" \
          --resume "$tmp/ck/ckpt-step00000015.dpt")
    [ -n "$want" ] && [ "$got" = "$want" ]
    check "15 steps on 2 ranks + 15 on 4 == 30 on 1 ($((limit / 64)) steps an epoch)" $? "$got vs $want"
done

# what the mode cannot run with
refuse() { # NAME NEEDLE ARGS...
    local name=$1 needle=$2
    shift 2
    out=$(./train "${det[@]}" "$@" 2>&1); rc=$?
    [ $rc -eq 1 ] && grep -qF -- "$needle" <<<"$out"
    check "refused: $name" $? "exit $rc: $out"
}
refuse "3 replicas" "3 replicas cannot share 4 shards of 12 samples alike" --set distributed.devices=cpu:0,cpu:1,cpu:2 \
    --set train.global_batch=0 --set train.batch=16 --set train.deterministic_shard=12
refuse "3 shards" "the global batch 48 is not a power-of-two number of shards of 16 samples" --set train.global_batch=48
refuse "accumulation" "accum_steps = 2" --set distributed.accum_steps=2
refuse "threads unset" "needs [train] threads set" --set train.threads=0
refuse "cudnn_benchmark" "deterministic with [train] cudnn_benchmark = true" --set train.cudnn_benchmark=true
# gradients on the wire in 16 bits: the tree sums fp32 (this was ignored without a word)
refuse "grad_compression = bf16" "grad_compression = bf16 with [train] deterministic" --set distributed.grad_compression=bf16
refuse "grad_compression = auto" "HINT: set grad_compression = none" --set distributed.grad_compression=auto
# the header says how the step's gradients are summed (it said nothing of the mode)
out=$(./train "${det[@]}" --set train.max_steps=1 --set checkpoint.dir="$tmp/hd" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "^deterministic: [0-9]* shards a step, [0-9]* on each of 1 rank, summed in one fixed fp32 tree" <<<"$out"
check "the header names the mode's shards and its tree" $? "exit $rc: $(head -5 <<<"$out")"
[ $failed -eq 0 ]
