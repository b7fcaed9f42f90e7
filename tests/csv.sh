#!/usr/bin/env bash
# csv.sh: [data] source = csv through ./train. Fashion-MNIST's first 3,000 training and 700 test
# images written as CSV rows (the loader's normalised values, %.9g, the label last, a header of
# names) train the MLP to the same weights, bit for bit, and the same test loss as the IDX files
# they came from. A table of named classes (three Gaussian blobs, an id and a date column left
# out, the test rows held out of the one file) trains to the accuracy its separation allows, and
# --predict prints the classes by name, top-1 agreeing with the label as often as --eval says;
# --input rows without the label column get the same predictions. Under mpirun -np 2 the ranks
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
./train "$tmp/blobs.ini" > "$tmp/blobs.log" 2>&1 && grep -q "train 450 per rank of 450 | test 150 | x (4), label () int target | 3 classes" "$tmp/blobs.log"
check "named classes, two columns left out, 150 of 600 rows held out; >= 99% (blobs 6 sd apart)" $? "$(grep -E '^data|done|expect' "$tmp/blobs.log")"

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
