#!/usr/bin/env python3
"""zero_side_by_side.py: [distributed] zero = 0, 1 and 2 on 2 ranks (--ranks N) against PyTorch's DDP and
its ZeroRedundancyOptimizer (gloo), turn by turn in one run.

The same model as bench/peer_pytorch.py (MLP 784-256-256-10, the 2-stage CNN, ResNet-20; with
--full ResNet-50, and GPT-2 small for dptrain alone: its PyTorch columns print nan), the same per-rank batch, AdamW (lr 1e-3, weight decay 0.01: torch's
default), random data of the model's shape, 1 thread per rank, 2 ranks on this machine. Each
pair runs the five in a rotated order (the machine drifts: +-25% between runs). dptrain's step
time is the median of its metrics windows after the first ([log] metrics, step_ms); PyTorch's is
its timed steps' mean after two warm-up steps. Rank 0's optimizer state (MiB) is what each
holds: dptrain's allocator (optim_state_mb), PyTorch's optimizer.state tensors; and the most
gradient storage rank 0 held at once (grad_mb: zero 2 keeps its ranges plus the buckets in
flight, where that is less than all the buckets). Prints a table
and one JSON line per model.
    /usr/bin/python3 bench/zero_side_by_side.py [--pairs 3] [--only mlp] [--full] [--ranks 4]
Debian: python3-torch (run with /usr/bin/python3), mpirun."""
import argparse, json, os, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MPIRUN = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "-np"]
RANKS = 2

# model: (config, --set of the shape, per-rank batch, steps, metrics interval)
CASES = {
    "mlp": ("configs/fmnist_mlp.ini", ["data.synthetic_shape=1,28,28", "model.hidden=256,256"], 64, 400, 50),
    "cnn": ("configs/fmnist_cnn.ini", ["data.synthetic_shape=1,28,28"], 32, 120, 20),
    "resnet20": ("configs/cifar10_resnet20.ini", ["data.synthetic_shape=3,32,32", "data.random_crop_pad=0",
                                                  "data.hflip=false"], 32, 36, 6),
    "resnet50": ("configs/resnet50_synthetic.ini", ["data.synthetic_shape=3,224,224"], 8, 12, 2),
    # GPT-2 small (124 M parameters, vocabulary padded to 50304), T 64, on a token shard of a
    # text: dptrain only (PyTorch's peer models here have no GPT under DDP): what ZeRO is for
    "gpt2": ("configs/gpt_fortunes.ini", ["model.n_layer=12", "model.n_head=12", "model.n_embd=768",
                                          "model.padded_vocab_size=50304", "data.vocab_size=50257",
                                          "data.seq_len=64", "data.shuffle=false", "data.test_limit=1",
                                          "train.eval_batch=1", "optim.clip_norm=0"], 4, 8, 2),
}
TOKENS = None  # the gpt2 case's token shard (made once per run)


def ours(model, zero, tmp):
    config, shape, batch, steps, interval = CASES[model]
    metrics = os.path.join(tmp, f"{model}-{zero}.jsonl")
    if os.path.exists(metrics): os.remove(metrics)
    if model == "gpt2":
        data = [f"data.train={TOKENS}", f"data.val={TOKENS}"]
    else:
        data = ["data.source=synthetic", "data.synthetic_classes=10" if model != "resnet50" else
                "data.synthetic_classes=1000", f"data.synthetic_samples={batch * RANKS * (steps + 2)}"]
    sets = shape + data + [f"train.batch={batch}", "train.global_batch=0", "train.threads=1", f"train.max_steps={steps}",
                    "optim.name=adamw", "optim.lr=0.001", "optim.weight_decay=0.01", "optim.schedule=constant",
                    f"log.interval={interval}", f"log.metrics={metrics}", f"checkpoint.dir={tmp}/ckpt-{model}-{zero}",
                    "checkpoint.every_epochs=0", f"distributed.zero={zero}", "train.epochs=1"]
    cmd = MPIRUN + [str(RANKS), "./train", config] + [a for s in sets for a in ("--set", s)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    rows = [json.loads(l) for l in open(metrics) if '"kind":"train"' in l] if os.path.exists(metrics) else []
    if out.returncode != 0 or len(rows) < 3:
        raise RuntimeError(f"{' '.join(cmd)}: exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return {"step_ms": statistics.median(r["step_ms"] for r in rows[1:]), "optim_state_mb": rows[-1]["optim_state_mb"],
            "mem_peak_mb": rows[-1]["mem_peak_mb"], "grad_mb": max(r["grad_mb"] for r in rows)}


def theirs(model, zero):
    _, _, batch, steps, _ = CASES[model]
    if model == "gpt2":  # no peer: its columns print as nan
        return {"step_ms": float("nan"), "optim_state_mb": float("nan")}
    cmd = ["/usr/bin/python3", os.path.join(HERE, "peer_pytorch.py"), "--one", "--models", model, "--batch",
           str(batch), "--threads", "1", "--steps", str(steps), "--ddp", str(RANKS), "--adamw"] + (["--zero"] if zero else [])
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
                         timeout=1800)
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            return {"step_ms": 1e3 * batch * RANKS / j["img_s"], "optim_state_mb": j["optim_state_mb"]}
    raise RuntimeError(f"{' '.join(cmd)} gave no result:\n{out.stdout}\n{out.stderr}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--only", help="comma-separated models (mlp,cnn,resnet20,resnet50,gpt2)")
    ap.add_argument("--full", action="store_true", help="ResNet-50 and GPT-2 small too (minutes)")
    ap.add_argument("--ranks", type=int, default=2, help="ranks on this machine (more than its cores: memory only)")
    args = ap.parse_args()
    global RANKS
    RANKS = args.ranks
    models = args.only.split(",") if args.only else ["mlp", "cnn", "resnet20"] + (["resnet50", "gpt2"] if args.full else [])
    who = ["zero0", "zero1", "zero2", "torch_ddp", "torch_zero"]
    print(f"{RANKS} ranks x 1 thread, AdamW; step ms (median over pairs) and rank 0's optimizer state")
    print(f"{'model':9} {'zero 0':>8} {'zero 1':>8} {'zero 2':>8} {'torch':>8} {'torch ZeRO':>10} "
          f"{'z1/z0':>6} {'z2/z0':>6} {'z2/tZ':>6} {'state z0/z1/z2 MiB':>21} {'torch/ZeRO MiB':>15} {'grads z0/z2 MiB':>16}")
    global TOKENS
    with tempfile.TemporaryDirectory() as tmp:
        if "gpt2" in models:
            sys.path.insert(0, HERE)
            from gpt_exactness import write_tokens
            TOKENS = os.path.join(tmp, "tokens.bin")
            write_tokens(TOKENS, 200000, os.path.join(ROOT, "README.md"))
        for model in models:
            got = {w: [] for w in who}
            for p in range(args.pairs):
                order = who[p % len(who):] + who[:p % len(who)]
                for w in order:
                    got[w].append(ours(model, int(w[-1]), tmp) if w.startswith("zero") else theirs(model, w == "torch_zero"))
            med = {w: statistics.median(r["step_ms"] for r in got[w]) for w in who}
            ratio = lambda a, b: [x["step_ms"] / y["step_ms"] for x, y in zip(got[a], got[b])]
            r10, r20, r2t = ratio("zero1", "zero0"), ratio("zero2", "zero0"), ratio("zero2", "torch_zero")
            state = {w: got[w][-1]["optim_state_mb"] for w in who}
            print(f"{model:9} {med['zero0']:8.2f} {med['zero1']:8.2f} {med['zero2']:8.2f} {med['torch_ddp']:8.2f} "
                  f"{med['torch_zero']:10.2f} {statistics.median(r10):6.3f} {statistics.median(r20):6.3f} "
                  f"{statistics.median(r2t):6.3f} {state['zero0']:7.3f}/{state['zero1']:.3f}/{state['zero2']:.3f} "
                  f"{state['torch_ddp']:7.3f}/{state['torch_zero']:.3f} "
                  f"{got['zero0'][-1]['grad_mb']:8.3f}/{got['zero2'][-1]['grad_mb']:.3f}")
            print(json.dumps({"bench": "zero_side_by_side", "model": model, "ranks": RANKS, "threads": 1,
                              "batch": CASES[model][2], "pairs": args.pairs,
                              "step_ms": {w: [round(r["step_ms"], 3) for r in got[w]] for w in who},
                              "median_ms": {w: round(v, 3) for w, v in med.items()},
                              "zero1_over_zero0": [round(min(r10), 3), round(statistics.median(r10), 3), round(max(r10), 3)],
                              "zero2_over_zero0": [round(min(r20), 3), round(statistics.median(r20), 3), round(max(r20), 3)],
                              "zero2_over_torch_zero": [round(min(r2t), 3), round(statistics.median(r2t), 3),
                                                        round(max(r2t), 3)],
                              "optim_state_mb": state,
                              "mem_peak_mb": {w: got[w][-1]["mem_peak_mb"] for w in who if w.startswith("zero")},
                              "grad_mb": {w: got[w][-1]["grad_mb"] for w in who if w.startswith("zero")}}),
                  flush=True)


if __name__ == "__main__":
    main()
