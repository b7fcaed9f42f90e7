#!/usr/bin/env bash
# csv.sh: [data] source = csv through ./train. Fashion-MNIST's first 3,000 training and 700 test
# images written as CSV rows (the loader's normalised values, %.9g, the label last, a header of
# names) train the MLP to the same weights, bit for bit, and the same test loss as the IDX files
# they came from; as images (csv_shape) the CNN's too. A table of named classes (three Gaussian blobs, an id and a date column left
# out, the test rows held out of the one file) trains to the accuracy its separation allows, and
# --predict prints the classes by name, top-1 agreeing with the label as often as --eval says;
# --input rows without the label column get the same predictions. A Titanic-shaped table (text,
# codes and missing cells) trains to within 4 points of its generating model's Bayes accuracy. Under mpirun -np 2 the ranks
# agree on the data and reach the same accuracy band. A missing file or a ragged row stops the run
# naming the file and line, exit 1 (as every data error).
cd "$(dirname "$0")/.."
. tests/common.sh

/usr/bin/python3 - "$tmp" <<'EOF'
import gzip, sys, numpy as np
tmp, d = sys.argv[1], '/usr/share/datasets/fashion-mnist/'
def idx(name, skip):
    with gzip.open(d + name) as f: return np.frombuffer(f.read()[skip:], dtype=np.uint8)
def write(images, labels, n, path):
    x = images.reshape(-1, 784)[:n].astype(np.float32)
    x = (x / np.float32(255) - np.float32(0.2860)) / np.float32(0.3530)  # the loader's float32 steps
    with open(path, 'w') as f:
        f.write(','.join('pixel%d' % i for i in range(784)) + ',label\n')
        for r in range(n): f.write(','.join('%.9g' % v for v in x[r]) + ',%d\n' % labels[r])
write(idx('train-images-idx3-ubyte.gz', 16), idx('train-labels-idx1-ubyte.gz', 8), 3000, tmp + '/fm_train.csv')
write(idx('t10k-images-idx3-ubyte.gz', 16), idx('t10k-labels-idx1-ubyte.gz', 8), 700, tmp + '/fm_test.csv')
# three blobs 6 standard deviations apart in 4 features; ids and dates are not features
rng = np.random.default_rng(3)
names = ['gamma', 'alpha', 'beta']
with open(tmp + '/blobs.csv', 'w') as f, open(tmp + '/blobs_x.csv', 'w') as g:
    f.write('id,date,f1,f2,f3,f4,kind\n'); g.write('id,date,f1,f2,f3,f4\n')
    for i in range(600):
        c = i % 3
        v = rng.normal(0, 1, 4) + 6.0 * np.eye(3, 4)[c] + 100.0  # an offset standardisation removes
        row = '%d,2026-12-%02d,%s' % (i, 1 + i % 28, ','.join('%.6f' % t for t in v))
        f.write(row + ',"%s"\n' % names[c]); g.write(row + '\n')
EOF
check "python writes the tables" $? ""

run=(--set train.epochs=1 --set train.threads=1 --set log.interval=1000 --set checkpoint.every_epochs=0)
./train configs/fmnist_mlp.ini "${run[@]}" --set data.train_limit=3000 --set data.test_limit=700 > "$tmp/idx.log" 2>&1
./train configs/fmnist_mlp.ini "${run[@]}" --set data.source=csv --set data.csv_train="$tmp/fm_train.csv" \
    --set data.csv_test="$tmp/fm_test.csv" --set data.csv_standardize=false > "$tmp/csv.log" 2>&1
a=$(sha < "$tmp/idx.log") b=$(sha < "$tmp/csv.log")
[ -n "$a" ] && [ "$a" = "$b" ] && grep -q "x (784), label () int target | 10 classes" "$tmp/csv.log"
check "Fashion-MNIST as CSV trains the same weights as its IDX files" $? "idx $a, csv $b; $(tail -2 "$tmp/csv.log")"
la=$(grep -o 'test loss [0-9.]* acc [0-9.]*%' "$tmp/idx.log") lb=$(grep -o 'test loss [0-9.]* acc [0-9.]*%' "$tmp/csv.log")
[ -n "$la" ] && [ "$la" = "$lb" ]
check "and the same test loss and accuracy" $? "idx '$la', csv '$lb'"

# the same rows as images (csv_shape = 1,28,28) train the CNN to the IDX run's weights too
cnn=(configs/fmnist_cnn.ini "${run[@]}" --set data.test_limit=700)
./train "${cnn[@]}" --set data.train_limit=3000 > "$tmp/cidx.log" 2>&1
./train "${cnn[@]}" --set data.source=csv --set data.csv_train="$tmp/fm_train.csv" --set data.csv_test="$tmp/fm_test.csv" \
    --set data.csv_standardize=false --set data.csv_shape=1,28,28 > "$tmp/ccsv.log" 2>&1
a=$(sha < "$tmp/cidx.log") b=$(sha < "$tmp/ccsv.log")
[ -n "$a" ] && [ "$a" = "$b" ] && grep -q "x (1x28x28), label () int target" "$tmp/ccsv.log"
check "with csv_shape = 1,28,28 the CNN trains the IDX run's weights" $? "idx $a, csv $b; $(tail -2 "$tmp/ccsv.log")"
# random erasing, mixup and cutmix: drawn from the batch's place in the order, applied on the
# batch's device, so the IDX images and the CSV's rows (two loader paths) change alike; and they
# do change (another hash than the plain run's)
mix=(--set data.mixup=0.4 --set data.cutmix=1 --set data.mixup_prob=0.9 --set data.random_erase=0.25)
./train "${cnn[@]}" --set data.train_limit=3000 "${mix[@]}" > "$tmp/midx.log" 2>&1
./train "${cnn[@]}" --set data.source=csv --set data.csv_train="$tmp/fm_train.csv" --set data.csv_test="$tmp/fm_test.csv" \
    --set data.csv_standardize=false --set data.csv_shape=1,28,28 "${mix[@]}" > "$tmp/mcsv.log" 2>&1
c=$(sha < "$tmp/midx.log") d=$(sha < "$tmp/mcsv.log")
[ -n "$c" ] && [ "$c" = "$d" ] && [ "$c" != "$a" ] && grep -q "augment | random erasing 0.25 (area 0.02-0.33, ratio 0.3-3.3) | mixup alpha 0.4 | cutmix alpha 1 (0.9 of the batches mixed, 0.5 of those by cutmix)" "$tmp/mcsv.log"
check "with random erasing, mixup and cutmix too (and not the plain run's weights)" $? "idx $c, csv $d, unmixed $a; $(tail -2 "$tmp/mcsv.log")"
./train configs/fmnist_mlp.ini "${run[@]}" --set data.source=csv --set data.csv_train="$tmp/fm_train.csv" \
    --set data.csv_test="$tmp/fm_test.csv" --set data.cutmix=1 > "$tmp/mflat.log" 2>&1
[ $? -eq 1 ] && grep -q "\[data\] cutmix pastes a box of one image into another, and this data's input (x) is not an image" "$tmp/mflat.log" &&
    grep -q "csv_shape" "$tmp/mflat.log"
check "cutmix of rows that are not images is refused" $? "$(cat "$tmp/mflat.log")"
./train configs/fmnist_mlp.ini "${run[@]}" --set data.source=csv --set data.csv_train="$tmp/fm_train.csv" \
    --set data.csv_test="$tmp/fm_test.csv" --set data.random_erase=0.1 > "$tmp/eflat.log" 2>&1
[ $? -eq 1 ] && grep -q "\[data\] random_erase sets a box of an image to 0, and this data's input (x) is not an image" "$tmp/eflat.log"
check "so is random erasing of them" $? "$(cat "$tmp/eflat.log")"
./train configs/fmnist_mlp.ini "${run[@]}" --set data.source=csv --set data.csv_train="$tmp/fm_train.csv" \
    --set data.csv_test="$tmp/fm_test.csv" --set data.mixup=0.4 > "$tmp/mflat.log" 2>&1
check "mixup of them trains" $? "$(tail -3 "$tmp/mflat.log")"
./train "${cnn[@]}" --set data.source=csv --set data.csv_train="$tmp/fm_train.csv" --set data.csv_test="$tmp/fm_test.csv" \
    > "$tmp/cflat.log" 2>&1
[ $? -eq 1 ] && grep -q "builds an image classifier; the data set csv train (3000 rows) has no images" "$tmp/cflat.log" &&
    grep -q "csv_shape" "$tmp/cflat.log"
check "without it the CNN is refused, pointing at csv_shape" $? "$(cat "$tmp/cflat.log")"
./train "${cnn[@]}" --set data.source=csv --set data.csv_train="$tmp/fm_train.csv" --set data.csv_test="$tmp/fm_test.csv" \
    --set data.csv_shape=1,28,27 > "$tmp/cbad.log" 2>&1
[ $? -eq 1 ] && grep -q "csv_shape = 1,28,27 holds 756 values, and the rows of $tmp/fm_train.csv have 784 features" "$tmp/cbad.log"
check "a csv_shape that does not hold the features is refused" $? "$(cat "$tmp/cbad.log")"
./train "${cnn[@]}" --set data.source=csv --set data.csv_train="$tmp/fm_train.csv" --set data.csv_test="$tmp/fm_test.csv" \
    --set data.csv_shape=1,28,28 --set data.hflip=true > "$tmp/caug.log" 2>&1
[ $? -eq 1 ] && grep -q "\[data\] hflip augments images, and \[data\] source = csv makes samples of fields" "$tmp/caug.log"
check "an image augmentation the source cannot apply is refused, not skipped" $? "$(cat "$tmp/caug.log")"
./train "${cnn[@]}" --set data.source=csv --set data.csv_train="$tmp/fm_train.csv" --set data.csv_test="$tmp/fm_test.csv" \
    --set data.csv_shape=1,28,28 --set data.mean=0.5 > "$tmp/cmean.log" 2>&1
[ $? -eq 1 ] && grep -q "\[data\] mean normalises image bytes" "$tmp/cmean.log" && grep -q "csv_standardize" "$tmp/cmean.log"
check "so is [data] mean away from its default (csv_standardize is the CSV's)" $? "$(cat "$tmp/cmean.log")"

cat > "$tmp/blobs.ini" <<EOF
[model]
name = mlp
hidden = 32
[data]
source = csv
csv_train = $tmp/blobs.csv
csv_target = kind
csv_exclude = id, date
csv_test_fraction = 0.25
[train]
epochs = 10
batch = 32
threads = 1
[optim]
name = adamw
lr = 0.01
[log]
interval = 1000
[checkpoint]
dir = $tmp/ck
final = true
[expect]
final_test_acc = >= 99%
EOF
./train "$tmp/blobs.ini" > "$tmp/blobs.log" 2>&1 && grep -q "train 450 per rank of 450 | test 150 | x (4), label () int target | 3 classes" "$tmp/blobs.log" &&
    grep "^3 classes: 0 alpha ([0-9]*), 1 beta ([0-9]*), 2 gamma ([0-9]*)$" "$tmp/blobs.log" | grep -o '[0-9]*)' | tr -d ')' |
    awk '{ s += $1 } END { exit s != 450 }' 
check "named classes (counted in the header), two columns left out, 150 of 600 rows held out; >= 99% (blobs 6 sd apart)" $? "$(grep -E '^data|done|expect' "$tmp/blobs.log")"

./train "$tmp/blobs.ini" --predict latest --out "$tmp/p.csv" > "$tmp/p.log" 2>&1 &&
    [ "$(head -1 "$tmp/p.csv")" = "index,label,top1,p1,top2,p2,top3,p3" ] && [ "$(wc -l < "$tmp/p.csv")" -eq 151 ] &&
    tail -n +2 "$tmp/p.csv" | cut -d, -f2 | sort -u | tr '\n' ' ' | grep -qx "alpha beta gamma "
check "--predict names the classes (label and top1 columns)" $? "$(head -3 "$tmp/p.csv"; tail -2 "$tmp/p.log")"
acc=$(./train "$tmp/blobs.ini" --eval latest 2>&1 | grep -o 'acc [0-9.]*%' | grep -o '[0-9.]*')
mine=$(tail -n +2 "$tmp/p.csv" | awk -F, '$2 == $3 {r++} END {printf "%.2f", 100 * r / NR}')
[ -n "$acc" ] && [ "$acc" = "$mine" ]
check "top-1 from the file equals --eval's accuracy" $? "--eval $acc%, the file $mine%"

./train "$tmp/blobs.ini" --predict latest --input "$tmp/blobs_x.csv" --out "$tmp/in.csv" > "$tmp/in.log" 2>&1 &&
    [ "$(wc -l < "$tmp/in.csv")" -eq 601 ] &&
    /usr/bin/python3 - "$tmp" <<'EOF'
import sys
tmp = sys.argv[1]
full = {}  # the training file's label of each row, by id (the input keeps the file's order)
for i, line in enumerate(open(tmp + '/blobs.csv').read().splitlines()[1:]):
    full[i] = line.rsplit(',', 1)[1].strip('"')
rows = open(tmp + '/in.csv').read().splitlines()[1:]
assert all(r.split(',')[1] == '' for r in rows), 'labels are empty'
right = sum(r.split(',')[2] == full[i] for i, r in enumerate(rows))
assert right >= 0.99 * len(rows), right
EOF
check "--input without the label column: 600 rows, empty labels, >= 99% named right" $? "$(tail -3 "$tmp/in.log")"

# Top-5 accuracy, a classifier of more than 10 classes: 26 overlapping blobs (named a-z) in 6
# features. The epoch and eval lines print it; --predict's top-5 columns hold the label in as
# many rows as --eval's top-5 says; --expect reads it; 2 ranks evaluating halves each get the
# one process's number; the 3 blobs above print none.
/usr/bin/python3 - "$tmp" <<'EOF2'
import sys, numpy as np
tmp, rng = sys.argv[1], np.random.default_rng(26)
centers = rng.normal(0, 1.2, (26, 6))
with open(tmp + '/letters.csv', 'w') as f:
    f.write('f1,f2,f3,f4,f5,f6,letter\n')
    for i in range(2600):
        c = i % 26
        f.write(','.join('%.5f' % v for v in centers[c] + rng.normal(0, 1, 6)) + ',%s\n' % chr(97 + c))
EOF2
letters=(--set data.csv_train="$tmp/letters.csv" --set data.csv_target=letter --set data.csv_exclude= --set train.epochs=3
    --set expect.final_test_acc= --set checkpoint.dir="$tmp/ck8")
./train "$tmp/blobs.ini" "${letters[@]}" --expect "final_test_top5 >= 50%" --set log.metrics="$tmp/let.jsonl" \
    > "$tmp/let.log" 2>&1 &&
    grep -q "^epoch 3 done .* test loss [0-9.]* acc [0-9.]*% top-5 [0-9.]*% (650 samples)" "$tmp/let.log" &&
    [ "$(grep -o '"test_top5":[0-9.]*' "$tmp/let.jsonl" | tail -1 | awk -F: '{printf "%.2f", 100 * $2}')" = \
        "$(grep -o 'final test acc [0-9.]*% top-5 [0-9.]*' "$tmp/let.log" | awk '{print $NF}')" ] &&
    grep -q "final test acc [0-9.]*% top-5 [0-9.]*% |" "$tmp/let.log" && ! grep -q "top-5" "$tmp/blobs.log"
check "26 classes: top-5 accuracy on the epoch and done lines and in the metrics, --expect final_test_top5; 3 classes: none" $? \
    "$(grep -E '^epoch|^done|expect|pass|FAIL|rror' "$tmp/let.log")"
t5=$(./train "$tmp/blobs.ini" "${letters[@]}" --eval latest 2>&1 | grep -o 'top-5 [0-9.]*%' | sed 's/^top-5 //; s/%$//')
./train "$tmp/blobs.ini" "${letters[@]}" --predict latest --top-k 5 --out "$tmp/let.csv" > /dev/null 2>&1
mine=$(tail -n +2 "$tmp/let.csv" | awk -F, '$2 == $3 || $2 == $5 || $2 == $7 || $2 == $9 || $2 == $11 {r++} END {printf "%.2f", 100 * r / NR}')
[ -n "$t5" ] && [ "$t5" = "$mine" ] && awk -v a="$t5" 'BEGIN { exit !(a > 50 && a < 100) }'
check "--eval's top-5 equals the share of --predict rows with the label in its 5 columns" $? "--eval $t5%, the file $mine%"
# --per-class: scikit-learn's classification_report, recomputed here from --predict's label and top1
./train "$tmp/blobs.ini" "${letters[@]}" --eval latest --per-class 2>&1 | grep '^per class' > "$tmp/pc.txt"
/usr/bin/python3 - "$tmp" <<'EOF2'
import sys
tmp = sys.argv[1]
rows = [r.split(',') for r in open(tmp + '/let.csv').read().splitlines()[1:]]
names = [chr(97 + c) for c in range(26)]
want = []
for c, n in enumerate(names):
    tp = sum(r[1] == n and r[2] == n for r in rows)  # index,label,top1,p1,...
    pred, sup = sum(r[2] == n for r in rows), sum(r[1] == n for r in rows)
    p, rc = (tp / pred if pred else 0), (tp / sup if sup else 0)
    want.append((p, rc, 2 * p * rc / (p + rc) if p + rc else 0, sup))
total = sum(w[3] for w in want)
macro = [sum(w[m] for w in want) / 26 for m in range(3)]
weighted = [sum(w[m] * w[3] for w in want) / total for m in range(3)]
lines = open(tmp + '/pc.txt').read().splitlines()
assert len(lines) == 29 and lines[0].split()[3:] == ['class', 'precision', 'recall', 'f1', 'support'], lines[:2]
for c, line in enumerate(lines[1:27]):
    f = line.split()
    assert f[3:5] == [str(c), names[c]], f
    assert all(abs(float(f[5 + m]) - want[c][m]) <= 6e-5 for m in range(3)) and int(f[8]) == want[c][3], (f, want[c])
for line, avg in ((lines[27], macro), (lines[28], weighted)):
    f = line.split()
    assert all(abs(float(f[5 + m]) - avg[m]) <= 6e-5 for m in range(3)) and int(f[8]) == total, (f, avg)
EOF2
check "--eval --per-class: each class's precision, recall, F1, support and their averages, as recomputed from --predict" $? \
    "$(head -3 "$tmp/pc.txt"; tail -2 "$tmp/pc.txt")"
if [ "$mpi" = 1 ]; then
    mpirun --oversubscribe --allow-run-as-root -np 2 ./train "$tmp/blobs.ini" "${letters[@]}" --eval latest --per-class \
        > "$tmp/pc2.log" 2>&1
    t52=$(grep -o 'top-5 [0-9.]*%' "$tmp/pc2.log" | sed 's/^top-5 //; s/%$//')
    [ -n "$t52" ] && [ "$t52" = "$t5" ] && grep '^per class' "$tmp/pc2.log" | cmp -s - "$tmp/pc.txt"
    check "--eval on 2 ranks (half the test rows each): the same top-5 and per-class table" $? "2 ranks $t52%, 1 process $t5%"
fi

# A Titanic-shaped table: names, tickets and cabins (ids: left out), sex and port as text
# (one-hot), class as codes (listed), ages and ports partly missing (csv_missing = mean), survival
# drawn from a known logistic model. The MLP's test accuracy must come within 4 points of the
# model's own (the Bayes rule on the same test rows, computed here).
/usr/bin/python3 - "$tmp" > "$tmp/bayes" <<'EOF2'
import sys, math, numpy as np
tmp, rng = sys.argv[1], np.random.default_rng(11)
def table(path, n, start):
    right = 0
    with open(path, 'w') as f:
        f.write('PassengerId,Survived,Pclass,Name,Sex,Age,SibSp,Fare,Ticket,Cabin,Embarked\n')
        for i in range(n):
            pclass, female = rng.integers(1, 4), rng.random() < 0.35
            age = rng.uniform(1, 70); sib = rng.integers(0, 4)
            fare = {1: 80.0, 2: 25.0, 3: 9.0}[pclass] * rng.uniform(0.6, 1.6)
            port = rng.choice(['S', 'C', 'Q'], p=[0.7, 0.2, 0.1])
            z = -1.2 + 2.6 * female + {1: 1.1, 2: 0.2, 3: -0.9}[pclass] + (1.3 if age < 12 else 0) - 0.3 * sib + (0.4 if port == 'C' else 0)
            p = 1 / (1 + math.exp(-z)); y = int(rng.random() < p); right += (p > 0.5) == y
            f.write('%d,%d,%d,"Surname%d, Mr. %s",%s,%s,%d,%.2f,T%d,%s,%s\n' % (start + i, y, pclass, start + i, 'Xyz'[i % 3],
                    'female' if female else 'male', '' if rng.random() < 0.2 else '%.0f' % age, sib, fare, 9000 + start + i,
                    'C%d' % i if rng.random() < 0.2 else '', '' if rng.random() < 0.01 else port))
    return right / n
table(tmp + '/titanic_train.csv', 1500, 1)
print('%.2f' % (100 * table(tmp + '/titanic_test.csv', 500, 2001)))
EOF2
bayes=$(cat "$tmp/bayes")
./train "$tmp/blobs.ini" --set data.csv_train="$tmp/titanic_train.csv" --set data.csv_test="$tmp/titanic_test.csv" \
    --set data.csv_target=Survived --set data.csv_exclude=PassengerId,Name,Ticket,Cabin --set data.csv_categorical=Pclass,Sex,Embarked \
    --set data.csv_missing=mean --set train.epochs=30 --set optim.lr=0.003 --set expect.final_test_acc= \
    --set checkpoint.dir="$tmp/ck5" --set checkpoint.final=false > "$tmp/titanic.log" 2>&1
acc=$(grep -o 'final test acc [0-9.]*' "$tmp/titanic.log" | grep -o '[0-9.]*$')
grep -q "data csv train (1500 rows, 3 one-hot columns) | train 1500 per rank of 1500 | test 500 | x (11)" "$tmp/titanic.log" &&
    [ -n "$acc" ] && [ -n "$bayes" ] && awk -v a="$acc" -v b="$bayes" 'BEGIN { exit !(a >= b - 4) }'
check "a Titanic-shaped table: 3 one-hot columns, missing ages imputed; test accuracy $acc% against the Bayes rule's $bayes%" $? \
    "$(grep -E '^data|done \||rror|HINT' "$tmp/titanic.log")"
./train "$tmp/blobs.ini" --set data.csv_train="$tmp/titanic_train.csv" --set data.csv_test="$tmp/titanic_test.csv" \
    --set data.csv_target=Survived --set data.csv_exclude=PassengerId,Ticket,Cabin --set data.csv_missing=mean \
    --set checkpoint.dir="$tmp/ck5" > "$tmp/t2.log" 2>&1
[ $? -eq 1 ] && grep -q "column 3 ('Name') holds text with 1500 distinct values in 1500 rows" "$tmp/t2.log"
check "its names column, not left out, is refused as an id" $? "$(cat "$tmp/t2.log")"

# Regression: two targets named in the header (semicolon-delimited, decimal points), y = linear
# maps of 3 features plus noise of standard deviation 0.1: the test mean squared error must come
# within 1.5x of the noise's variance (0.01), the best any model can do.
/usr/bin/python3 - "$tmp" <<'EOF2'
import sys, numpy as np
tmp, rng = sys.argv[1], np.random.default_rng(5)
for name, n in (('reg_train.csv', 2000), ('reg_test.csv', 500)):
    x = rng.uniform(-2, 2, (n, 3)) * [1, 10, 100] + [0, 50, -300]
    y1 = 0.8 * x[:, 0] - 0.05 * x[:, 1] + 0.004 * x[:, 2] + rng.normal(0, 0.1, n)
    y2 = -0.5 * x[:, 0] + 0.02 * x[:, 1] + rng.normal(0, 0.1, n)
    with open(tmp + '/' + name, 'w') as f:
        f.write('a;b;c;y1;y2\n')
        for r in range(n): f.write('%.6f;%.6f;%.6f;%.6f;%.6f\n' % (*x[r], y1[r], y2[r]))
EOF2
./train configs/regression_mlp.ini --set data.source=csv --set data.csv_train="$tmp/reg_train.csv" \
    --set data.csv_test="$tmp/reg_test.csv" --set data.csv_task=regression --set data.csv_target=y1,y2 \
    --set train.epochs=20 --set train.threads=1 --set expect.final_test_loss="<= 0.015" --set checkpoint.dir="$tmp/ck6" --set checkpoint.final=true \
    > "$tmp/reg.log" 2>&1 && grep -q "x (3), y (2) target | loss mse" "$tmp/reg.log"
check "regression from CSV: 2 named targets, test mse <= 1.5x the noise's variance (0.01)" $? "$(grep -E '^data|done \||expect|pass|FAIL|rror' "$tmp/reg.log")"
# --predict names the columns after the targets; --input rows without them leave their cells empty
# and get the same predictions as the rows with them (the file's mse recomputed equals --eval's)
cut -d';' -f1-3 "$tmp/reg_test.csv" > "$tmp/reg_x.csv"
reg=(configs/regression_mlp.ini --set data.source=csv --set data.csv_train="$tmp/reg_train.csv"
    --set data.csv_test="$tmp/reg_test.csv" --set data.csv_task=regression --set data.csv_target=y1,y2
    --set checkpoint.dir="$tmp/ck6")
./train "${reg[@]}" --predict latest --out "$tmp/rp.csv" > "$tmp/rp.log" 2>&1 &&
    ./train "${reg[@]}" --predict latest --input "$tmp/reg_x.csv" --out "$tmp/ri.csv" > "$tmp/ri.log" 2>&1 &&
    ev=$(./train "${reg[@]}" --eval latest 2>&1 | grep -o 'test loss [0-9.]*' | grep -o '[0-9.]*$') &&
    /usr/bin/python3 - "$tmp" "$ev" <<'EOF2'
import sys
tmp, ev = sys.argv[1], float(sys.argv[2])
p, i = [open(tmp + f).read().splitlines() for f in ('/rp.csv', '/ri.csv')]
assert p[0] == 'index,y1,y2,predicted_y1,predicted_y2', p[0]
assert i[0] == p[0] and len(i) == len(p) == 501, (i[0], len(i))
se = 0.0
for a, b in zip(p[1:], i[1:]):
    a, b = a.split(','), b.split(',')
    assert b[1] == b[2] == '' and a[3:] == b[3:], (a, b)
    se += (float(a[1]) - float(a[3])) ** 2 + (float(a[2]) - float(a[4])) ** 2
mse = se / 1000  # the mean over every value, as the loss
assert abs(mse - ev) <= 1e-4 + 1e-3 * ev, (mse, ev)
EOF2
check "regression --predict: columns y1,y2,predicted_y1,predicted_y2; --input: empty targets, the same values" $? \
    "$(head -2 "$tmp/rp.csv"; head -2 "$tmp/ri.csv"; tail -2 "$tmp/ri.log")"

./train "${reg[@]}" --eval latest --per-class > "$tmp/rpc.log" 2>&1
rc=$?
./train "${reg[@]}" --per-class > "$tmp/rpc2.log" 2>&1
rc2=$?
[ $rc -eq 1 ] && grep -q "per-class reports a classifier's classes, and the data set csv test (500 rows) has none" "$tmp/rpc.log" &&
    [ $rc2 -eq 2 ] && grep -q "it goes with --eval" "$tmp/rpc2.log"
check "--per-class of a regression: refused, exit 1; without --eval: exit 2" $? "rc $rc: $(cat "$tmp/rpc.log"); rc $rc2: $(cat "$tmp/rpc2.log")"

# Multi-label: 3 labels (columns of 0/1, one of True/False as pandas 2 writes them), each drawn
# from a logistic model of 5 features. The fraction of labels right must come within 3 points of
# the generating models' own (the Bayes rule on the test rows, computed here); --predict writes
# each label's probability by name, and its thresholded values agree with --eval's accuracy.
/usr/bin/python3 - "$tmp" > "$tmp/mlbayes" <<'EOF2'
import sys, numpy as np
tmp, rng = sys.argv[1], np.random.default_rng(8)
w = rng.normal(0, 1.5, (5, 3)); b = np.array([-1.0, 0.5, 0.0])
def table(path, n):
    x = rng.normal(0, 1, (n, 5)); z = x @ w + b
    y = rng.random((n, 3)) < 1 / (1 + np.exp(-z))
    with open(path, 'w') as f:
        f.write('f1,f2,f3,f4,f5,comedy,drama,horror\n')
        for r in range(n):
            f.write(','.join('%.5f' % v for v in x[r]) + ',%d,%s,%d\n' % (y[r, 0], 'True' if y[r, 1] else 'False', y[r, 2]))
    return ((z > 0) == y).mean()
table(tmp + '/ml_train.csv', 3000)
print('%.2f' % (100 * table(tmp + '/ml_test.csv', 1000)))
EOF2
mlb=$(cat "$tmp/mlbayes")
ml=(configs/regression_mlp.ini --set data.source=csv --set data.csv_train="$tmp/ml_train.csv"
    --set data.csv_test="$tmp/ml_test.csv" --set data.csv_task=multilabel --set data.csv_target=comedy,drama,horror
    --set model.hidden=32 --set train.threads=1 --set expect.final_test_loss= --set checkpoint.dir="$tmp/ck7")
./train "${ml[@]}" --set train.epochs=10 --set checkpoint.final=true > "$tmp/ml.log" 2>&1
acc=$(grep -o 'final test acc [0-9.]*' "$tmp/ml.log" | grep -o '[0-9.]*$')
grep -q "x (5), y (3) target | loss bce_with_logits" "$tmp/ml.log" &&
    grep -q "^3 labels (samples with each): 0 comedy ([0-9]*), 1 drama ([0-9]*), 2 horror ([0-9]*)$" "$tmp/ml.log" &&
    [ -n "$acc" ] && [ -n "$mlb" ] && awk -v a="$acc" -v b="$mlb" 'BEGIN { exit !(a >= b - 3 && a <= b + 3) }'
check "multi-label: 3 labels counted in the header; labels right $acc% against the Bayes rule's $mlb%" $? \
    "$(grep -E '^data|labels|done \||rror|HINT' "$tmp/ml.log")"
./train "${ml[@]}" --predict latest --out "$tmp/mp.csv" > "$tmp/mp.log" 2>&1 &&
    ev=$(./train "${ml[@]}" --eval latest 2>&1 | grep -o 'acc [0-9.]*%' | grep -o '[0-9.]*') &&
    /usr/bin/python3 - "$tmp" "$ev" <<'EOF2'
import sys
tmp, ev = sys.argv[1], float(sys.argv[2])
rows = open(tmp + '/mp.csv').read().splitlines()
assert rows[0] == 'index,comedy,drama,horror,p_comedy,p_drama,p_horror', rows[0]
right = 0
for r in rows[1:]:
    v = [float(c) for c in r.split(',')]
    assert all(0 < p < 1 for p in v[4:]), r
    right += sum((p > 0.5) == (t > 0.5) for t, p in zip(v[1:4], v[4:]))
mine = 100 * right / (3 * (len(rows) - 1))
assert len(rows) == 1001 and abs(mine - ev) < 0.006, (len(rows), mine, ev)
EOF2
check "multi-label --predict: p_<label> columns; thresholded at 0.5 they agree with --eval's accuracy" $? \
    "$(head -2 "$tmp/mp.csv"; tail -2 "$tmp/mp.log")"
sed '3s/,True,/,2,/' "$tmp/ml_train.csv" > "$tmp/ml_bad.csv"
sed -i '3s/,False,/,2,/' "$tmp/ml_bad.csv"
./train "${ml[@]}" --set data.csv_train="$tmp/ml_bad.csv" > "$tmp/mb.log" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "ml_bad.csv: line 3, column 6 ('drama'): the label '2' is not 0 or 1" "$tmp/mb.log" && grep -q HINT "$tmp/mb.log"
check "a multi-label cell that is not 0 or 1: file, line, column, exit 1" $? "rc $rc: $(cat "$tmp/mb.log")"

# a resume on a changed table says so (the rows' hash is in the checkpoint)
./train "$tmp/blobs.ini" --set train.epochs=2 --set checkpoint.every_epochs=1 --set checkpoint.dir="$tmp/ck4" \
    > "$tmp/r1.log" 2>&1
sed -i '2s/^0,/0,/; 2s/,gamma/,gamma/; 2s/2026-12-01/2026-12-02/' "$tmp/blobs.csv"
./train "$tmp/blobs.ini" --set train.epochs=3 --set checkpoint.every_epochs=1 --set checkpoint.dir="$tmp/ck4" \
    --resume latest > "$tmp/r2.log" 2>&1 && grep -q "was written on other data than csv train (450 rows) holds now (hash [0-9a-f]*, now [0-9a-f]*: its content changed)" "$tmp/r2.log"
check "a resume on an edited table warns that its content changed" $? "$(grep -i warn "$tmp/r2.log"; tail -2 "$tmp/r2.log")"

if [ "$mpi" = 1 ]; then
    mpirun --oversubscribe --allow-run-as-root -np 2 ./train "$tmp/blobs.ini" --set checkpoint.dir="$tmp/ck2" \
        > "$tmp/mpi.log" 2>&1 && grep -q "2 ranks" "$tmp/mpi.log"
    check "mpirun -np 2: the ranks agree on the table, >= 99%" $? "$(tail -4 "$tmp/mpi.log")"
else
    echo "skipped mpirun -np 2 (no MPI build)"
fi

./train "$tmp/blobs.ini" --set data.csv_train=nosuch.csv --set checkpoint.dir="$tmp/ck3" > "$tmp/e1.log" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "cannot open CSV file nosuch.csv" "$tmp/e1.log" && grep -q HINT "$tmp/e1.log"
check "a missing file: named, with a HINT, exit 1" $? "rc $rc: $(cat "$tmp/e1.log")"
printf 'a,b,kind\n1,2,x\n3,4\n' > "$tmp/ragged.csv"
./train "$tmp/blobs.ini" --set data.csv_train="$tmp/ragged.csv" --set data.csv_exclude= --set checkpoint.dir="$tmp/ck3" > "$tmp/e2.log" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "ragged.csv: line 3 has 2 cells, and line 1 has 3" "$tmp/e2.log"
check "a ragged row: file and line, exit 1" $? "rc $rc: $(cat "$tmp/e2.log")"
exit $((failed > 0))
