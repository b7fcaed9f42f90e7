#!/usr/bin/env python3
"""ae_side_by_side.py: a convolutional autoencoder's training speed (stride-2 convolutions down,
transposed convolutions up: docs/writing-a-model.md's ae_trainer), dptrain against PyTorch, turn
by turn in one run, on this CPU.

Both sides train the same model (conv 1->16 and 16->32, 3x3 stride 2 padding 1, ReLU; transposed
conv 32->16 and 16->1, 4x4 stride 2 padding 1), batch 64 of 1x28x28, the mean squared error
against the input, AdamW lr 0.002, fp32, at each thread count; P pairs alternate with the order
swapped each pair (the machine drifts). Each side's img/s is 64 over the median step time after
the first 5 steps:
  - dptrain: build/tests/doc_ae (make tests builds it from the page) on Fashion-MNIST, its JSONL
    step times (the loader's thread included);
  - PyTorch: torch.nn on one random batch made once (no data loading).
It prints each side's median img/s and the median (min-max) of the per-pair ratios ours/peer,
then one JSON line per thread count.
    /usr/bin/python3 bench/ae_side_by_side.py [--pairs 3] [--steps 60] [--threads 1,2]"""
import argparse, json, os, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BATCH, WARMUP = 64, 5

PEER = r"""
import json, sys, time
import torch, torch.nn as nn
threads, steps, warmup = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
torch.manual_seed(1)
model = nn.Sequential(nn.Conv2d(1, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                      nn.ConvTranspose2d(32, 16, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(16, 1, 4, 2, 1))
opt = torch.optim.AdamW(model.parameters(), lr=0.002, weight_decay=0.0001)
x = torch.randn(%d, 1, 28, 28)
times = []
for i in range(steps + warmup):
    t0 = time.perf_counter()
    loss = nn.functional.mse_loss(model(x), x)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
print(json.dumps({"step_ms": [1e3 * t for t in times[warmup:]], "torch": torch.__version__}))
""" % BATCH


def ours(threads, steps, work):
    exe, ini = os.path.join(ROOT, "build/tests/doc_ae"), os.path.join(ROOT, "build/tests/doc_ae.ini")
    if not os.path.exists(exe):
        sys.exit(f"{exe} is missing: make tests builds it")
    metrics = os.path.join(work, "m.jsonl")
    if os.path.exists(metrics):
        os.unlink(metrics)
    sets = {"train.batch": BATCH, "train.threads": threads, "train.max_steps": steps + WARMUP, "data.test_limit": 64,
            "log.interval": 1, "log.metrics": metrics, "checkpoint.dir": os.path.join(work, "ck"),
            "checkpoint.existing": "archive"}
    cmd = [exe, ini] + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dptrain failed:\n{out.stdout}\n{out.stderr}")
    ms = [json.loads(l)["step_ms"] for l in open(metrics) if '"kind":"train"' in l][WARMUP:]
    return BATCH / (statistics.median(ms) / 1e3)


def peer(threads, steps):
    out = subprocess.run(["/usr/bin/python3", "-c", PEER, str(threads), str(steps), str(WARMUP)], capture_output=True,
                         text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    if out.returncode != 0:
        sys.exit(f"PyTorch failed:\n{out.stdout}\n{out.stderr}")
    return BATCH / (statistics.median(json.loads(out.stdout.strip().splitlines()[-1])["step_ms"]) / 1e3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--threads", default="1,2")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="dpt_ae_bench_")
    print(f"convolutional autoencoder (transposed convolutions), batch {BATCH}, AdamW, fp32; {a.pairs} pairs per "
          "thread count, turn by turn; img/s medians; ratio = median (min-max) of the per-pair ratios")
    for threads in [int(t) for t in a.threads.split(",")]:
        got = {"dptrain": [], "pytorch": []}
        for p in range(a.pairs):
            for side in (["dptrain", "pytorch"] if p % 2 == 0 else ["pytorch", "dptrain"]):
                got[side].append(ours(threads, a.steps, work) if side == "dptrain" else peer(threads, a.steps))
        r = [x / y for x, y in zip(got["dptrain"], got["pytorch"])]
        res = {"bench": "ae_side_by_side", "threads": threads, "pairs": a.pairs,
               "dptrain_img_s": round(statistics.median(got["dptrain"]), 1),
               "pytorch_img_s": round(statistics.median(got["pytorch"]), 1),
               "ratio": [round(statistics.median(r), 3), round(min(r), 3), round(max(r), 3)]}
        print(f"{threads} thread{'s' if threads > 1 else ''} | dptrain {res['dptrain_img_s']:8.1f} img/s | PyTorch "
              f"{res['pytorch_img_s']:8.1f} img/s | x{res['ratio'][0]:.2f} ({res['ratio'][1]:.2f}-{res['ratio'][2]:.2f})",
              flush=True)
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
