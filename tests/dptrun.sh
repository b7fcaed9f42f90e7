#!/usr/bin/env bash
# dptrun.sh: scripts/dptrun. Under mpirun -np 2, rank 1 killed at step 15 (fault injection):
# the job is restarted from the step-15 checkpoint and ends with the weights (SHA-256) of an
# uninterrupted run. With a stand-in launcher (MPIRUN) that fails on cue: restarts down to
# --min-np after a restart fails at the same size, no restarts left, no restart for exit 3,
# --resume replaced by --resume auto, argument errors. One ok/FAIL line per case.
cd "$(dirname "$0")/.."
. tests/common.sh

if [ $mpi -eq 1 ]; then
    run=(configs/fmnist_mlp.ini --set train.epochs=1 --set train.threads=1 --set data.train_limit=3200
         --set data.test_limit=1000 --set log.interval=1000 --set checkpoint.every_steps=5)
    full=$(timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2 ./train "${run[@]}" \
           --set checkpoint.dir="$tmp/full" 2>&1 | sha)
    out=$(timeout 300 scripts/dptrun -np 2 --max-restarts 2 --oversubscribe --allow-run-as-root ./train "${run[@]}" \
          --set checkpoint.dir="$tmp/cut" --set distributed.fault=exit --set distributed.fault_rank=1 \
          --set distributed.fault_step=15 2>&1); rc=$?
    [ $rc -eq 0 ] && [ -n "$full" ] && [ "$(sha <<<"$out")" = "$full" ] &&
        grep -q "fault injection: rank 1 exit at step 15" <<<"$out" &&
        grep -q "restart 1 of 2 from the newest checkpoint" <<<"$out" &&
        grep -q "resumed from $tmp/cut/ckpt-step00000015.dpt" <<<"$out" &&
        grep -q "dptrun: done after 1 restart(s)" <<<"$out"
    check "rank 1 killed at step 15: restarted from step 15, same weights as uninterrupted" $? \
        "exit $rc, hash $(sha <<<"$out") vs $full: $(grep dptrun <<<"$out")"
fi

# a stop sent to dptrun (a scheduler's SIGTERM, Ctrl-C) is the user's, not a failure: passed
# to the job, which writes its checkpoint; exit 0, not restarted, the command to continue said
if [ $mpi -eq 1 ]; then
    long=(configs/fmnist_mlp.ini --set train.epochs=50 --set train.threads=1 --set log.interval=100
          --set checkpoint.every_epochs=10 --set checkpoint.dir="$tmp/stop")
    # (a background job of a script starts with SIGINT ignored, which bash cannot trap: env
    # gives it back its default, as a terminal's foreground job has it)
    timeout 120 env --default-signal=INT scripts/dptrun -np 2 --oversubscribe --allow-run-as-root ./train "${long[@]}" \
        > "$tmp/stop.log" 2>&1 &
    pid=$!
    for _ in $(seq 300); do grep -q "step.*img/s" "$tmp/stop.log" && break; sleep 0.1; done
    pkill -INT -P $pid -f scripts/dptrun
    wait $pid; rc=$?
    [ $rc -eq 0 ] && grep -q "dptrun: stopped by SIGINT" "$tmp/stop.log" && grep -q "received SIGUSR1" "$tmp/stop.log" &&
        ! grep -q "attempt 2" "$tmp/stop.log" && ls "$tmp/stop" | grep -q "ckpt-step.*dpt" &&
        grep -q "continue with: scripts/dptrun -np 2 .*--resume latest" "$tmp/stop.log"
    check "SIGINT to dptrun: passed on, checkpoint written, exit 0, not restarted" $? "exit $rc: $(grep -v '^epoch' "$tmp/stop.log" | tail -4)"
fi

# a stand-in launcher: "-np N -x VAR PROGRAM ARGS"; exits with the next code of $tmp/codes
cat > "$tmp/fake_mpirun" <<'SH'
#!/usr/bin/env bash
np=$2; shift 4
echo "np=$np attempt=$DPTRUN_ATTEMPT args=$*" >> "$FAKE_LOG"
code=$(head -n 1 "$FAKE_CODES"); sed -i 1d "$FAKE_CODES"
exit "${code:-0}"
SH
chmod +x "$tmp/fake_mpirun"
fake() { # CODES... -- DPTRUN ARGS: run dptrun with the stand-in; output in $out, log in $log
    : > "$tmp/log"; : > "$tmp/codes"
    while [ "$1" != -- ]; do echo "$1" >> "$tmp/codes"; shift; done
    shift
    out=$(MPIRUN="$tmp/fake_mpirun" FAKE_LOG="$tmp/log" FAKE_CODES="$tmp/codes" scripts/dptrun "$@" 2>&1); rc=$?
    log=$(cat "$tmp/log")
}
fake 1 1 1 0 -- -np 3 --min-np 2 --max-restarts 5 ./train x.ini --resume 7 --set a.b=1
[ $rc -eq 0 ] && [ "$(cut -d' ' -f1 <<<"$log" | tr '\n' ' ')" = "np=3 np=3 np=2 np=2 " ] &&
    grep -q "continuing with 2 ranks" <<<"$out" && grep -q "done after 3 restart(s)" <<<"$out" &&
    [ "$(sed -n 1p <<<"$log")" = "np=3 attempt=0 args=./train x.ini --resume 7 --set a.b=1" ] &&
    [ "$(sed -n 2p <<<"$log")" = "np=3 attempt=1 args=./train x.ini --set a.b=1 --resume auto" ]
check "restarts: the same size, then one rank fewer down to --min-np; --resume replaced by auto" $? "exit $rc: $log / $out"
fake 1 1 9 -- -np 2 --max-restarts 2 ./train x.ini
[ $rc -eq 9 ] && [ "$(wc -l <<<"$log")" -eq 3 ] && grep -q "no restarts left (2 of 2 used)" <<<"$out"
check "no restarts left: the last attempt's exit code" $? "exit $rc: $out"
fake 3 -- -np 2 ./train x.ini
[ $rc -eq 3 ] && [ "$(wc -l <<<"$log")" -eq 1 ] && grep -q "not restarted" <<<"$out"
check "a failed expectation (exit 3) is not restarted" $? "exit $rc: $out"
fake -- -np 2 --hostfile hosts.txt --mca btl self ./train x.ini
[ $rc -eq 0 ] && grep -q "args=--hostfile hosts.txt --mca btl self ./train x.ini" <<<"$log"
check "mpirun options with values are passed through, not taken for the program" $? "$log"
fake -- --max-restarts 2 ./train x.ini
[ $rc -eq 2 ] && grep -q -- "-np N is required" <<<"$out"
check "no -np: exit 2" $? "exit $rc: $out"
fake -- -np 2 --min-np 3 ./train x.ini
[ $rc -eq 2 ] && grep -q -- "--min-np must be between 1 and -np (2)" <<<"$out"
check "--min-np above -np: exit 2" $? "exit $rc: $out"
[ $failed -eq 0 ]
