#!/usr/bin/env bash
# extending.sh: the program of docs/extending.md (its own data source, schedule, optimizer and
# model, registered with dpt_register), built against libdpt.a and include/ only: its keys and
# names are the schema's, it trains to its [expect], and its names are validated like built-in
# ones. Prints one ok/FAIL line per case.
cd "$(dirname "$0")/.."
. tests/common.sh
bin=${BUILD:-build}/tests/extending
ini=${BUILD:-build}/tests/extending.ini

ref=$("$bin" --config-reference)
grep -qF '| `spiral_noise` | float in [0, 1] | `0.05` | spirals: jitter added to each point |' <<<"$ref" &&
    grep -qF '| `signsgd_beta` | float in [0, 0.9999] | `0.9` | signsgd: momentum' <<<"$ref" &&
    grep -qF '| `ln_width` | int in [2, 65536] | `64` | ln_mlp: hidden units |' <<<"$ref" &&
    grep -q 'a registered optimizer: `adamw|lion|sgd|signsgd`' <<<"$ref"
check "--config-reference lists the program's keys and names" $? "$(grep -E 'spiral|signsgd|ln_width|registered optimizer' <<<"$ref")"

out=$("$bin" "$ini" --set checkpoint.dir="$tmp/ck" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "pass  final_test_acc >= 90%" <<<"$out" && grep -q "samples/s" <<<"$out" &&
    grep -q "optim signsgd | lr 0.01 (none scaling) | schedule linear_decay" <<<"$out" &&
    grep -q "data spirals | train 2000 per rank of 2000 | test 500 | point (2), label () int target | 2 classes | loss cross_entropy" <<<"$out"
check "its own model, data, optimizer and schedule train to its [expect]" $? "exit $rc: $(tail -n 12 <<<"$out")"

out=$("$bin" "$ini" --set optim.name=signsdg 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "\[optim\] name = signsdg: not a registered optimizer" <<<"$out" && grep -q "signsgd" <<<"$out"
check "a misspelt registered name is refused, listing the program's own" $? "exit $rc: $out"

exit $((failed > 0))
