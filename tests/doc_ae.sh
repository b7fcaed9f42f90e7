#!/usr/bin/env bash
# doc_ae.sh: docs/writing-a-model.md's convolutional autoencoder (transposed convolutions up; its
# task's loss compares the output with the input image; make builds build/tests/doc_ae against
# libdpt.a and include/ only): 2 ranks train it and the test images' mean squared error falls
# below a tenth of the first step's; DataParallel's 2 replicas end with the 2 ranks' weights.
# One ok/FAIL line per case.
cd "$(dirname "$0")/.."
. tests/common.sh
bin=${BUILD:-build}/tests/doc_ae
ini=${BUILD:-build}/tests/doc_ae.ini
common=(--set train.max_steps=120 --set train.threads=1 --set data.test_limit=1000 --set log.interval=1)
if [ $mpi -eq 1 ]; then
    two=(timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2 "$bin" "$ini")
else
    two=(timeout 300 "$bin" "$ini" --set distributed.devices=cpu:0,cpu:1) # an MPI=0 build: threads
fi

out=$("${two[@]}" "${common[@]}" --set checkpoint.dir="$tmp/ranks" 2>&1); rc=$?
ranks=$(sha <<<"$out")
first=$(grep -o 'step  *1/[0-9]* | loss [0-9.]*' <<<"$out" | grep -o '[0-9.]*$')
final=$(grep -o 'final test loss [0-9.]*' <<<"$out" | grep -o '[0-9.]*$')
[ $rc -eq 0 ] && [ -n "$ranks" ] && grep -q "^model autoencoder |" <<<"$out" && [ -n "$first" ] && [ -n "$final" ] &&
    awk -v a="$first" -v b="$final" 'BEGIN { exit !(b < 0.1 * a) }'
ok=$?
check "2 ranks train the doc's autoencoder: test mean squared error ${final:-?} after 120 steps, from ${first:-?}" $ok \
    "exit $rc: $(tail -5 <<<"$out")"

out=$(timeout 300 "$bin" "$ini" "${common[@]}" --set distributed.devices=cpu:0,cpu:1 --set checkpoint.dir="$tmp/dp" 2>&1)
rc=$?
[ $rc -eq 0 ] && [ -n "$ranks" ] && [ "$(sha <<<"$out")" = "$ranks" ]
check "DataParallel's 2 replicas end with the 2 ranks' weights" $? "exit $rc, $(sha <<<"$out") vs $ranks"
[ $failed -eq 0 ]
