#!/usr/bin/env bash
# zero.sh: [distributed] zero (issue 26). zero = 1: each rank keeps and steps the optimizer
# state of 1/N of every parameter's elements (ranges of 64-float segments), the gradients
# AllReduced as under zero = 0, the updated ranges all-gathered; zero = 2: the gradients
# reduce-scattered by the same ranges instead. The weights must be bit-identical to unsharded
# DDP's at 2 and 3 ranks (AdamW, SGD with momentum), under DataParallel and with clipping, and
# in deterministic mode identical to one process at 2 and 4 ranks; a sharded run's checkpoints
# hold the whole state (tensor for tensor the unsharded run's), so a checkpoint of any stage
# resumes in any other and on another world size to the uninterrupted end; a rank holds 1/N of
# the state (within 10%, the allocator's measure in the metrics, beside the all-gather's time,
# zero_gather_ms); the all-gather overlapped with the next forward (zero_overlap) changes no bit,
# also on a slow wire where the forward must wait for it. One ok/FAIL line per case.
cd "$(dirname "$0")/.."
. tests/common.sh

if [ $mpi -eq 0 ]; then echo "skipped: no mpirun"; exit 0; fi
M="timeout 300 mpirun --oversubscribe --allow-run-as-root"
base=(configs/fmnist_mlp.ini --set train.threads=1 --set data.train_limit=3000 --set data.test_limit=500
      --set train.epochs=2 --set log.interval=1000 --set train.global_batch=132) # 2, 3 and 4 ranks divide it

for np in 2 3 4; do
    plain=$($M -np $np ./train "${base[@]}" --set checkpoint.dir="$tmp/p$np" 2>&1 | sha)
    stages="1 2"
    [ $np != 2 ] && stages=2 # zero = 1 AllReduces as zero = 0 at any world size: 2 ranks show it
    for z in $stages; do
        # the MLP's 784x256 weight dwarfs its other tensors: zero_grads = auto keeps them whole;
        # ranges forced at 3 ranks (and in the cases below), so both ways must give zero 0's weights
        grads=auto; [ $np != 2 ] && grads=ranges
        out=$($M -np $np ./train "${base[@]}" --set checkpoint.dir="$tmp/z$z$np" --set distributed.zero=$z \
              --set distributed.zero_grads=$grads 2>&1); rc=$?
        [ $rc -eq 0 ] && [ -n "$plain" ] && [ "$(sha <<<"$out")" = "$plain" ] &&
            grep -q "^zero $z | optimizer state sharded over $np ranks: the largest share 5\?[0-9.]*% " <<<"$out" &&
            { [ $z = 1 ] || { grep -q "reduce-scatter (zero 2)" <<<"$out" &&
                              if [ $grads = auto ]; then grep -q "kept whole between steps (its largest" <<<"$out"
                              else grep -q "a rank keeping only its ranges" <<<"$out"; fi; }; }
        ok=$?
        what="zero = $z"; [ $z = 2 ] && what="$what (zero_grads = $grads)"
        check "adamw, $np ranks: $what bit-identical to zero = 0 (${plain:0:16}...)" $ok "exit $rc, $(sha <<<"$out") vs $plain"
    done
    # zero = 2's reduce-scatter at 2-4 ranks is dptrain's direct exchange (comm_mpi.c), associated
    # as Open MPI's own: forcing Open MPI's gives the same weights
    mpi=$(DPT_REDUCE_SCATTER=mpi $M -x DPT_REDUCE_SCATTER -np $np ./train "${base[@]}" --set checkpoint.dir="$tmp/zm$np" \
          --set distributed.zero=2 --set distributed.zero_grads=$grads 2>&1 | sha)
    [ -n "$plain" ] && [ "$mpi" = "$plain" ]
    check "adamw, $np ranks: zero = 2 over Open MPI's reduce-scatter (DPT_REDUCE_SCATTER=mpi) bit-identical too" $? "$mpi vs $plain"
done
# the issue's own case: the CNN (batch norm, dropout) with AdamW, 50 steps, at 2 and 3 ranks:
# zero 1 and zero 2 (its gradients kept by ranges, forced: the classifier dwarfs the rest) give
# zero 0's weights
cnn=(configs/fmnist_cnn.ini --set train.threads=1 --set data.train_limit=6400 --set data.test_limit=500
     --set train.max_steps=50 --set log.interval=1000 --set optim.name=adamw --set optim.lr=0.001
     --set checkpoint.every_epochs=0)
bad=""
for np in 2 3; do
    want=$($M -np $np ./train "${cnn[@]}" --set checkpoint.dir="$tmp/k0$np" 2>&1 | sha)
    stages="1 2"; [ $np = 3 ] && stages=2
    for z in $stages; do
        ranges=(); [ $z = 2 ] && ranges=(--set distributed.zero_grads=ranges) # read by zero 2 only
        got=$($M -np $np ./train "${cnn[@]}" --set checkpoint.dir="$tmp/k$z$np" --set distributed.zero=$z \
              "${ranges[@]}" 2>&1 | sha)
        [ -n "$want" ] && [ "$got" = "$want" ] || bad="$bad $np ranks zero $z: $got vs $want;"
    done
done
[ -z "$bad" ]
check "the CNN with AdamW, 50 steps: zero 1 (2 ranks) and zero 2 (2 and 3 ranks, gradients by ranges) give zero 0's weights" $? "$bad"
sgd=(--set optim.name=sgd --set optim.lr=0.05 --set optim.momentum=0.9)
plain=$($M -np 2 ./train "${base[@]}" "${sgd[@]}" --set checkpoint.dir="$tmp/ps" 2>&1 | sha)
one=$($M -np 2 ./train "${base[@]}" "${sgd[@]}" --set checkpoint.dir="$tmp/zs1" --set distributed.zero=1 2>&1 | sha)
two=$($M -np 2 ./train "${base[@]}" "${sgd[@]}" --set checkpoint.dir="$tmp/zs2" --set distributed.zero=2 --set distributed.zero_grads=ranges 2>&1 | sha)
[ -n "$plain" ] && [ "$one" = "$plain" ] && [ "$two" = "$plain" ]
check "sgd with momentum, 2 ranks: zero = 1 and 2 bit-identical" $? "$one / $two vs $plain"
dp=(--set distributed.devices=cpu:0,cpu:1 --set checkpoint.every_steps=20)
plain=$(./train "${base[@]}" "${dp[@]}" --set checkpoint.dir="$tmp/pd" 2>&1 | sha)
one=$(./train "${base[@]}" "${dp[@]}" --set checkpoint.dir="$tmp/zd1" --set distributed.zero=1 2>&1 | sha)
two=$(./train "${base[@]}" "${dp[@]}" --set checkpoint.dir="$tmp/zd2" --set distributed.zero=2 --set distributed.zero_grads=ranges 2>&1 | sha)
[ -n "$plain" ] && [ "$one" = "$plain" ] && [ "$two" = "$plain" ] &&
    same_inspect "$tmp/pd/ckpt-step00000020.dpt" "$tmp/zd2/ckpt-step00000020.dpt"
check "DataParallel 2 x cpu: zero = 1 and 2 bit-identical, zero = 2's checkpoint (the replicas' state gathered) the unsharded one's, optimizer hash included" $? "$one / $two vs $plain"

# a language model: the fortunes GPT (tied token embedding, layer norms, AdamW decaying 2-D weights only)
# on token shards of its own (a clean clone has no build/fortunes)
printf 'the quick brown fox jumps over the lazy dog. %.0s' $(seq 1 300) > "$tmp/text.txt"
build/tools/text_tokens --val-fraction 0.1 "$tmp/tok" "$tmp/text.txt" > /dev/null
gpt=(configs/gpt_fortunes.ini --set train.threads=1 --set train.max_steps=10 --set log.interval=1000
     --set data.train="$tmp/tok/train_*.bin" --set data.val="$tmp/tok/val_*.bin" --set data.seq_len=64
     --set train.batch=4 --set data.test_limit=16 --set distributed.bucket_mb=0.2 --set log.interval=5)
g0=$($M -np 2 ./train "${gpt[@]}" --set checkpoint.dir="$tmp/g0" --set log.metrics="$tmp/g0.jsonl" 2>&1 | sha)
out=$($M -np 2 ./train "${gpt[@]}" --set checkpoint.dir="$tmp/g2" --set distributed.zero=2 --set log.metrics="$tmp/g2.jsonl" 2>&1)
g2=$(sha <<<"$out")
[ -n "$g0" ] && [ "$g2" = "$g0" ]
check "the fortunes GPT (its config on shards of a text), 2 ranks, 10 steps: zero = 2 bit-identical to zero = 0" $? "$g2 vs $g0"
# zero = 2 keeps only a rank's ranges of the gradients between steps: 13 buckets (each closed
# once it holds 0.2 MiB, so at most 0.2 MiB plus its last parameter, 0.25 MiB at most here);
# backward opens a fifth only once the oldest on the wire is done, so the most a rank holds at
# once (grad_mb, the allocator's blocks) is its half plus 4 buckets, below the whole gradient
grads() { grep '"kind":"train"' "$1" | tail -1 | grep -o '"grad_mb":[0-9.]*' | cut -d: -f2; }
whole=$(grads "$tmp/g0.jsonl"); held=$(grads "$tmp/g2.jsonl")
grep -q "a rank keeping only its ranges" <<<"$out" &&
    awk -v w="$whole" -v h="$held" -v p=834304 'BEGIN { exit !(w > 0 && (w - p * 4 / 1048576) ^ 2 < 0.01 && h > w / 2 &&
        h <= w / 2 + 4 * 0.45 && h < 0.9 * w) }'
check "zero = 2 on 2 ranks: the GPT's gradients take at most $held MiB at once, its $whole MiB whole under zero = 0 (half + 4 buckets of at most 0.45 MiB allowed, and below 0.9 of the whole)" $? \
    "whole '$whole', held '$held', $(grep '^zero' <<<"$out")"

# clipping under zero = 2: the global norm from the ranks' partial sums of squares (one small
# AllReduce); it equals the whole gradient's to double rounding (printed to 6 digits: equal
# within one unit there) and it clips (the norms are above clip_norm)
clip=("${base[@]}" --set optim.clip_norm=0.5 --set log.interval=1 --set train.epochs=1)
norms() { grep '"kind":"train"' "$1" | grep -o '"grad_norm":[0-9.e+-]*' | cut -d: -f2; }
$M -np 2 ./train "${clip[@]}" --set checkpoint.dir="$tmp/c0" --set log.metrics="$tmp/c0.jsonl" > /dev/null 2>&1
$M -np 2 ./train "${clip[@]}" --set checkpoint.dir="$tmp/c2" --set log.metrics="$tmp/c2.jsonl" --set distributed.zero=2 --set distributed.zero_grads=ranges > /dev/null 2>&1
paste <(norms "$tmp/c0.jsonl") <(norms "$tmp/c2.jsonl") > "$tmp/norms"
awk '{ n++; if ($1 > 0.5) over++; d = $1 - $2; if (d < 0) d = -d; if (d > 1.5e-6 * $1) bad++ }
     END { exit !(n >= 20 && over >= 10 && bad == 0) }' "$tmp/norms"
ok=$? # before the message: a $(...) in it would set $? to its own status
check "clip_norm under zero = 2: every step's gradient norm (from the shards) equals zero = 0's ($(wc -l < "$tmp/norms") steps, $(awk '$1 > 0.5' "$tmp/norms" | wc -l) clipped)" $ok \
    "$(head -3 "$tmp/norms" | tr '\n\t' '; ')"

# bf16 gradients on the wire: the reduce-scatter in 16 bits sums as the 16-bit AllReduce does
b0=$($M -np 3 ./train "${base[@]}" --set distributed.grad_compression=bf16 --set checkpoint.dir="$tmp/b0" 2>&1 | sha)
b2=$($M -np 3 ./train "${base[@]}" --set distributed.grad_compression=bf16 --set checkpoint.dir="$tmp/b2" \
     --set distributed.zero=2 --set distributed.zero_grads=ranges 2>&1 | sha)
[ -n "$b0" ] && [ "$b2" = "$b0" ]
check "grad_compression = bf16, 3 ranks: zero = 2 bit-identical to zero = 0 (both 16 bits on the wire)" $? "$b2 vs $b0"

# gradient accumulation (no_sync, then the reduce-scatter on the last micro-batch) and the loss
# scaler skipping a step whose gradients a rank made NaN (the decision from the shards' norm)
acc=("${base[@]}" --set train.global_batch=128 --set distributed.accum_steps=2)
nan=("${base[@]}" --set train.global_batch=128 --set train.loss_scale=dynamic --set distributed.fault=nan
     --set distributed.fault_rank=1 --set distributed.fault_step=5)
a0=$($M -np 2 ./train "${acc[@]}" --set checkpoint.dir="$tmp/a0" 2>&1 | sha)
a2=$($M -np 2 ./train "${acc[@]}" --set checkpoint.dir="$tmp/a2" --set distributed.zero=2 --set distributed.zero_grads=ranges 2>&1 | sha)
n0=$($M -np 2 ./train "${nan[@]}" --set checkpoint.dir="$tmp/n0" 2>&1 | sha)
out=$($M -np 2 ./train "${nan[@]}" --set checkpoint.dir="$tmp/n2" --set distributed.zero=2 --set distributed.zero_grads=ranges 2>&1)
[ -n "$a0" ] && [ "$a2" = "$a0" ] && [ -n "$n0" ] && [ "$(sha <<<"$out")" = "$n0" ] && grep -q "step skipped" <<<"$out"
check "zero = 2 with accumulation (2 micro-batches) and with a NaN step the loss scaler skips: zero = 0's weights" $? \
    "accum $a2 vs $a0, nan $(sha <<<"$out") vs $n0"

# deterministic mode: every stage on 2 and 4 ranks gives one process's weights
det=(configs/fmnist_mlp.ini --set train.threads=1 --set data.train_limit=3200 --set data.test_limit=500
     --set log.interval=1000 --set train.global_batch=64 --set train.deterministic=true --set train.max_steps=50)
want=$(./train "${det[@]}" --set checkpoint.dir="$tmp/d1" 2>&1 | sha)
bad=""
for run in "2 1" "2 2" "4 2"; do
    set -- $run
    np=$1 z=$2
    got=$($M -np $np ./train "${det[@]}" --set checkpoint.dir="$tmp/d$np$z" --set distributed.zero=$z 2>&1 | sha)
    [ -n "$want" ] && [ "$got" = "$want" ] || bad="$bad $np ranks zero $z: $got;"
done
[ -z "$bad" ]
check "deterministic: zero = 1 on 2 ranks, zero = 2 on 2 and 4: one process's weights after 50 steps (${want:0:16}...)" $? "$bad vs $want"

# stopped at step 30 under zero = 1 on 4 ranks (its checkpoint), resumed on 2 ranks under zero =
# 2 and on 1 process: the uninterrupted run's end
ck=(--set checkpoint.every_steps=10 --set checkpoint.keep_last=0)
$M -np 4 ./train "${det[@]}" "${ck[@]}" --set train.max_steps=30 --set checkpoint.dir="$tmp/k4" --set distributed.zero=1 > /dev/null 2>&1
a=$($M -np 2 ./train "${det[@]}" "${ck[@]}" --set checkpoint.dir="$tmp/k2" --set distributed.zero=2 \
    --resume "$tmp/k4/ckpt-step00000030.dpt" 2>&1 | sha)
b=$(./train "${det[@]}" "${ck[@]}" --set checkpoint.dir="$tmp/k1" --resume "$tmp/k4/ckpt-step00000030.dpt" 2>&1 | sha)
[ -n "$want" ] && [ "$a" = "$want" ] && [ "$b" = "$want" ]
check "deterministic: 30 steps under zero = 1 on 4 ranks, resumed under zero = 2 on 2 ranks and on 1 process: the uninterrupted weights" $? \
    "$a / $b vs $want"

# checkpoints: the same tensors; resumed across zero = 0 / 1 / 2, the uninterrupted end
full=$($M -np 2 ./train "${base[@]}" "${ck[@]}" --set checkpoint.dir="$tmp/cp" 2>&1 | sha)
$M -np 2 ./train "${base[@]}" "${ck[@]}" --set checkpoint.dir="$tmp/cz" --set distributed.zero=2 --set distributed.zero_grads=ranges > /dev/null 2>&1
same=1
for f in "$tmp"/cp/ckpt-step*.dpt; do
    same_inspect "$f" "$tmp/cz/$(basename "$f")" || same=0
done
a=$($M -np 2 ./train "${base[@]}" "${ck[@]}" --set checkpoint.dir="$tmp/ra" --resume "$tmp/cz/ckpt-step00000020.dpt" 2>&1 | sha)
b=$($M -np 2 ./train "${base[@]}" "${ck[@]}" --set checkpoint.dir="$tmp/rb" --set distributed.zero=1 \
    --resume "$tmp/cp/ckpt-step00000020.dpt" 2>&1 | sha)
c=$($M -np 2 ./train "${base[@]}" "${ck[@]}" --set checkpoint.dir="$tmp/rc" --set distributed.zero=2 \
    --resume "$tmp/cp/ckpt-step00000020.dpt" 2>&1 | sha)
[ $same -eq 1 ] && [ -n "$full" ] && [ "$a" = "$full" ] && [ "$b" = "$full" ] && [ "$c" = "$full" ]
check "checkpoints: zero = 2's tensors are the unsharded run's; resumed across zero = 2, 0 and 1, the uninterrupted end" $? \
    "same $same, $a / $b / $c vs $full"

# [checkpoint] sharded (the default under zero): each rank's part of the optimizer state in a
# file of its own beside the checkpoint, which holds the rest; the parts go with their checkpoint
# when it is pruned, best.dpt keeps only its latest parts, and sharded = false writes no parts.
# (The resumes across stages and world sizes above read parts.) A missing part, a part of
# another checkpoint and a damaged one are refused naming the part; a part whose checkpoint was
# never written (a crash between them) is removed when a run claims the folder.
parts() { ls "$1" | grep -c "^$2\.[0-9a-f]\{16\}\.optim[0-9]*-of-$3\$"; }
$M -np 2 ./train "${base[@]}" "${ck[@]}" --set checkpoint.dir="$tmp/sp" --set distributed.zero=2 \
    --set checkpoint.keep_last=2 --set checkpoint.best=true > /dev/null 2>&1
$M -np 2 ./train "${base[@]}" "${ck[@]}" --set checkpoint.dir="$tmp/so" --set distributed.zero=2 \
    --set checkpoint.keep_last=2 --set checkpoint.sharded=false > /dev/null 2>&1
mains=$(ls "$tmp/sp" | grep -c '^ckpt-step[0-9]*\.dpt$')
last=$(ls "$tmp/sp" | grep '^ckpt-step[0-9]*\.dpt$' | tail -1)
first=$(ls "$tmp/sp" | grep '^ckpt-step[0-9]*\.dpt$' | head -1)
n_all=$(ls "$tmp/sp" | grep -c 'optim[0-9]-of-2$')
small=$(stat -c %s "$tmp/sp/$last"); whole=$(stat -c %s "$tmp/so/$last")
[ "$mains" = 2 ] && [ "$(parts "$tmp/sp" "$last" 2)" = 2 ] && [ "$(parts "$tmp/sp" best.dpt 2)" = 2 ] && [ "$n_all" = 6 ] &&
    [ "$(ls "$tmp/so" | grep -c optim)" = 0 ] && [ "$small" -lt $((whole / 2)) ] &&
    same_inspect "$tmp/sp/$last" "$tmp/so/$last" &&
    ./train --inspect "$tmp/sp/$last" | head -1 | grep -q "optimizer state in 2 parts"
check "sharded checkpoints: 2 parts beside each kept checkpoint and best.dpt ($n_all files), none pruned ones', none with sharded = false; the file $small bytes against $whole whole; --inspect the same" $? \
    "$(ls "$tmp/sp" "$tmp/so")"
bad=""
run_from() { $M -np 2 ./train "${base[@]}" "${ck[@]}" --set checkpoint.dir="$tmp/sx" --set distributed.zero=2 \
             --set checkpoint.existing=archive --resume "$1" 2>&1; }
p0=$(ls "$tmp/sp"/"$last".*.optim0-of-2); p1=$(ls "$tmp/sp"/"$last".*.optim1-of-2)
tensors() { tail -c +$((9 + $(od -An -t u8 -N 8 "$1"))) "$1"; } # a safetensors file after its JSON header (which names the source)
./train --export safetensors "$tmp/sp/$last" "$tmp/sp.st" > /dev/null 2>&1 &&
    ./train --export safetensors "$tmp/so/$last" "$tmp/so.st" > /dev/null 2>&1 &&
    cmp -s <(tensors "$tmp/sp.st") <(tensors "$tmp/so.st") && [ "$(tensors "$tmp/sp.st" | wc -c)" -gt 1000000 ] ||
    bad="$bad export: other tensors than the one-file checkpoint's;"
mv "$p1" "$tmp/p1.saved"
# weights-only readers (--export, --sample, --eval) need no part: they read the file alone
./train --export safetensors "$tmp/sp/$last" "$tmp/sp2.st" > /dev/null 2>&1 && cmp -s "$tmp/sp.st" "$tmp/sp2.st" ||
    bad="$bad export without a part failed;"
out=$(run_from "$tmp/sp/$last"); rc=$?
{ [ $rc = 1 ] && grep -q "optimizer state part 1 of 2: cannot open checkpoint $p1" <<<"$out" && grep -q "HINT: a checkpoint written under \[distributed\] zero" <<<"$out"; } || bad="$bad missing: $rc $out;"
cp "$(ls "$tmp/sp"/"$first".*.optim1-of-2)" "$p1" # another checkpoint's part under this one's name
out=$(run_from "$tmp/sp/$last"); rc=$?
{ [ $rc = 1 ] && grep -q "$p1 is not part 1 of 2 of $tmp/sp/$last" <<<"$out"; } || bad="$bad foreign: $rc $out;"
head -c 1000 "$tmp/p1.saved" > "$p1"
out=$(run_from "$tmp/sp/$last"); rc=$?
{ [ $rc = 1 ] && grep -q "2 optimizer state parts ($tmp/sp/$last\.[0-9a-f]*\.optim\*-of-2) hold [0-9]* bytes, fewer than its records' [0-9]*: a part is truncated" <<<"$out"; } ||
    bad="$bad damaged: $rc $out;"
mv "$tmp/p1.saved" "$p1"
out=$(run_from "$tmp/sp/$last"); rc=$?
[ $rc = 0 ] || bad="$bad whole again: $rc $(tail -3 <<<"$out");"
orphan="$tmp/sp/ckpt-step00000099.dpt.00000000deadbeef.optim0-of-2"
cp "$p0" "$orphan"
$M -np 2 ./train "${base[@]}" "${ck[@]}" --set checkpoint.dir="$tmp/sp" --set distributed.zero=2 --resume latest > /dev/null 2>&1
[ ! -e "$orphan" ] || bad="$bad orphan part kept;"
[ -z "$bad" ]
check "sharded checkpoints: --export gives the one-file checkpoint's tensors, with or without the parts; a missing, a foreign and a damaged part are refused naming it by a resume (exit 1); whole again, it resumes; an orphan part is removed" $? "$bad"

# what a rank holds (within 10% of 1/N of the unsharded state) for the default MLP, whose
# tensors cannot be split evenly whole (784x256 is 74% of it): AdamW keeps two floats a
# parameter; the metrics' optim_state_mb is rank 0's state, measured
mem=("${base[@]}" --set train.epochs=1 --set log.interval=10 --set train.global_batch=128)
state() { grep '"kind":"train"' "$1" | tail -1 | grep -o '"optim_state_mb":[0-9.]*' | cut -d: -f2; }
$M -np 2 ./train "${mem[@]}" --set checkpoint.dir="$tmp/m0" --set log.metrics="$tmp/m0.jsonl" > /dev/null 2>&1
full=$(state "$tmp/m0.jsonl")
params=$(( 784 * 256 + 256 * 256 + 256 * 10 + 2 * 256 + 10 ))
for run in "2 1" "4 2"; do
    set -- $run
    $M -np $1 ./train "${mem[@]}" --set checkpoint.dir="$tmp/m$1$2" --set distributed.zero=$2 \
        --set log.metrics="$tmp/m$1$2.jsonl" > /dev/null 2>&1
    part=$(state "$tmp/m$1$2.jsonl")
    awk -v f="$full" -v h="$part" -v p="$params" -v n=$1 \
        'BEGIN { exit !(f > 0 && (f - 2 * p * 4 / 1048576) ^ 2 < 1e-6 && h * n / f > 0.9 && h * n / f < 1.1) }' &&
        grep '"kind":"train"' "$tmp/m$1$2.jsonl" | tail -1 | grep -q '"zero_gather_busy_ms":[0-9.]*[1-9]' &&
        ! grep -q zero_gather_ms "$tmp/m0.jsonl"
    ok=$? # before the message: a $(...) in it would set $? to its own status
    check "$1 ranks, zero = $2: rank 0 holds $part MiB of optimizer state, $(awk -v f="$full" -v h="$part" 'BEGIN { printf "%.3f", h / f }') of the unsharded $full MiB (AdamW: 2 x 4 bytes x $params; 1/$1 wanted)" $ok \
        "full '$full', rank 0 '$part'"
done

# zero_overlap: the all-gather after a step on its own thread while the next forward runs, each
# op waiting for the pieces it reads. On a wire slowed to 20 ms/MiB (the CNN's 1.5 MiB classifier
# weight takes ~15 ms, read last) zero 1 and 2 give zero 0's weights with it, without it and
# with auto (which measures both over 24 steps and records its choice), the header says so, and
# the forwards wait less than the gathers take (the convolutions run while the classifier's
# piece is on the wire)
slow=(configs/fmnist_cnn.ini --set train.threads=1 --set data.train_limit=6400 --set data.test_limit=500
      --set train.max_steps=26 --set log.interval=13 --set optim.name=adamw --set optim.lr=0.001
      --set checkpoint.every_epochs=0 --set distributed.bench_comm_ms_per_mb=20)
want=$($M -np 2 ./train "${slow[@]}" --set checkpoint.dir="$tmp/o0" 2>&1 | sha)
bad=""
for run in "1 true" "2 true" "2 false" "2 auto"; do
    set -- $run
    out=$($M -np 2 ./train "${slow[@]}" --set checkpoint.dir="$tmp/o$1$2" --set distributed.zero=$1 \
          --set distributed.zero_overlap=$2 --set log.metrics="$tmp/o$1$2.jsonl" 2>&1)
    [ -n "$want" ] && [ "$(sha <<<"$out")" = "$want" ] || bad="$bad zero $1 overlap $2: another hash;"
    case $2 in
    true) grep -q "the parameters' all-gather overlapped with the next forward$" <<<"$out" ;;
    false) ! grep -q "overlapped with the next forward" <<<"$out" ;;
    auto) grep -q "overlapped with the next forward or after the step, as measured" <<<"$out" &&
          grep -q "^zero_overlap = auto: [0-9.]* ms a step with the all-gather overlapped .*: [a-z ]* from step 25 on" <<<"$out" &&
          grep -q '"kind":"zero_tune","step":25,"overlap":[tf]' "$tmp/o$1$2.jsonl" ;;
    esac || bad="$bad zero $1 overlap $2: header or choice;"
done
gathers() { grep '"kind":"train"' "$1" | tail -1 | grep -o '"zero_gather[a-z_]*":[0-9.]*' | cut -d: -f2 | tr '\n' ' '; }
read -r exposed busy <<<"$(gathers "$tmp/o2true.jsonl")"
read -r exposed_off busy_off <<<"$(gathers "$tmp/o2false.jsonl")"
awk -v e="$exposed" -v b="$busy" -v eo="$exposed_off" -v bo="$busy_off" \
    'BEGIN { exit !(b > 5 && e < 0.95 * b && eo > 5 && bo == 0) }' || bad="$bad metrics: $exposed/$busy, off $exposed_off/$busy_off;"
[ -z "$bad" ]
check "zero_overlap on a slow wire: zero 1 with it and zero 2 with, without and auto give zero 0's weights; zero 2's forwards waited $exposed of the gathers' $busy ms a step (without it: $exposed_off ms, all exposed)" $? "$bad"

# [model] recompute (activation checkpointing, dpt_checkpoint): a block's parameters are read by
# its recomputation in backward, so their gradients become final (and their buckets are
# reduced, scattered and, with zero_grads = ranges, given storage) at the checkpoint's node: a
# small GPT at 2 ranks gives zero 0's weights without recompute under zero 0, 1 (the gathers
# overlapped with the next forward, whose ops inside a checkpoint are waited for too) and 2 (the
# tokens of the GPT case above)
rgpt=(configs/gpt_fortunes.ini --set model.n_layer=3 --set model.n_head=2 --set model.n_embd=32
     --set "data.train=$tmp/tok/train_*.bin" --set "data.val=$tmp/tok/val_*.bin" --set data.seq_len=32
     --set train.batch=4 --set train.max_steps=6 --set data.test_limit=8 --set train.threads=1
     --set model.resid_dropout=0.1 --set distributed.bucket_mb=0.01)
want=$($M -np 2 ./train "${rgpt[@]}" --set checkpoint.dir="$tmp/rc0" 2>&1 | sha)
bad=""
for z in "0 auto auto" "1 auto true" "2 ranges auto" "2 whole auto"; do
    read -r stage grads overlap <<<"$z"
    got=$($M -np 2 ./train "${rgpt[@]}" --set checkpoint.dir="$tmp/rc$stage$grads" --set model.recompute=true \
          --set distributed.zero=$stage --set distributed.zero_grads=$grads --set distributed.zero_overlap=$overlap 2>&1 | sha)
    [ -n "$want" ] && [ "$got" = "$want" ] || bad="$bad zero $stage ($grads): ${got:0:16};"
done
[ -z "$bad" ]
check "recompute = true at 2 ranks, zero 0/1/2: zero 0's weights without it (${want:0:16}...)" $? "$bad"

# bucket_mb = auto under zero = 2: the sizes are tried on buckets cut inside the first plan's
# (the segments whose ranges the ranks keep: their optimizer state and kept gradient ranges
# never move), the choice said before zero_overlap = auto starts measuring (each switches every
# 3 steps: side by side they would measure each other's candidates); the GPT (tensors of 48
# floats: gaps between the parameters, which a bucket cut inside a segment must step over) at
# 2 ranks with the gradients kept by ranges and whole, and at 3, gives zero 0's weights; a
# resume from a checkpoint written after the choice takes it without measuring, to the same end
gpta=("${gpt[@]}" --set model.n_embd=48 --set train.max_steps=80 --set train.epochs=100 --set checkpoint.every_steps=10
      --set checkpoint.keep_last=0)
bad=""
for v in "2 ranges" "2 whole" "3 ranges"; do
    read -r np grads <<<"$v"
    [ -d "$tmp/ga0$np" ] || want=$($M -np $np ./train "${gpta[@]}" --set checkpoint.dir="$tmp/ga0$np" 2>&1 | sha)
    out=$($M -np $np ./train "${gpta[@]}" --set checkpoint.dir="$tmp/ga$np$grads" --set distributed.zero=2 \
          --set distributed.zero_grads=$grads --set distributed.bucket_mb=auto 2>&1); rc=$?
    chosen=$(sed -n 's/^bucket_mb = auto: \([0-9.]*\) MiB.* after \([0-9]*\) steps.*/\1 \2/p' <<<"$out")
    from=$(sed -n 's/^zero_overlap = auto: .* from step \([0-9]*\) on$/\1/p' <<<"$out")
    [ $rc -eq 0 ] && [ -n "$want" ] && [ "$(sha <<<"$out")" = "$want" ] && grep -q "sizes to try" <<<"$out" &&
        [ -n "$chosen" ] && [ -n "$from" ] && [ "$from" -gt "${chosen#* }" ] ||
        bad="$bad $np ranks ($grads): exit $rc, $(sha <<<"$out" | cut -c1-16) vs ${want:0:16}, chose '$chosen', zero_overlap from '$from';"
    [ "$v" = "2 ranges" ] && chosen2=$chosen
done
[ -z "$bad" ]
check "zero = 2 with bucket_mb = auto (chose ${chosen% *} MiB after ${chosen#* } steps, zero_overlap measured from step $from): zero 0's weights at 2 (gradient ranges, whole) and 3 ranks" $? "$bad"
ckpt=$(ls "$tmp/ga2ranges"/ckpt-step*.dpt | awk -F'step' -v t="${chosen2#* }" '{ s = $2 + 0 } s > t { print; exit }')
last=$(ls "$tmp/ga2ranges"/ckpt-step*.dpt | tail -1)
out="no checkpoint after step ${chosen2#* } in $tmp/ga2ranges"; rc=1
if [ -n "$ckpt" ] && [ -n "$last" ] && [ "$ckpt" != "$last" ]; then
    mkdir -p "$tmp/gares" && cp "$ckpt" "$ckpt".*optim* "$tmp/gares/"
    out=$($M -np 2 ./train "${gpta[@]}" --set checkpoint.dir="$tmp/gares" --set distributed.zero=2 \
          --set distributed.zero_grads=ranges --set distributed.bucket_mb=auto --resume latest 2>&1); rc=$?
fi
[ $rc -eq 0 ] && ! grep -q "^bucket_mb = auto:" <<<"$out" && grep -q "buckets\? (bucket_mb ${chosen2% *})" <<<"$out" &&
    same_inspect "$last" "$tmp/gares/$(basename "$last")"
ok=$? # before the message: a $(...) in it would set $? to its own status
check "zero = 2, bucket_mb = auto resumed from $(basename "$ckpt"): nothing measured again, the uninterrupted run's last checkpoint" $ok \
    "exit $rc: $(grep -m1 "^ddp" <<<"$out") $(tail -2 <<<"$out")"

[ $failed -eq 0 ]
