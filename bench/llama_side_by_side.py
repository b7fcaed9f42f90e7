#!/usr/bin/env python3
"""llama_side_by_side.py: LLaMA training speed, dptrain's built-in llama against PyTorch, turn by
turn in one run, on this CPU.

Both sides start from one folder laid out as the hub's (tests/llama_reference.py write: random
weights, config.json) and train it in fp32 with AdamW (lr 1e-4, no weight decay, no clipping)
on the same token shard (README.md's bytes, vocabulary 256) in llm.c's order:
  - dptrain: ./train configs/llama_fortunes.ini with [model] init = hf:DIR, tok/s of the steps
    after the first 2 (its JSONL metrics);
  - PyTorch: tests/llama_reference.py's LlamaForCausalLM (torch.nn, eager attention as
    transformers runs it on PyTorch 1.13, which has no fused attention), AdamW with foreach,
    tok/s of the steps after 3 warm-up steps.
P pairs alternate with the order swapped each pair; it prints each side's median tok/s and the
median (min-max) of the per-pair ratios ours/PyTorch, then one JSON line per case.
    /usr/bin/python3 bench/llama_side_by_side.py [--pairs 3] [--steps 8] [--threads 1,2]"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time, shutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)
from gpt_exactness import run_train, write_tokens  # noqa: E402

CASE = dict(layers=4, hidden=256, heads=4, kv=2, inter=688, seq=256, batch=8)


def ours(c, d, tokens, threads, steps, work):
    sets = {"model.num_hidden_layers": c["layers"], "model.hidden_size": c["hidden"],
            "model.num_attention_heads": c["heads"], "model.num_key_value_heads": c["kv"],
            "model.intermediate_size": c["inter"], "model.init": "hf:" + d, "data.train": tokens, "data.val": tokens,
            "data.seq_len": c["seq"], "data.shuffle": "false", "data.test_limit": 1, "train.batch": c["batch"],
            "train.eval_batch": 1, "train.max_steps": steps + 2, "train.threads": threads, "optim.lr": 1e-4,
            "optim.beta2": 0.999, "optim.weight_decay": 0, "optim.clip_norm": 0, "optim.schedule": "constant",
            "optim.warmup_epochs": 0, "checkpoint.dir": os.path.join(work, "ck"), "checkpoint.existing": "archive"}
    ms = [r["step_ms"] for r in run_train(sets, os.path.join(work, "m.jsonl"), "configs/llama_fortunes.ini")][2:]
    return c["batch"] * c["seq"] / (statistics.median(ms) / 1000.0)


PEER = r'''
import json, sys, time
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
from llama_reference import batches, load64, torch_llama
d, tokens, seq, batch, steps, threads = sys.argv[2], sys.argv[3], *map(int, sys.argv[4:8])
torch.set_num_threads(threads)
cfg, w = load64(d)
m = torch_llama(cfg, w)
opt = torch.optim.AdamW(m.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, foreach=True)
times = []
for x, y in batches(tokens, seq, batch, steps + 3):
    t0 = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(m(torch.from_numpy(x)).reshape(-1, cfg["vocab_size"]),
                                             torch.from_numpy(y).reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
print(json.dumps({"tok_s": batch * seq / float(np.median(times[3:]))}))
'''


def peer(c, d, tokens, threads, steps):
    out = subprocess.run(["/usr/bin/python3", "-c", PEER, os.path.join(ROOT, "tests"), d, tokens, str(c["seq"]),
                          str(c["batch"]), str(steps), str(threads)], capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    if out.returncode != 0:
        sys.exit(f"PyTorch failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])["tok_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", default="1,2")
    a = ap.parse_args()
    c = CASE
    work = tempfile.mkdtemp(prefix="dpt_llama_bench_")
    d, tokens = os.path.join(work, "model"), os.path.join(work, "tokens.bin")
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests/llama_reference.py"), "write", d, "--layers",
                    str(c["layers"]), "--hidden", str(c["hidden"]), "--heads", str(c["heads"]), "--kv", str(c["kv"]),
                    "--inter", str(c["inter"]), "--vocab", "256"], check=True)
    write_tokens(tokens, c["batch"] * c["seq"] * (a.steps + 4) + 1, os.path.join(ROOT, "README.md"))
    print(f"LLaMA training, fp32, AdamW, vocabulary 256, {c}; {a.pairs} pairs per case, turn by turn; tok/s "
          "medians; ratio = median (min-max) of the per-pair ratios")
    for threads in [int(t) for t in a.threads.split(",")]:
        got = {"dptrain": [], "pytorch": []}
        for p in range(a.pairs):
            sides = ["dptrain", "pytorch"][::(-1 if p % 2 else 1)]
            for s in sides:
                got[s].append(ours(c, d, tokens, threads, a.steps, work) if s == "dptrain" else
                              peer(c, d, tokens, threads, a.steps))
        r = [x / y for x, y in zip(got["dptrain"], got["pytorch"])]
        res = {"bench": "llama_side_by_side", **c, "threads": threads, "pairs": a.pairs,
               "dptrain_tok_s": round(statistics.median(got["dptrain"]), 1),
               "pytorch_tok_s": round(statistics.median(got["pytorch"]), 1),
               "ratio": [round(statistics.median(r), 3), round(min(r), 3), round(max(r), 3)]}
        print(f"{threads} thr | dptrain {res['dptrain_tok_s']:8.1f} pytorch {res['pytorch_tok_s']:8.1f} "
              f"(x{statistics.median(r):.2f}, {min(r):.2f}-{max(r):.2f})", flush=True)
        print(json.dumps(res), flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
