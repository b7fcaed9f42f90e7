#!/usr/bin/env python3
"""gpt_side_by_side.py: GPT training speed, dptrain against PyTorch (and llm.c's CPU trainer when
given), turn by turn in one run, on this CPU.

Each case is one model, batch B, sequence T and thread count; every side trains it in fp32 with
AdamW on GPT-2 token ids (vocabulary 50257, padded to 50304 for the embedding), and P pairs run
alternately with the order swapped each pair (the machine drifts). It prints each side's median
tok/s and the median (min-max) of the per-pair ratios ours/peer, then one JSON line per case.
  - dptrain: ./train on a token shard, tok/s of the steps after the first 2 (its JSONL metrics);
  - PyTorch: bench/peer_gpt.py (torch.nn, the materialised masked attention PyTorch 1.13 has,
    AdamW foreach), tok/s of the steps after 3 warm-up steps;
  - llm.c (--llmc DIR, a checkout of karpathy/llm.c): train_gpt2.c built outside this repository
    with -O3 -march=native -fopenmp (its Makefile's -Ofast relaxes IEEE arithmetic; we do not),
    B and T substituted, the median of its own per-step times after the first 2.
Cases: a small GPT (4 layers, 256 channels, 4 heads, T 256, B 8) and GPT-2 small (12 layers, 768
channels, 12 heads, T 64, B 4), at 1 and 2 threads.
    /usr/bin/python3 bench/gpt_side_by_side.py [--pairs 3] [--steps 8] [--only small|gpt2] [--llmc DIR] [--bf16]
--bf16: dptrain with [train] precision = bf16 against PyTorch's forward under
torch.autocast(bfloat16) (no llm.c: its CPU trainer is fp32)."""
import argparse, json, os, re, shutil, statistics, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from gpt_exactness import build_llmc, run_llmc, run_peer, run_train, write_checkpoint, write_tokens  # noqa: E402

CASES = {"small": dict(layers=4, channels=256, heads=4, seq=256, batch=8),
         "gpt2": dict(layers=12, channels=768, heads=12, seq=64, batch=4)}


BF16 = False  # --bf16: [train] precision = bf16 against PyTorch's torch.autocast(bfloat16); no llm.c


def ours(c, threads, steps, tokens, work):
    sets = {"model.name": "gpt", "model.n_layer": c["layers"], "model.n_head": c["heads"], "model.n_embd": c["channels"],
            "model.padded_vocab_size": 50304, "data.source": "tokens", "data.train": tokens, "data.val": tokens,
            "data.seq_len": c["seq"], "data.vocab_size": 50257, "data.shuffle": "false", "data.test_limit": 1,
            "train.batch": c["batch"], "train.eval_batch": 1, "train.max_steps": steps + 2, "train.threads": threads,
            "optim.name": "adamw", "optim.lr": 1e-4, "optim.weight_decay": 0.1, "optim.decay_norm_and_bias": "false",
            "optim.clip_norm": 0, "optim.schedule": "constant", "optim.warmup_epochs": 0,
            "checkpoint.dir": os.path.join(work, "ck"), "checkpoint.existing": "archive",
            "train.precision": "bf16" if BF16 else "fp32"}
    ms = [r["step_ms"] for r in run_train(sets, os.path.join(work, "m.jsonl"))][2:]
    return c["batch"] * c["seq"] / (statistics.median(ms) / 1000.0)


def torch_side(c, threads, steps):
    return run_peer(["--layers", c["layers"], "--heads", c["heads"], "--channels", c["channels"], "--seq", c["seq"],
                     "--batch", c["batch"], "--steps", steps] + (["--bf16"] if BF16 else []), threads)["tok_s"]


def llmc_side(exe, c, threads):
    ms = [float(m) for m in re.findall(r"took ([0-9.]+) ms", run_llmc(exe, threads))][2:]
    return c["batch"] * c["seq"] / (statistics.median(ms) / 1000.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--only", choices=list(CASES))
    ap.add_argument("--llmc")
    ap.add_argument("--bf16", action="store_true", help="bf16 against PyTorch's autocast (llm.c's CPU trainer has none)")
    a = ap.parse_args()
    global BF16
    BF16 = a.bf16
    if a.bf16 and a.llmc:
        sys.exit("--bf16: llm.c's CPU trainer is fp32 only; leave out --llmc")
    work = tempfile.mkdtemp(prefix="dpt_gpt_bench_")
    print(f"GPT training, {'bf16 (dptrain precision = bf16, PyTorch autocast)' if BF16 else 'fp32'}, AdamW, vocabulary 50257; {a.pairs} pairs per case, turn by turn; tok/s medians; "
          "ratio = median (min-max) of the per-pair ratios")
    for name, c in CASES.items():
        if a.only and name != a.only:
            continue
        ckpt, tokens = os.path.join(work, name + ".bin"), os.path.join(work, name + "_tokens.bin")
        write_tokens(tokens, c["batch"] * c["seq"] * (a.steps + 4) + 1, os.path.join(ROOT, "README.md"))
        exe = None
        if a.llmc:
            write_checkpoint(ckpt, c["layers"], c["heads"], c["channels"], 50257, 50304, c["seq"], seed=1)
            exe = build_llmc(a.llmc, os.path.join(work, "llmc_%d_%d" % (c["layers"], c["seq"])), ckpt, tokens,
                             c["batch"], c["seq"], a.steps + 2)
        for threads in [int(t) for t in a.threads.split(",")]:
            got = {"dptrain": [], "pytorch": [], "llm.c": []}
            for p in range(a.pairs):
                sides = ["dptrain", "pytorch"] + (["llm.c"] if exe else [])
                if p % 2:
                    sides.reverse()
                for s in sides:
                    got[s].append(ours(c, threads, a.steps, tokens, work) if s == "dptrain" else
                                  torch_side(c, threads, a.steps) if s == "pytorch" else llmc_side(exe, c, threads))
            res = {"bench": "gpt_side_by_side", "case": name, **c, "threads": threads, "pairs": a.pairs, "bf16": BF16}
            line = f"{name:6s} L{c['layers']} C{c['channels']} T{c['seq']} B{c['batch']} {threads} thr |"
            for s in ("dptrain", "pytorch", "llm.c"):
                if not got[s]:
                    continue
                res[s + "_tok_s"] = round(statistics.median(got[s]), 1)
                line += f" {s} {res[s + '_tok_s']:8.1f}"
                if s != "dptrain":
                    r = [x / y for x, y in zip(got["dptrain"], got[s])]
                    res["ratio_" + s] = [round(statistics.median(r), 3), round(min(r), 3), round(max(r), 3)]
                    line += f" (x{statistics.median(r):.2f}, {min(r):.2f}-{max(r):.2f})"
            print(line, flush=True)
            print(json.dumps(res), flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
