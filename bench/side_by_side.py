#!/usr/bin/env python3
"""side_by_side.py: dptrain against PyTorch on this CPU, turn by turn in one run.

For each (model, batch, threads) it runs bench_step (dptrain) and peer_pytorch.py --one
(PyTorch, the same model, batch, SGD with momentum, the same thread count) alternately, P
pairs, swapping which goes first each pair (the machine drifts: +-25% between runs). It prints
each side's median img/s, the median of the per-pair ratios ours/PyTorch and their range, and
one JSON line. 2-rank DDP runs `mpirun -np 2 bench_step` against PyTorch's gloo DDP on 2
processes, 1 thread each.
    bench/side_by_side.py [--pairs 3] [--quick] [--only resnet20] [--native] [--bf16] [--nhwc] [--peer-channels-last]
Debian: python3-torch (run with /usr/bin/python3)."""
import argparse, json, os, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "-np", "2"]

# (model, batch, steps, threads list): steps sized so one side takes a few seconds here
CASES = [("mlp", 64, 300, [1, 2]), ("cnn", 64, 60, [1, 2]), ("resnet20", 128, 6, [1, 2]),
         ("resnet50", 16, 3, [1, 2]), ("vit", 64, 40, [1, 2]),
         ("vit_ti", 8, 3, [1, 2])]
DDP_CASES = [("cnn", 64, 60)]

LAST_MEM = {}  # the last run's allocator peak (MiB) by who ran it; dptrain's only

def run_json(cmd, env=None, who=None):
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800)
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            if who and "mem_peak_mb" in j: LAST_MEM[who] = j["mem_peak_mb"]
            return j["img_s"]
    raise RuntimeError(f"{' '.join(cmd)} gave no result:\n{out.stdout}\n{out.stderr}")

BF16 = False  # --bf16: [train] precision = bf16 against torch.autocast(dtype=torch.bfloat16)
NHWC = False  # --nhwc: [train] memory_format = nhwc against torch.channels_last
PEER_CL = False  # --peer-channels-last: PyTorch in torch.channels_last, dptrain in its default layout

def ours_cmd(model, batch, threads, steps, native, ddp):
    cmd = [os.path.join(ROOT, "build/bench/bench_step"), model, str(batch), str(threads), str(steps)]
    if native: cmd.append("native")
    else:  # bench_step's mode: bf16, nhwc, bf16-nhwc, or none
        mode = "-".join(m for m, on in (("bf16", BF16), ("nhwc", NHWC)) if on)
        if mode: cmd.append(mode)
    return (MPIRUN + cmd) if ddp else cmd

def torch_cmd(model, batch, threads, steps, ddp):
    cmd = ["/usr/bin/python3", os.path.join(HERE, "peer_pytorch.py"), "--one", "--models", model,
           "--batch", str(batch), "--threads", str(threads), "--steps", str(steps)]
    return cmd + (["--ddp", "2"] if ddp else []) + (["--bf16"] if BF16 else []) + \
        (["--channels-last"] if NHWC or PEER_CL else [])

def measure(model, batch, threads, steps, pairs, native, ddp=False):
    global BF16
    ours, torch, ratios, fp32, speedups = [], [], [], [], []
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    bf16 = BF16
    for p in range(pairs):
        order = ["ours", "torch"] if p % 2 == 0 else ["torch", "ours"]
        if bf16: order.insert(1, "ours_fp32")  # bf16 runs: our own fp32 step in the same pair
        got = {}
        for who in order:
            BF16 = who != "ours_fp32" and bf16
            cmd = torch_cmd(model, batch, threads, steps, ddp) if who == "torch" else \
                  ours_cmd(model, batch, threads, steps, native, ddp)
            got[who] = run_json(cmd, env, who)
        BF16 = bf16
        ours.append(got["ours"]); torch.append(got["torch"]); ratios.append(got["ours"] / got["torch"])
        if bf16: fp32.append(got["ours_fp32"]); speedups.append(got["ours"] / got["ours_fp32"])
    extra = {}
    if bf16:
        extra = {"ours_fp32_median": round(statistics.median(fp32), 1),
                 "mem_peak_mb_bf16": LAST_MEM.get("ours"), "mem_peak_mb_fp32": LAST_MEM.get("ours_fp32"),
                 "bf16_speedup_median": round(statistics.median(speedups), 3),
                 "bf16_speedup_min": round(min(speedups), 3), "bf16_speedup_max": round(max(speedups), 3)}
    return {**extra, "model": model, "batch": batch, "threads": threads, "ranks": 2 if ddp else 1, "pairs": pairs,
            "ours_img_s": [round(v, 1) for v in ours], "torch_img_s": [round(v, 1) for v in torch],
            "ours_median": round(statistics.median(ours), 1), "torch_median": round(statistics.median(torch), 1),
            "ratio_median": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3)}

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 thread only, no ResNet-50 (make bench on 2 cores)")
    ap.add_argument("--only", help="comma-separated models")
    ap.add_argument("--native", action="store_true", help="dptrain's native kernels instead of oneDNN")
    ap.add_argument("--no-ddp", action="store_true")
    ap.add_argument("--bf16", action="store_true",
                    help="both in bf16: [train] precision = bf16 and torch.autocast(\"cpu\", dtype=torch.bfloat16)")
    ap.add_argument("--nhwc", action="store_true",
                    help="both channels-last: [train] memory_format = nhwc and torch.channels_last")
    ap.add_argument("--peer-channels-last", action="store_true",
                    help="PyTorch in torch.channels_last (its fastest CPU layout in bf16), dptrain in its default "
                         "(oneDNN's blocked layout): each side's best")
    args = ap.parse_args()
    global BF16, NHWC, PEER_CL
    BF16, NHWC, PEER_CL = args.bf16, args.nhwc, args.peer_channels_last
    import torch
    print(f"dptrain vs PyTorch {torch.__version__} on this CPU ({os.cpu_count()} cores), "
          f"{time.strftime('%Y-%m-%d')}: img/s, median of {args.pairs} pairs run turn by turn; "
          f"ratio = dptrain / PyTorch (median of the pairs' ratios, [min, max])")
    print(f"{'model':10} {'batch':>5} {'thr':>3} {'ranks':>5} {'dptrain':>10} {'PyTorch':>10} {'ratio':>7}  range")
    results = []
    only = set(args.only.split(",")) if args.only else None
    for model, batch, steps, threads_list in CASES:
        if only and model not in only: continue
        if args.quick and model in ("resnet50", "vit_ti"): continue
        for threads in ([1] if args.quick else threads_list):
            r = measure(model, batch, threads, steps, args.pairs, args.native)
            results.append(r)
            fp = (f"  dptrain fp32 {r['ours_fp32_median']:.1f}: bf16 {r['bf16_speedup_median']:.2f}x "
                  f"[{r['bf16_speedup_min']:.2f}, {r['bf16_speedup_max']:.2f}]; peak memory fp32 "
                  f"{r['mem_peak_mb_fp32']} MiB, bf16 {r['mem_peak_mb_bf16']} MiB") if args.bf16 else ""
            print(f"{model:10} {batch:>5} {threads:>3} {1:>5} {r['ours_median']:>10.1f} {r['torch_median']:>10.1f} "
                  f"{r['ratio_median']:>7.2f}  [{r['ratio_min']:.2f}, {r['ratio_max']:.2f}]{fp}", flush=True)
    if not args.no_ddp:
        for model, batch, steps in DDP_CASES:
            if only and model not in only: continue
            r = measure(model, batch, 1, steps, args.pairs, args.native, ddp=True)
            one = statistics.median([run_json(ours_cmd(model, batch, 1, steps, args.native, False))
                                     for _ in range(args.pairs)])
            r["ours_1rank_median"] = round(one, 1)
            r["scaling"] = round(r["ours_median"] / one, 3)
            results.append(r)
            print(f"{model:10} {batch:>5} {1:>3} {2:>5} {r['ours_median']:>10.1f} {r['torch_median']:>10.1f} "
                  f"{r['ratio_median']:>7.2f}  [{r['ratio_min']:.2f}, {r['ratio_max']:.2f}]  "
                  f"(dptrain 1 rank {one:.1f}: {r['scaling']:.2f}x)", flush=True)
    print(json.dumps({"bench": "side_by_side", "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
                      "kernels": "native" if args.native else "onednn", "bf16": args.bf16, "nhwc": args.nhwc,
                      "peer_channels_last": args.peer_channels_last,
                      "results": results}))

if __name__ == "__main__":
    main()
