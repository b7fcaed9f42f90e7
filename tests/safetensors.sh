#!/usr/bin/env bash
# safetensors.sh: weights another program wrote, in Hugging Face's safetensors format (PyTorch's
# state_dict names), read by --eval, --predict, --inspect, --export and [model] init. NumPy writes
# the Fashion-MNIST CNN's weights as PyTorch names them, in four dtypes (F32, F16, BF16, F64), with
# PyTorch's int64 num_batches_tracked and a __metadata__ entry, and computes the network's forward
# pass in float64 from its own definition (3x3 convolutions, batch norm from the running
# statistics, ReLU, 2x2 max pooling, linear layers with (out, in) weights): --predict's
# probabilities of 300 test images and --eval's loss equal it; --export npz gives the file's
# values as float32 and --inspect their SHA-256 by the digest's definition; [model] init loads all
# but the excluded head. Then damaged and hostile files, each refused naming the file and what
# is wrong (exit 1), never a crash.
cd "$(dirname "$0")/.."
. tests/common.sh
py=/usr/bin/python3
dir=$(./train configs/fmnist_cnn.ini --dry-run 2>/dev/null | awk -F' = ' '$1 == "dir" {print $2; exit}')
out=$($py - "$tmp" "$dir" <<'PY' 2>&1
import gzip, json, struct, sys
import numpy as np
tmp, data = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(7)
f32 = lambda *s, scale=1.0: (rng.standard_normal(s) * scale).astype(np.float32)
w = {  # the config's cnn (channels 32,64, fc 128) as PyTorch names its state_dict
    "conv1.weight": f32(32, 1, 3, 3, scale=0.6), "bn1.weight": rng.uniform(0.5, 1.5, 32).astype(np.float32),
    "bn1.bias": f32(32, scale=0.2), "bn1.running_mean": f32(32, scale=0.3),
    "bn1.running_var": rng.uniform(0.3, 2.0, 32), "bn1.num_batches_tracked": np.array(1000, np.int64),
    "conv2.weight": f32(64, 32, 3, 3, scale=0.12), "bn2.weight": rng.uniform(0.5, 1.5, 64).astype(np.float32),
    "bn2.bias": f32(64, scale=0.2), "bn2.running_mean": f32(64, scale=0.5),
    "bn2.running_var": rng.uniform(0.5, 3.0, 64).astype(np.float32), "bn2.num_batches_tracked": np.array(1000, np.int64),
    "fc1.weight": f32(128, 3136, scale=0.02), "fc1.bias": f32(128, scale=0.1),
    "fc2.weight": f32(10, 128, scale=0.08), "fc2.bias": f32(10, scale=0.1)}
dtype = {"conv1.weight": "F16", "fc2.weight": "BF16", "bn1.running_var": "F64"}
def as_file(name, a):  # (bytes, the float32 values dptrain must read)
    code = "I64" if a.dtype == np.int64 else dtype.get(name, "F32")
    if code == "F16":
        h = a.astype("<f2"); return code, h.tobytes(), h.astype(np.float32)
    if code == "BF16":  # round to nearest even on the upper 16 bits
        u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
        b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
        return code, b.tobytes(), (b.astype(np.uint32) << 16).view(np.float32)
    if code == "F64":
        return code, a.astype("<f8").tobytes(), a.astype(np.float64).astype(np.float32)
    if code == "I64":
        return code, a.astype("<i8").tobytes(), None
    return code, a.astype("<f4").tobytes(), a.astype(np.float32)
header, blobs, at, held = {"__metadata__": {"format": "pt"}}, [], 0, {}
for k, a in w.items():
    code, b, v = as_file(k, a)
    header[k] = {"dtype": code, "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
    blobs.append(b); at += len(b)
    if v is not None: held[k] = v.reshape(a.shape)
h = json.dumps(header).encode(); h += b" " * (-len(h) % 8)  # padded with spaces, as the format allows
open(f"{tmp}/cnn.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
np.savez(f"{tmp}/held.npz", **held)
# float64 forward of the first 300 test images, normalised as the config (mean 0.2860, std 0.3530)
x = np.frombuffer(gzip.open(f"{data}/t10k-images-idx3-ubyte.gz").read()[16:], np.uint8)[:300 * 784]
y = np.frombuffer(gzip.open(f"{data}/t10k-labels-idx1-ubyte.gz").read()[8:], np.uint8)[:300]
x = ((x.reshape(300, 1, 28, 28).astype(np.float64) / 255) - np.float32(0.2860)) / np.float32(0.3530)
W = {k: v.astype(np.float64) for k, v in held.items()}
def conv3x3(x, k):  # padding 1, stride 1, no bias
    p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    H, Wd = x.shape[2:]
    return sum(np.einsum("nchw,oc->nohw", p[:, :, i:i + H, j:j + Wd], k[:, :, i, j]) for i in range(3) for j in range(3))
def bn(x, n):
    s = lambda v: v[None, :, None, None]
    return (x - s(W[n + ".running_mean"])) / np.sqrt(s(W[n + ".running_var"]) + 1e-5) * s(W[n + ".weight"]) + s(W[n + ".bias"])
def pool(x):
    n, c, hh, ww = x.shape
    return x.reshape(n, c, hh // 2, 2, ww // 2, 2).max(axis=(3, 5))
h = pool(np.maximum(bn(conv3x3(x, W["conv1.weight"]), "bn1"), 0))
h = pool(np.maximum(bn(conv3x3(h, W["conv2.weight"]), "bn2"), 0))
h = np.maximum(h.reshape(300, -1) @ W["fc1.weight"].T + W["fc1.bias"], 0)
z = h @ W["fc2.weight"].T + W["fc2.bias"]
z -= z.max(axis=1, keepdims=True)
p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
np.save(f"{tmp}/p.npy", p)
loss = -np.log(p[np.arange(300), y]).mean()
open(f"{tmp}/loss", "w").write(f"{loss:.6f} {100 * (p.argmax(1) == y).mean():.2f}")
print(f"loss {loss:.4f}, accuracy {100 * (p.argmax(1) == y).mean():.2f}%, largest probability {p.max():.3f}")
PY
)
check "NumPy writes PyTorch-named CNN weights in F32/F16/BF16/F64 and their float64 forward ($out)" $? "$out"
cnn=(configs/fmnist_cnn.ini --set data.test_limit=300 --set train.threads=1)

same_probabilities() { # WANT.npy PREDICT.csv: --predict --top-k 0's rows hold WANT's probabilities
    $py - "$1" "$2" <<'PY' 2>&1
import sys
import numpy as np
want = np.load(sys.argv[1])
rows = [line.split(",") for line in open(sys.argv[2]).read().split("\n")[1:] if line]
got = np.zeros_like(want)
for r in rows:
    for j in range(2, len(r), 2):
        got[int(r[0]), int(r[j])] = float(r[j + 1])
err = np.abs(got - want).max()
# fp32 products and sums of at most 3,136 terms against float64, then 6 printed decimals: well
# under 1e-4; a layout mistake (a transposed kernel, running_var for running_mean, the flatten's
# order, q and k swapped) moves probabilities by tenths
assert len(rows) == len(want) and err < 1e-4, (len(rows), err)
print(f"{len(rows)} rows, {want.shape[1]} classes each, largest difference {err:.1e}")
PY
}

./train "${cnn[@]}" --predict "$tmp/cnn.safetensors" --top-k 0 --out "$tmp/p.csv" > "$tmp/pred.log" 2>&1
check "--predict FILE.safetensors" $? "$(tail -3 "$tmp/pred.log")"
out=$(same_probabilities "$tmp/p.npy" "$tmp/p.csv")
check "its probabilities are the float64 forward's ($out)" $? "$out"

read -r loss acc < "$tmp/loss"
line=$(./train "${cnn[@]}" --eval "$tmp/cnn.safetensors" 2>&1)
got=$(grep -o 'test loss [0-9.]*' <<<"$line" | grep -o '[0-9.]*$')
gacc=$(grep -o 'acc [0-9.]*%' <<<"$line" | grep -o '[0-9.]*')
awk -v a="$got" -v b="$loss" 'BEGIN { d = a - b; exit !(a != "" && d < 1e-4 && d > -1e-4) }' && [ "$gacc" = "$acc" ] &&
    grep -q "evaluating $tmp/cnn.safetensors: safetensors, 14 tensors by name; 2 integer tensors passed over (bn1.num_batches_tracked, bn2.num_batches_tracked)" <<<"$line"
check "--eval FILE.safetensors: loss and accuracy are the float64 forward's ($got against $loss, $gacc%)" $? "$line"

./train --export npz "$tmp/cnn.safetensors" "$tmp/x.npz" > "$tmp/x.log" 2>&1 && ./train --inspect "$tmp/cnn.safetensors" > "$tmp/inspect" 2>&1
check "--export npz and --inspect of a safetensors file" $? "$(cat "$tmp/x.log" "$tmp/inspect" | tail -3)"
out=$($py - "$tmp" "$(grep -o 'weights sha256 [0-9a-f]*' "$tmp/inspect" | grep -o '[0-9a-f]*$')" <<'PY' 2>&1
import hashlib, struct, sys
import numpy as np
tmp, want = sys.argv[1], sys.argv[2]
held, x = np.load(f"{tmp}/held.npz"), np.load(f"{tmp}/x.npz")
assert sorted(x.files) == sorted(held.files) and len(x.files) == 14, (x.files, held.files)
for k in held.files:  # the F16, BF16 and F64 values converted as NumPy converts them
    assert x[k].dtype == np.float32 and np.array_equal(x[k], held[k]), k
h = hashlib.sha256()
for k in x.files:  # the file's order; the digest: name, NUL, ndim (u32), dims (i64), float32 values
    a = x[k]
    h.update(k.encode() + b"\0" + struct.pack("<I", a.ndim) + struct.pack(f"<{a.ndim}q", *a.shape) + a.astype("<f4").tobytes())
assert h.hexdigest() == want, (h.hexdigest(), want)
print(f"14 tensors equal, sha256 {want[:16]}")
PY
)
check "the file's values, as float32, and --inspect's hash over them ($out)" $? "$out"
grep -q "^14 tensors, 421930 values; 2 integer tensors passed over" "$tmp/inspect"
check "--inspect counts the tensors and the integer ones passed over" $? "$(tail -3 "$tmp/inspect")"

# [model] init: all but the new head, which starts from the model's initialisation; with a zero
# learning rate the loaded parameters end as they began
./train "${cnn[@]}" --set model.init="$tmp/cnn.safetensors" --set model.init_exclude='fc2.*' --set optim.lr=0 \
    --set train.max_steps=2 --set data.train_limit=256 --set checkpoint.final=true --set checkpoint.dir="$tmp/ck" --set log.interval=1000 > "$tmp/init.log" 2>&1 &&
    ./train --export npz "$tmp/ck" "$tmp/ck.npz" > /dev/null 2>&1
ok=$?
grep -q "init from $tmp/cnn.safetensors: 12 tensors loaded, 2 at the model's initialisation, 0 of the file's skipped" "$tmp/init.log" || ok=1
out=$($py - "$tmp" <<'PY' 2>&1
import sys
import numpy as np
held, ck = np.load(f"{sys.argv[1]}/held.npz"), np.load(f"{sys.argv[1]}/ck.npz")
for k in ["conv1.weight", "bn1.weight", "bn1.bias", "conv2.weight", "bn2.weight", "bn2.bias", "fc1.weight", "fc1.bias"]:
    assert np.array_equal(ck[k], held[k]), k
assert ck["fc2.weight"].shape == (10, 128) and not np.array_equal(ck["fc2.weight"], held["fc2.weight"])
print("8 parameters the file's, fc2 the model's own")
PY
)
[ $? -eq 0 ] && [ $ok -eq 0 ]
check "[model] init = FILE.safetensors, init_exclude = fc2.* ($out)" $? "$(tail -3 "$tmp/init.log") $out"

# the model and the file disagree: named, with what to do
refused() { # NAME WANT ARGS...: exit 1, the message contains WANT
    local name=$1 want=$2
    shift 2
    local o rc
    o=$(./train "$@" 2>&1)
    rc=$?
    [ $rc -eq 1 ] && grep -qF -- "$want" <<<"$o"
    check "$name" $? "rc $rc: $(tail -2 <<<"$o")"
}
refused "another shape: named" "conv1.weight is [32, 1, 3, 3] in the file and [16, 1, 3, 3] in this model" \
    "${cnn[@]}" --set model.channels=16,64 --eval "$tmp/cnn.safetensors"
refused "another model: the first tensor of another shape named" "fc1.weight is [128, 3136] in the file and [256, 784] in this model" \
    configs/fmnist_mlp.ini --eval "$tmp/cnn.safetensors"
$py - "$tmp" <<'PY'
import json, struct, sys
tmp = sys.argv[1]
raw = open(f"{tmp}/cnn.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
def write(name, h, tail=b""):
    b = json.dumps(h).encode()
    open(f"{tmp}/{name}.safetensors", "wb").write(struct.pack("<Q", len(b)) + b + data + tail)
less = dict(header); del less["fc2.bias"]
write("less", less)
more = dict(header); more["extra.weight"] = {"dtype": "F32", "shape": [10], "data_offsets": [len(data), len(data) + 40]}
write("more", more, bytes(40))
PY
refused "a file without one of the model's tensors: named" "lacks tensors of this model (cnn): fc2.bias" \
    "${cnn[@]}" --eval "$tmp/less.safetensors"
refused "a file with a tensor the model lacks: named" "holds tensors this model (cnn) does not have: extra.weight" \
    "${cnn[@]}" --eval "$tmp/more.safetensors"
refused "[model] init of it: init_exclude offered" "init_exclude = GLOB skips the file's extra ones" \
    "${cnn[@]}" --set model.init="$tmp/more.safetensors" --dry-run
refused "--ema of a safetensors file" "is a safetensors file: it holds weights, not a run's weight averages" \
    "${cnn[@]}" --eval "$tmp/cnn.safetensors" --ema

# damaged and hostile files: each refused naming the file and the fault
$py - "$tmp" <<'PY'
import json, struct, sys
tmp = sys.argv[1]
def file(name, header, data=b"", raw=None):
    h = raw if raw is not None else json.dumps(header).encode()
    open(f"{tmp}/{name}.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + data)
f4 = lambda n: struct.pack(f"<{n}f", *([0.5] * n))
t = lambda dt, shape, b, e: {"dtype": dt, "shape": shape, "data_offsets": [b, e]}
file("past_end", {"a": t("F32", [4], 0, 16)}, f4(2))
file("span", {"a": t("F32", [4], 0, 12)}, f4(4))
file("overlap", {"a": t("F32", [2], 0, 8), "b": t("F32", [2], 4, 12)}, f4(3))
file("twice", None, f4(2), raw=b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}')
file("dtype", {"a": t("F128", [1], 0, 16)}, bytes(16))
file("fp8", {"a": t("F8_E4M3", [4], 0, 4)}, bytes(4))
file("nan", {"a": t("F32", [2], 0, 8)}, struct.pack("<2f", 1.0, float("nan")))
file("range", {"a": t("F64", [1], 0, 8)}, struct.pack("<d", 1e300))
file("control", None, f4(1), raw=b'{"a\\u0007b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}')
file("overflow", {"a": t("F32", [1 << 40, 1 << 40], 0, 4)}, f4(1))
file("json", None, f4(1), raw=b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}')
file("deep", None, b"", raw=b'{"__metadata__": ' + b"[" * 200 + b"]" * 200 + b"}")
file("no_offsets", {"a": {"dtype": "F32", "shape": [1]}}, f4(1))
open(f"{tmp}/short.safetensors", "wb").write(struct.pack("<Q", 1 << 20) + b"{}")
PY
for c in "past_end:run past the end of the file" "span:do not span its shape's bytes" "overlap:share bytes" \
         "twice:is described twice" "dtype:not one of safetensors' dtypes" "fp8:8-bit floats" \
         "nan:holds nan at element 1" "range:beyond float32's range" "control:control character" \
         "overflow:cannot hold it" "json:JSON header lacks a '}'" "deep:nests deeper than 64 levels" \
         "no_offsets:lacks its data_offsets" "short:does not fit the file"; do
    name=${c%%:*} want=${c#*:}
    o=$(./train --inspect "$tmp/$name.safetensors" 2>&1)
    rc=$?
    [ $rc -eq 1 ] && grep -qF -- "$tmp/$name.safetensors" <<<"$o" && grep -qF -- "$want" <<<"$o" && grep -q "^HINT: " <<<"$o"
    check "a hostile file ($name): refused, saying \"$want\"" $? "rc $rc: $o"
done
refused "[model] init of a damaged file: named" "$tmp/span.safetensors: tensor a (F32, shape [4])" \
    "${cnn[@]}" --set model.init="$tmp/span.safetensors" --dry-run

# [model] name = vit is torchvision's VisionTransformer, named as torchvision names it: NumPy
# writes a ViT (patch 7, hidden 32, 2 layers, 4 heads, MLP 64, 1 channel) under those names and
# computes its forward in float64 from torchvision's definition (a stride-7 patch convolution,
# the class token first, pos_embedding, pre-LN blocks with LayerNorm eps 1e-6, in_proj packing
# q, k and v, the exact GELU, the class token's row into heads.head); --predict's probabilities
# of 300 test images equal it.
out=$($py - "$tmp" "$dir" <<'PY' 2>&1
import gzip, json, math, struct, sys
import numpy as np
tmp, data = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(5)
P, D, L, H, M, S = 7, 32, 2, 4, 64, 17
r = lambda *s, scale=0.3: (rng.standard_normal(s) * scale).astype(np.float32)
w = {"class_token": r(1, 1, D, scale=0.5), "conv_proj.weight": r(D, 1, P, P, scale=0.3), "conv_proj.bias": r(D, scale=0.1),
     "encoder.pos_embedding": r(1, S, D, scale=0.3)}
for l in range(L):
    p = f"encoder.layers.encoder_layer_{l}."
    w.update({p + "ln_1.weight": 1 + r(D, scale=0.2), p + "ln_1.bias": r(D, scale=0.1),
              p + "self_attention.in_proj_weight": r(3 * D, D, scale=0.25), p + "self_attention.in_proj_bias": r(3 * D, scale=0.1),
              p + "self_attention.out_proj.weight": r(D, D, scale=0.2), p + "self_attention.out_proj.bias": r(D, scale=0.1),
              p + "ln_2.weight": 1 + r(D, scale=0.2), p + "ln_2.bias": r(D, scale=0.1),
              p + "mlp.0.weight": r(M, D, scale=0.2), p + "mlp.0.bias": r(M, scale=0.1),
              p + "mlp.3.weight": r(D, M, scale=0.15), p + "mlp.3.bias": r(D, scale=0.1)})
w.update({"encoder.ln.weight": 1 + r(D, scale=0.2), "encoder.ln.bias": r(D, scale=0.1),
          "heads.head.weight": r(10, D, scale=0.5), "heads.head.bias": r(10, scale=0.1)})
sys.path.insert(0, "tests")
import safetensors_io
safetensors_io.write(f"{tmp}/vit.safetensors", w)
W = {k: v.astype(np.float64) for k, v in w.items()}
x = np.frombuffer(gzip.open(f"{data}/t10k-images-idx3-ubyte.gz").read()[16:], np.uint8)[:300 * 784]
x = ((x.reshape(300, 28, 28).astype(np.float64) / 255) - np.float32(0.2860)) / np.float32(0.3530)
def ln(v, n):
    m = v.mean(-1, keepdims=True); var = ((v - m) ** 2).mean(-1, keepdims=True)
    return (v - m) / np.sqrt(var + 1e-6) * W[n + ".weight"] + W[n + ".bias"]
patches = x.reshape(300, 4, P, 4, P).transpose(0, 1, 3, 2, 4).reshape(300, 16, P * P)  # row-major over the grid
tok = patches @ W["conv_proj.weight"].reshape(D, P * P).T + W["conv_proj.bias"]
h = np.concatenate([np.broadcast_to(W["class_token"], (300, 1, D)), tok], 1) + W["encoder.pos_embedding"]
erf = np.vectorize(math.erf)
for l in range(L):
    p = f"encoder.layers.encoder_layer_{l}."
    qkv = ln(h, p + "ln_1") @ W[p + "self_attention.in_proj_weight"].T + W[p + "self_attention.in_proj_bias"]
    q, k, v = (qkv[..., i * D:(i + 1) * D].reshape(300, S, H, D // H).transpose(0, 2, 1, 3) for i in range(3))
    a = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D // H)
    a = np.exp(a - a.max(-1, keepdims=True)); a /= a.sum(-1, keepdims=True)
    y = (a @ v).transpose(0, 2, 1, 3).reshape(300, S, D)
    h = h + y @ W[p + "self_attention.out_proj.weight"].T + W[p + "self_attention.out_proj.bias"]
    m = ln(h, p + "ln_2") @ W[p + "mlp.0.weight"].T + W[p + "mlp.0.bias"]
    m = 0.5 * m * (1 + erf(m / math.sqrt(2)))
    h = h + m @ W[p + "mlp.3.weight"].T + W[p + "mlp.3.bias"]
z = ln(h, "encoder.ln")[:, 0] @ W["heads.head.weight"].T + W["heads.head.bias"]
z -= z.max(1, keepdims=True)
pr = np.exp(z) / np.exp(z).sum(1, keepdims=True)
np.save(f"{tmp}/vit_p.npy", pr)
print(f"largest probability {pr.max():.3f}, mean top-1 {pr.max(1).mean():.3f}")
PY
)
check "NumPy writes a torchvision ViT and its float64 forward ($out)" $? "$out"
vit=("${cnn[@]}" --set model.name=vit --set model.patch_size=7 --set model.hidden_dim=32 --set model.num_layers=2
     --set model.num_heads=4 --set model.mlp_dim=64)
./train "${vit[@]}" --predict "$tmp/vit.safetensors" --top-k 0 --out "$tmp/vit.csv" > "$tmp/vit.log" 2>&1
check "--predict of the ViT's file" $? "$(tail -3 "$tmp/vit.log")"
out=$(same_probabilities "$tmp/vit_p.npy" "$tmp/vit.csv")
check "vit is torchvision's ViT: its probabilities are the float64 forward's ($out)" $? "$out"
# the same weights under timm's names (DeiT's checkpoints, the hub's timm/vit_* files): the same rows
$py - "$tmp" <<'PY'
import json, re, struct, sys
tmp = sys.argv[1]
raw = open(f"{tmp}/vit.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
names = {"conv_proj.weight": "patch_embed.proj.weight", "conv_proj.bias": "patch_embed.proj.bias",
         "class_token": "cls_token", "encoder.pos_embedding": "pos_embed", "encoder.ln.weight": "norm.weight",
         "encoder.ln.bias": "norm.bias", "heads.head.weight": "head.weight", "heads.head.bias": "head.bias"}
def timm(k):
    if k in names: return names[k]
    k = re.sub(r"^encoder\.layers\.encoder_layer_(\d+)\.", r"blocks.\1.", k)
    for a, b in (("ln_1.", "norm1."), ("ln_2.", "norm2."), ("self_attention.in_proj_weight", "attn.qkv.weight"),
                 ("self_attention.in_proj_bias", "attn.qkv.bias"), ("self_attention.out_proj.", "attn.proj."),
                 ("mlp.0.", "mlp.fc1."), ("mlp.3.", "mlp.fc2.")):
        k = k.replace(a, b)
    return k
h = json.dumps({timm(k): v for k, v in header.items()}).encode()
open(f"{tmp}/vit_timm.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
PY
./train "${vit[@]}" --predict "$tmp/vit_timm.safetensors" --top-k 0 --out "$tmp/vit_timm.csv" > "$tmp/vit_timm.log" 2>&1 &&
    cmp -s "$tmp/vit.csv" "$tmp/vit_timm.csv"
check "vit reads timm's names for the same tensors: the same predictions" $? "$(tail -3 "$tmp/vit_timm.log")"
refused "a timm file of another width: named with this model's name" \
    "cls_token (this model's class_token) is [1, 1, 32] in the file and [1, 1, 64] in this model" \
    "${vit[@]}" --set model.hidden_dim=64 --eval "$tmp/vit_timm.safetensors"

# A ViT's weights for another image size: the position embeddings of a 3x3 and a 9x9 patch grid
# (21x21 and 63x63 images) resampled to this model's 4x4 as torchvision's interpolate_embeddings
# does (bicubic, A = -0.75, corners aligned, borders clamped; the class token's row kept),
# recomputed here in float64 from that definition; what a run at lr 0 holds equals it.
# (Against torchvision itself, on a machine with it: within 1.4e-6 for grids 2, 3, 8 and 9.)
for g in 3 9; do
    $py - "$tmp" "$g" <<'PY'
import math, sys
import numpy as np
sys.path.insert(0, "tests")
import safetensors_io
tmp, g = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(g)
import json, struct
blob = open(f"{tmp}/vit.safetensors", "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
head = json.loads(blob[8:8 + n])
w = {k: np.frombuffer(blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], "<f4").reshape(v["shape"])
     for k, v in head.items()}
pos = (rng.standard_normal((1, 1 + g * g, 32)) * 0.5).astype(np.float32)
w["encoder.pos_embedding"] = pos
safetensors_io.write(f"{tmp}/vit_g{g}.safetensors", w)
def weights(t):  # PyTorch's cubic convolution, A = -0.75
    A = -0.75
    c1 = lambda x: ((A + 2) * x - (A + 3)) * x * x + 1
    c2 = lambda x: ((A * x - 5 * A) * x + 8 * A) * x - 4 * A
    return [c2(t + 1), c1(t), c1(1 - t), c2(2 - t)]
grid = pos[0, 1:].astype(np.float64).reshape(g, g, 32)
out = np.zeros((4, 4, 32))
for oy in range(4):
    for ox in range(4):
        ry, rx = oy * (g - 1) / 3, ox * (g - 1) / 3
        iy, ix = math.floor(ry), math.floor(rx)
        wy, wx = weights(ry - iy), weights(rx - ix)
        for a in range(4):
            for b in range(4):
                y, x = min(max(iy - 1 + a, 0), g - 1), min(max(ix - 1 + b, 0), g - 1)
                out[oy, ox] += wy[a] * wx[b] * grid[y, x]
want = np.concatenate([pos[0, :1].astype(np.float64), out.reshape(16, 32)])[None]
np.save(f"{tmp}/pos_g{g}.npy", want)
PY
    ./train "${vit[@]}" --set model.init="$tmp/vit_g$g.safetensors" --set optim.lr=0 --set train.max_steps=1 \
        --set data.train_limit=256 --set checkpoint.final=true --set checkpoint.dir="$tmp/vck$g" --set log.interval=1000 \
        > "$tmp/vinit$g.log" 2>&1 && ./train --export npz "$tmp/vck$g" "$tmp/vck$g.npz" > /dev/null 2>&1
    ok=$?
    grep -q "init: encoder.pos_embedding resampled from a ${g}x${g} patch grid to 4x4" "$tmp/vinit$g.log" || ok=1
    out=$($py -c "
import numpy as np
a = np.load('$tmp/vck$g.npz')['encoder.pos_embedding']; b = np.load('$tmp/pos_g$g.npy')
e = np.abs(a - b).max(); assert a.shape == b.shape == (1, 17, 32) and e < 1e-5, e; print(f'largest difference {e:.1e}')" 2>&1)
    [ $? -eq 0 ] && [ $ok -eq 0 ]
    check "vit: a ${g}x${g} grid's position embeddings resampled to 4x4 as torchvision's interpolate_embeddings ($out)" $? "$(tail -2 "$tmp/vinit$g.log") $out"
done

# Hugging Face's GPT-2 (transformers' GPT2LMHeadModel state_dict): NumPy writes one as
# transformers names and lays it out (transformer. prefix, nn.Embedding's wte.weight with
# vocab_size rows, OpenAI's Conv1D weights (in, out), the causal masks attn.bias and
# attn.masked_bias, lm_head.weight tied to wte), and decodes greedily in float64 from that
# definition (x W + b, the tanh GELU); `--sample hf:FILE` draws the same tokens. A run from it
# at lr 0 holds its values (the four Conv1D weights transposed, wte's padding rows zero), and
# --export hf writes them back as they were, with a config.json transformers reads.
printf 'the quick brown fox jumps over the lazy dog. %.0s' $(seq 1 200) > "$tmp/text.txt"
build/tools/text_tokens --val-fraction 0.1 "$tmp/tok" "$tmp/text.txt" > /dev/null
gpt=(configs/gpt_fortunes.ini --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32
     --set "data.train=$tmp/tok/train_*.bin" --set "data.val=$tmp/tok/val_*.bin" --set data.seq_len=32
     --set data.vocab_size=300 --set train.batch=4 --set train.epochs=1 --set data.test_limit=8 --set log.interval=1000
     --set train.threads=1)
out=$($py - "$tmp" <<'PY' 2>&1
import json, struct, sys
import numpy as np
tmp = sys.argv[1]
rng = np.random.default_rng(11)
L, H, C, T, V = 2, 2, 32, 32, 300
r = lambda *s, scale=0.3: (rng.standard_normal(s) * scale).astype(np.float32)
w = {"transformer.wte.weight": r(V, C, scale=0.5), "transformer.wpe.weight": r(T, C, scale=0.2)}
for l in range(L):
    p = f"transformer.h.{l}."
    w.update({p + "ln_1.weight": (1 + r(C, scale=0.1)), p + "ln_1.bias": r(C, scale=0.1),
              p + "attn.bias": np.tril(np.ones((T, T), np.float32)).reshape(1, 1, T, T),
              p + "attn.masked_bias": np.array(-1e4, np.float32),
              p + "attn.c_attn.weight": r(C, 3 * C), p + "attn.c_attn.bias": r(3 * C, scale=0.1),
              p + "attn.c_proj.weight": r(C, C), p + "attn.c_proj.bias": r(C, scale=0.1),
              p + "ln_2.weight": (1 + r(C, scale=0.1)), p + "ln_2.bias": r(C, scale=0.1),
              p + "mlp.c_fc.weight": r(C, 4 * C), p + "mlp.c_fc.bias": r(4 * C, scale=0.1),
              p + "mlp.c_proj.weight": r(4 * C, C, scale=0.15), p + "mlp.c_proj.bias": r(C, scale=0.1)})
w["transformer.ln_f.weight"] = 1 + r(C, scale=0.1)
w["transformer.ln_f.bias"] = r(C, scale=0.1)
w["lm_head.weight"] = w["transformer.wte.weight"]
sys.path.insert(0, "tests")
import safetensors_io
safetensors_io.write(f"{tmp}/gpt2.safetensors", w)
np.savez(f"{tmp}/gpt2.npz", **w)
W = {k: v.astype(np.float64) for k, v in w.items()}
def ln(x, n):
    m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * W[n + ".weight"] + W[n + ".bias"]
def forward(ids):  # transformers' GPT2LMHeadModel, float64
    t = len(ids); hs = C // H
    x = W["transformer.wte.weight"][ids] + W["transformer.wpe.weight"][:t]
    for l in range(L):
        p = f"transformer.h.{l}."
        qkv = ln(x, p + "ln_1") @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(t, H, hs).transpose(1, 0, 2) for i in range(3))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hs) + np.triu(np.full((t, t), -np.inf), 1)
        a = np.exp(s - s.max(-1, keepdims=True)); a /= a.sum(-1, keepdims=True)
        y = (a @ v).transpose(1, 0, 2).reshape(t, C)
        x = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        m = ln(x, p + "ln_2") @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"]
        m = 0.5 * m * (1 + np.tanh(np.sqrt(2 / np.pi) * (m + 0.044715 * m ** 3)))
        x = x + m @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    return ln(x, "transformer.ln_f") @ W["transformer.wte.weight"].T
ids, margin = [116, 104, 101, 32], 1e9
for _ in range(24):
    z = np.sort(forward(ids)[-1]); nxt = int(np.argmax(forward(ids)[-1]))
    margin = min(margin, z[-1] - z[-2]); ids.append(nxt)
assert margin > 1e-3, margin  # fp32 against float64 cannot flip a choice this far apart
open(f"{tmp}/greedy", "w").write(" ".join(map(str, ids[4:])))
print(f"greedy margin {margin:.3f}")
PY
)
check "NumPy writes a Hugging Face GPT-2 and decodes it greedily in float64 ($out)" $? "$out"
got=$(./train "${gpt[@]}" --sample "hf:$tmp/gpt2.safetensors" --prompt "116 104 101 32" --tokens 24 --temperature 0 2> "$tmp/s.log" |
      tr -s ' \n' ' ' | sed 's/ $//')
want=$(cat "$tmp/greedy")
[ -n "$got" ] && [ "$got" = "$want" ] && grep -q "init from hf:$tmp/gpt2.safetensors (Hugging Face's files, read by model gpt)" "$tmp/s.log"
check "--sample hf:FILE draws the float64 greedy tokens" $? "got '$got', want '$want': $(tail -2 "$tmp/s.log")"

./train "${gpt[@]}" --set model.init="hf:$tmp/gpt2.safetensors" --set optim.lr=0 --set train.max_steps=1 \
    --set checkpoint.final=true --set checkpoint.dir="$tmp/gck" > "$tmp/ginit.log" 2>&1 &&
    ./train --export npz "$tmp/gck" "$tmp/gck.npz" > /dev/null 2>&1 &&
    ./train "${gpt[@]}" --export hf "$tmp/gck" "$tmp/hf_out" > "$tmp/gexp.log" 2>&1
ok=$?
grep -q "init from hf:$tmp/gpt2.safetensors (Hugging Face's files, read by model gpt)" "$tmp/ginit.log" || ok=1
out=$($py - "$tmp" <<'PY' 2>&1
import json, struct, sys
import numpy as np
tmp = sys.argv[1]
w, ck = np.load(f"{tmp}/gpt2.npz"), np.load(f"{tmp}/gck.npz")
conv = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
n = 0
for k in w.files:
    if k.endswith((".attn.bias", ".attn.masked_bias")) or k == "lm_head.weight": continue
    ours = k[len("transformer."):].replace("wte.weight", "wte").replace("wpe.weight", "wpe")
    want = w[k].T if k.endswith(conv) else w[k]
    got = ck[ours][:300] if ours == "wte" else ck[ours]
    assert np.array_equal(got, want), k
    n += 1
assert ck["wte"].shape == (384, 32) and not ck["wte"][300:].any()  # padded to 384 rows of zeros
raw = open(f"{tmp}/hf_out/model.safetensors", "rb").read()
hn = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + hn]); head.pop("__metadata__")
for k, v in head.items():  # what it writes is the file it read, tensor for tensor
    b, e = v["data_offsets"]
    a = np.frombuffer(raw[8 + hn + b:8 + hn + e], "<f4").reshape(v["shape"])
    assert v["dtype"] == "F32" and np.array_equal(a, w[k]), k
assert set(head) == {k for k in w.files if not k.endswith((".attn.bias", ".attn.masked_bias")) and k != "lm_head.weight"}
cfg = json.load(open(f"{tmp}/hf_out/config.json"))
assert (cfg["model_type"], cfg["vocab_size"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["n_positions"],
        cfg["activation_function"], cfg["tie_word_embeddings"]) == ("gpt2", 300, 2, 2, 32, 32, "gelu_new", True), cfg
print(f"{n} tensors, Conv1D transposed, 84 padding rows zero; --export hf wrote {len(head)} back as read")
PY
)
[ $? -eq 0 ] && [ $ok -eq 0 ]
check "init = hf:FILE, then --export hf ($out)" $? "$(tail -2 "$tmp/ginit.log") $(cat "$tmp/gexp.log") $out"

# --eval hf:FILE: the file's weights on the validation tokens, as the checkpoint holding them
a=$(./train "${gpt[@]}" --eval "hf:$tmp/gpt2.safetensors" 2>&1 | grep '^eval |')
b=$(./train "${gpt[@]}" --eval "$tmp/gck" 2>&1 | grep '^eval |')
[ -n "$a" ] && [ "${a#*| test loss}" = "${b#*| test loss}" ] && grep -q "^eval | hf:$tmp/gpt2.safetensors | test loss" <<<"$a"
check "--eval hf:FILE: the checkpoint's loss and perplexity, the file named" $? "$a / $b"
o=$(./train "${gpt[@]}" --eval "hf:$tmp/gpt2.safetensors" --ema 2>&1)
[ $? -eq 2 ] && grep -q "reads a Hugging Face GPT-2 file, which has none" <<<"$o"
check "--eval hf:FILE --ema: refused (no averages in it), exit 2" $? "$o"

# a file that is not this GPT-2: named
$py - "$tmp" <<'PY'
import json, struct, sys
import numpy as np
tmp = sys.argv[1]
w = dict(np.load(f"{tmp}/gpt2.npz"))
sys.path.insert(0, "tests")
import safetensors_io
untied = dict(w); untied["lm_head.weight"] = w["lm_head.weight"] + 1
safetensors_io.write(f"{tmp}/untied.safetensors", untied)
safetensors_io.write(f"{tmp}/one_layer.safetensors", {k: v for k, v in w.items() if ".h.1." not in k})
PY
refused "hf: a head of its own (not tied): refused" "lm_head.weight differs from wte.weight" \
    "${gpt[@]}" --set model.init="hf:$tmp/untied.safetensors" --dry-run
refused "hf: fewer layers than the config: named" "lacks GPT-2's h.1.ln_1.weight" \
    "${gpt[@]}" --set model.init="hf:$tmp/one_layer.safetensors" --dry-run
refused "hf: another width: named, with the keys to set" "transformer.wte.weight is [300, 32] in the file; this config's GPT-2 needs [300, 64]" \
    "${gpt[@]}" --set model.n_embd=64 --set model.init="hf:$tmp/gpt2.safetensors" --dry-run
refused "hf: a model that reads no Hugging Face files: refused" "model cnn does not read Hugging Face's files" \
    "${cnn[@]}" --set model.init="hf:$tmp/gpt2.safetensors" --dry-run
[ $failed -eq 0 ]
