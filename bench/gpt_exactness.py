#!/usr/bin/env python3
"""gpt_exactness.py: dptrain's GPT against PyTorch (and llm.c's CPU trainer when given), step by
step, from one llm.c checkpoint and one token file.

It writes a GPT-2-initialised checkpoint in llm.c's format (random weights: no download) and a
token shard of a text's bytes (README.md; GPT-2 token ids below 256), then trains 40 steps of B=4, T=64 in llm.c's batch order
with llm.c's AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-8, no weight decay), fp32:
  - dptrain: ./train with [model] init = llmc:CKPT, [data] source = tokens, shuffle = false;
  - PyTorch: bench/peer_gpt.py, the same architecture written with torch.nn, loading the file;
  - llm.c (--llmc DIR, a checkout of karpathy/llm.c): its train_gpt2.c built outside this
    repository (-O3 -march=native -fopenmp, its own flags without -Ofast's unsafe math), its
    paths, batch order (no shuffling) and step count set by substitution.
It prints each step's losses and the largest difference; exit 1 if dptrain's differs from
PyTorch's by more than 1e-4 (fp32 over 40 steps: sums in other orders, nothing else).
    /usr/bin/python3 bench/gpt_exactness.py [--layers 4 --channels 256 --heads 4] [--llmc DIR] [--threads 2]"""
import argparse, json, os, re, shutil, subprocess, sys, tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def write_checkpoint(path, L, H, C, V, VP, maxT, seed):
    """GPT-2's initialisation, in llm.c's file layout (kinds in order, each for every layer)."""
    rng = np.random.default_rng(seed)
    n = lambda *shape, std=0.02: (rng.standard_normal(shape) * std).astype(np.float32)
    resid = 0.02 / np.sqrt(2 * L)
    kinds = [n(VP, C), n(maxT, C),
             np.ones((L, C), np.float32), np.zeros((L, C), np.float32),
             n(L, 3 * C, C), np.zeros((L, 3 * C), np.float32),
             n(L, C, C, std=resid), np.zeros((L, C), np.float32),
             np.ones((L, C), np.float32), np.zeros((L, C), np.float32),
             n(L, 4 * C, C), np.zeros((L, 4 * C), np.float32),
             n(L, C, 4 * C, std=resid), np.zeros((L, C), np.float32),
             np.ones(C, np.float32), np.zeros(C, np.float32)]
    header = np.zeros(256, np.int32)
    header[:8] = [20240326, 3, maxT, V, L, H, C, VP]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for k in kinds:
            f.write(k.tobytes())


def write_tokens(path, count, text):
    """The bytes of a text as token ids (valid GPT-2 ids, all below 256): real text the model
    learns from, so the losses fall and the runs' trajectories are compared, not noise."""
    data = np.frombuffer(open(text, "rb").read(), dtype=np.uint8).astype(np.uint16)
    data = np.resize(data, count)  # repeated if shorter
    header = np.zeros(256, np.int32)
    header[:3] = [20240520, 1, count]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(data.tobytes())


def run_train(sets, metrics, config="configs/gpt_fortunes.ini"):
    """./train on config (gpt_fortunes.ini) with these --set values; its JSONL train records."""
    if os.path.exists(metrics):
        os.unlink(metrics)
    cmd = [os.path.join(ROOT, "train"), os.path.join(ROOT, config)]
    for k, v in dict(sets, **{"log.interval": 1, "log.metrics": metrics}).items():
        cmd += ["--set", f"{k}={v}"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dptrain failed:\n{out.stdout}\n{out.stderr}")
    return [json.loads(l) for l in open(metrics) if '"kind":"train"' in l]


def run_peer(args, threads):
    """bench/peer_gpt.py with these arguments at this thread count; its last JSON line."""
    cmd = ["/usr/bin/python3", os.path.join(HERE, "peer_gpt.py"), "--threads", str(threads)] + [str(x) for x in args]
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    if out.returncode != 0:
        sys.exit(f"PyTorch failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ours(a, ckpt, tokens, work):
    sets = {"model.name": "gpt", "model.n_layer": a.layers, "model.n_head": a.heads, "model.n_embd": a.channels,
            "model.block_size": a.seq, "model.padded_vocab_size": 50304, "model.init": "llmc:" + ckpt,
            "data.source": "tokens", "data.train": tokens, "data.val": tokens, "data.seq_len": a.seq,
            "data.vocab_size": 50257, "data.shuffle": "false", "data.test_limit": 4, "train.batch": a.batch,
            "train.eval_batch": 4, "train.max_steps": a.steps, "train.threads": a.threads, "optim.name": "adamw",
            "optim.lr": 1e-4, "optim.beta1": 0.9, "optim.beta2": 0.999, "optim.eps": 1e-8, "optim.weight_decay": 0,
            "optim.clip_norm": 0, "optim.schedule": "constant", "optim.warmup_epochs": 0,
            "checkpoint.dir": os.path.join(work, "ck")}
    return [r["loss"] for r in run_train(sets, os.path.join(work, "ours.jsonl"))]


def peer(a, ckpt, tokens):
    return run_peer(["--layers", a.layers, "--heads", a.heads, "--channels", a.channels, "--seq", a.seq, "--batch",
                     a.batch, "--steps", a.steps, "--init-llmc", ckpt, "--tokens", tokens], a.threads)["losses"]


def build_llmc(src, d, ckpt, tokens, batch, seq, steps):
    """llm.c's train_gpt2.c in folder d, outside this repository, with our files, llm.c's batch
    order (unshuffled), B, T and the step count substituted and no validation passes; built
    once per folder with -O3 -march=native -fopenmp (its Makefile's -Ofast relaxes IEEE)."""
    exe = os.path.join(d, "train_gpt2")
    if os.path.exists(exe):
        return exe
    shutil.copytree(os.path.join(src, "llmc"), os.path.join(d, "llmc"))
    code = open(os.path.join(src, "train_gpt2.c")).read()
    code = code.replace('"gpt2_124M.bin"', json.dumps(ckpt))
    code = re.sub(r'const char\* train_tokens = [^;]*;', f'const char* train_tokens = {json.dumps(tokens)};', code)
    code = re.sub(r'const char\* val_tokens = [^;]*;', f'const char* val_tokens = {json.dumps(tokens)};', code)
    code = code.replace("int B = 4;", f"int B = {batch};").replace("int T = 64;", f"int T = {seq};")
    code = code.replace("dataloader_init(&train_loader, train_tokens, B, T, 0, 1, 1);",
                        "dataloader_init(&train_loader, train_tokens, B, T, 0, 1, 0);")  # llm.c's order, unshuffled
    code = code.replace("step <= 40", f"step < {steps}").replace("step > 0 && step % 20 == 0", "0")
    code = code.replace("step % 10 == 0", "0")  # no validation passes: training steps only
    open(os.path.join(d, "train_gpt2.c"), "w").write(code)
    subprocess.run(["cc", "-O3", "-march=native", "-fopenmp", "-DOMP", "-Wno-unused-result", "-o", exe,
                    os.path.join(d, "train_gpt2.c"), "-lm"], check=True, cwd=d)
    return exe


def run_llmc(exe, threads):
    """The built train_gpt2 at this thread count; its stdout."""
    out = subprocess.run([exe], capture_output=True, text=True, cwd=os.path.dirname(exe),
                         env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    if out.returncode != 0:
        sys.exit(f"llm.c failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout


def llmc(exe, a):
    return [float(m) for m in re.findall(r"step \d+: train loss ([0-9.]+)", run_llmc(exe, a.threads))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--channels", type=int, default=256)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llmc", help="a checkout of karpathy/llm.c (train_gpt2.c and llmc/)")
    ap.add_argument("--text", default=os.path.join(ROOT, "README.md"), help="the text whose bytes are the tokens")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="dpt_gpt_exact_")
    ckpt, tokens = os.path.join(work, "model.bin"), os.path.join(work, "tokens.bin")
    write_checkpoint(ckpt, a.layers, a.heads, a.channels, 50257, 50304, a.seq, seed=1)
    write_tokens(tokens, a.batch * a.seq * (a.steps + 2) + 1, a.text)
    runs = {"dptrain": ours(a, ckpt, tokens, work), "pytorch": peer(a, ckpt, tokens)}
    if a.llmc:
        runs["llm.c"] = llmc(build_llmc(a.llmc, os.path.join(work, "llmc"), ckpt, tokens, a.batch, a.seq, a.steps), a)
    names = list(runs)
    print(f"GPT {a.layers} layers x {a.channels} channels, {a.heads} heads, vocab 50257 (padded 50304), "
          f"B={a.batch} T={a.seq}, AdamW lr 1e-4, {a.steps} steps, {a.threads} threads")
    print("step " + "".join(f"{n:>12}" for n in names) + "   |dptrain - pytorch|")
    worst = 0.0
    for i in range(a.steps):
        row = [runs[n][i] if i < len(runs[n]) else float("nan") for n in names]
        diff = abs(row[0] - row[1])
        worst = max(worst, diff)
        print(f"{i:4d} " + "".join(f"{v:12.6f}" for v in row) + f"   {diff:.2e}")
    extra = {}
    if "llm.c" in runs:
        extra["max_diff_llmc_pytorch"] = max(abs(x - y) for x, y in zip(runs["llm.c"], runs["pytorch"]))
        extra["max_diff_dptrain_llmc"] = max(abs(x - y) for x, y in zip(runs["dptrain"], runs["llm.c"]))
    print(json.dumps({"bench": "gpt_exactness", "layers": a.layers, "channels": a.channels, "steps": a.steps,
                      "max_diff_dptrain_pytorch": worst, **extra}))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if worst <= 1e-4 and len(runs["dptrain"]) == a.steps else 1


if __name__ == "__main__":
    sys.exit(main())
