#!/usr/bin/env bash
# finetune.sh: fine-tuning (issue 28 item 10). [model] init loads another run's checkpoint by
# name (init_exclude leaves a new head at the model's initialisation; other differences in
# names or shapes are refused naming the tensors); [optim] freeze keeps parameters bit-for-bit
# fixed through training; [optim] groups scale a group's learning rate: after one SGD step
# (no momentum, no decay) a group at lr x2 moved exactly twice as far as without groups, the
# rest the same. Weights are read back from the checkpoints with NumPy (--export npz).
# One ok/FAIL line per case.
cd "$(dirname "$0")/.."
. tests/common.sh

py=/usr/bin/python3
if ! $py -c 'import numpy' 2>/dev/null; then echo "skipped: no numpy for $py"; exit 0; fi
base=(configs/fmnist_cnn.ini --set train.threads=2 --set data.train_limit=1280 --set data.test_limit=500
      --set train.epochs=1 --set log.interval=1000 --set checkpoint.final=true)
npz() { ./train --export npz "$1" "$2" >/dev/null 2>&1; }

# the pretrained run
./train "${base[@]}" --set checkpoint.dir="$tmp/pre" > "$tmp/pre.log" 2>&1 && npz "$tmp/pre/latest" "$tmp/pre.npz"

# loaded: with the learning rate at 0 every parameter but the new head (fc2.*, left at the
# model's initialisation) is the pretrained run's, bit for bit
out=$(./train "${base[@]}" --set checkpoint.dir="$tmp/ld" --set model.init="$tmp/pre/latest" --set model.init_exclude='fc2.*' \
      --set optim.name=sgd --set optim.lr=0 --set train.max_steps=1 2>&1); rc=$?
npz "$tmp/ld/latest" "$tmp/ld.npz"
res=$($py - "$tmp/pre.npz" "$tmp/ld.npz" <<'PY'
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
params = [k for k in a.files if "running" not in k]  # batch norm's statistics move in any training step
same = [k for k in params if not k.startswith("fc2")]
ok = all(np.array_equal(a[k], b[k]) for k in same) and not np.array_equal(a["fc2.weight"], b["fc2.weight"])
print("ok" if ok else "differ: " + ", ".join(k for k in same if not np.array_equal(a[k], b[k])))
PY
)
[ $rc -eq 0 ] && [ "$res" = ok ] &&
    grep -q "^init from $tmp/pre/ckpt-step00000020.dpt: 12 tensors loaded, 2 at the model's initialisation" <<<"$out"
check "init + init_exclude fc2.*: every other parameter the pretrained run's, a new head" $? "exit $rc, $res: $(grep -m2 'init\|error' <<<"$out")"

# frozen: convolutions and batch norms bit-identical after a fine-tuning epoch, fc1 trained on
out=$(./train "${base[@]}" --set checkpoint.dir="$tmp/ft" --set model.init="$tmp/pre/latest" \
      --set model.init_exclude='fc2.*' --set optim.freeze='conv*,bn*' 2>&1); rc=$?
npz "$tmp/ft/latest" "$tmp/ft.npz"
res=$($py - "$tmp/pre.npz" "$tmp/ft.npz" <<'PY'
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
frozen = [k for k in a.files if k.startswith(("conv", "bn")) and "running" not in k]
same = all(np.array_equal(a[k], b[k]) for k in frozen)
moved = not np.array_equal(a["fc1.weight"], b["fc1.weight"])
print("ok" if len(frozen) == 6 and same and moved else f"frozen {frozen} same {same} moved {moved}")
PY
)
[ $rc -eq 0 ] && [ "$res" = ok ] && grep -q "^optim groups | group 0: .* | frozen: 6 tensors" <<<"$out"
check "freeze conv*,bn*: frozen tensors bit-identical after an epoch, fc1 trained" $? \
    "exit $rc, $res: $(grep -m3 'init\|groups\|error' <<<"$out")"

# what init refuses, naming it
out=$(./train "${base[@]}" --set checkpoint.dir="$tmp/x1" --set model.init="$tmp/pre/latest" --set model.fc=64 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "fc1.weight is \[128, 3136\] in the checkpoint and \[64, 3136\] in this model" <<<"$out" &&
    grep -q "HINT: \[model\] init_exclude = fc1.weight" <<<"$out"
check "init into another shape: refused naming the tensor and both shapes" $? "exit $rc: $(head -3 <<<"$out")"
out=$(./train configs/fmnist_mlp.ini --set train.threads=1 --set checkpoint.dir="$tmp/x2" --set model.init="$tmp/pre/latest" \
      --set model.init_exclude='fc*' 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "holds tensors this model (mlp) does not have: conv1.weight, bn1.weight" <<<"$out"
check "init of a CNN checkpoint into an MLP: refused naming the tensors" $? "exit $rc: $(head -3 <<<"$out")"
out=$(./train "${base[@]}" --set checkpoint.dir="$tmp/x3" --set optim.freeze='cnv*' 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "\[optim\] freeze: 'cnv\*' matches no parameter of cnn" <<<"$out"
check "a freeze glob that matches nothing: refused" $? "exit $rc: $(head -3 <<<"$out")"

# groups: one SGD step, fc3 at lr x2: its step is twice the plain run's (the same gradient at
# the same start; the start read from a run at lr 0), every other tensor bit-identical to the
# plain run's
one=(configs/fmnist_mlp.ini --set train.threads=1 --set optim.name=sgd --set optim.momentum=0
     --set train.max_steps=1 --set checkpoint.final=true --set data.train_limit=640 --set data.test_limit=100)
./train "${one[@]}" --set optim.lr=0 --set checkpoint.dir="$tmp/g-" > /dev/null 2>&1
./train "${one[@]}" --set optim.lr=0.05 --set checkpoint.dir="$tmp/g0" > /dev/null 2>&1
out=$(./train "${one[@]}" --set optim.lr=0.05 --set checkpoint.dir="$tmp/g1" --set optim.groups='fc3.*:2' 2>&1); rc=$?
npz "$tmp/g-/latest" "$tmp/gs.npz"; npz "$tmp/g0/latest" "$tmp/g0.npz"; npz "$tmp/g1/latest" "$tmp/g1.npz"
res=$($py - "$tmp/gs.npz" "$tmp/g0.npz" "$tmp/g1.npz" <<'PY'
import sys, numpy as np
w0, a, b = (np.load(p) for p in sys.argv[1:4])
bad = []
for k in w0.files:
    if k.startswith("fc3"):
        da, db = a[k].astype(np.float64) - w0[k], b[k].astype(np.float64) - w0[k]
        # float32 rounding of w0 - lr g and w0 - 2 lr g: a few ulps of |w0|
        tol = 4 * np.finfo(np.float32).eps * (np.abs(w0[k]) + np.abs(b[k])) + 1e-12
        if not np.abs(db).max() > 0 or np.any(np.abs(db - 2 * da) > tol): bad.append(k)
    elif not np.array_equal(a[k], b[k]): bad.append(k)
print("ok" if not bad else "differ: " + ", ".join(bad))
PY
)
[ $rc -eq 0 ] && [ "$res" = ok ] && grep -q "^optim groups | group 0: lr 0.05 (x1) .* | group 1: lr 0.1 (x2) weight_decay 0.0001, 2 tensors (2570 parameters, from fc3.weight)" <<<"$out"
check "groups fc3.*:2: one SGD step moves fc3 exactly twice as far, the rest as without groups" $? "exit $rc, $res: $(grep -m2 'groups\|error' <<<"$out")"

[ $failed -eq 0 ]
