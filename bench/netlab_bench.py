#!/usr/bin/env python3
"""netlab_bench.py: DDP over a capped network, dptrain beside PyTorch (needs root: scripts/netlab.sh).

    sudo /usr/bin/python3 bench/netlab_bench.py [--caps 1gbit,5gbit] [--models cnn,resnet20]
                                                [--pairs 3] [--windows 4] [--json FILE]
                                                [--sweep 0.25,1,4,25 | --zero]

For each cap and model, turn by turn, --pairs rounds of four runs (2 ranks x 1 thread, each
rank in its own network namespace on its own core, talking TCP over links capped at the rate):
  alone  one dptrain process on one core, no communication at all: compute alone
  off    2 ranks, [distributed] overlap = false: the AllReduces run after backward, so their
         time (the progress line's comm ms) is communication alone
  on     2 ranks, overlap = true (the default)
  tree   the same with Open MPI's binomial tree for the AllReduce (its default for an in-place
         buffer; dptrain asks for recursive doubling at 2-4 ranks since 2026-12-06)
  torch  PyTorch's DDP over gloo, the same model, per-rank batch, SGD momentum 0.9, 1 thread
dptrain's step time is the median of the JSONL windows after the first (warm-up); PyTorch's the
mean over its timed steps. Printed per cap and model: medians over the pairs, with the spread
(min-max); bound = max(alone, comm alone); on/bound (1.0 = communication fully hidden); the
overlap's gain (off/on); PyTorch over dptrain (above 1: dptrain faster).
--zero instead: [distributed] zero 0, then 1 and 2 each with zero_overlap false, true and auto
(AdamW; auto's windows after its choice), turn by turn: step ms, and what the forwards waited for the parameters' all-gather (zero_gather_ms)
against the all-gather's own time (zero_gather_busy_ms; without overlap all of it is waited).
What the lab cannot show: latency (no netem here) and NIC offloads (TCP costs the ranks' cores).
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NETLAB = os.path.join(ROOT, "scripts", "netlab.sh")
TRAIN = os.path.join(ROOT, "train")

# dptrain's side of each model: the peer's model (peer_pytorch.py), synthetic data of its shape,
# SGD with momentum, one thread per rank; per-rank batch
MODELS = {
    "cnn": (64, ["model.name=cnn", "model.channels=32,64", "model.fc=128", "model.dropout=0.25",
                 "data.synthetic_shape=1,28,28", "data.synthetic_classes=10"]),
    "resnet20": (32, ["model.name=resnet", "model.depth=20",
                      "data.synthetic_shape=3,32,32", "data.synthetic_classes=10"]),
    "resnet50": (4, ["model.name=resnet", "model.depth=50",
                     "data.synthetic_shape=3,224,224", "data.synthetic_classes=1000"]),
}
COMMON = ["data.source=synthetic", "data.test_limit=8", "train.epochs=1", "train.threads=1",
          "optim.name=sgd", "optim.lr=0.01", "optim.momentum=0.9", "optim.weight_decay=0", "log.interval=10"]


# Open MPI's own choice for a non-blocking AllReduce on an in-place buffer: the binomial tree (a
# reduce into rank 0, then a broadcast), which dptrain replaced at 2-4 ranks on 2026-12-06
# (runtime/world.c): the "tree" column runs it again for contrast
TREE = {"OMPI_MCA_coll_libnbc_iallreduce_algorithm": "2"}


def ours(model, cap, mode, windows, metrics, bucket="25", extra=(), env=None):
    """mode alone | off | on; bucket: [distributed] bucket_mb (auto: the windows after its choice);
    extra: more key=value settings; env: more environment variables"""
    batch, sets = MODELS[model]
    skip = 0
    if bucket == "auto":  # the steps it may measure (12 sizes, 3 visits of 3 steps), in whole windows
        skip = 10 * ((1 + 12 * 3 * 3) // 10 + 1)
    elif "distributed.zero_overlap=auto" in extra and "distributed.zero=0" not in extra:
        skip = 30  # its 24 steps of measuring, in whole windows
    steps = 10 * (windows + 1) + skip
    sets = sets + COMMON + [f"train.batch={batch}", f"train.max_steps={steps}",
                            f"data.synthetic_samples={batch * 2 * (steps + 1)}", f"log.metrics={metrics}",
                            f"distributed.overlap={'false' if mode == 'off' else 'true'}",
                            f"distributed.bucket_mb={bucket}"] + list(extra)
    args = [TRAIN, os.path.join(ROOT, "configs", "fmnist_cnn.ini")]
    for s in sets:
        args += ["--set", s]
    if os.path.exists(metrics):
        os.unlink(metrics)
    cmd = ["taskset", "-c", "0"] + args if mode == "alone" else [NETLAB, "--rate", cap, "mpi", "--"] + args
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=dict(os.environ, **(env or {})))
    if r.returncode:
        sys.exit(f"netlab_bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-3000:]}")
    records = [json.loads(l) for l in open(metrics)]
    tuned = [x["step"] for x in records if x.get("kind") in ("bucket_tune", "zero_tune")]
    chosen = [x["bucket_mb"] for x in records if x.get("kind") == "bucket_tune"]
    rows = [x for x in records if x.get("kind") == "train"][1:]
    if tuned:
        rows = [x for x in rows if x["step"] - 10 >= tuned[0]]  # whole windows after the choice
    return {"step_ms": statistics.median(x["step_ms"] for x in rows), "bucket_mb": chosen[0] if chosen else None,
            "comm_ms": statistics.median(x["comm_ms"] for x in rows),
            "exposed_ms": statistics.median(x.get("comm_exposed_ms", 0) for x in rows),
            "gbit_s": statistics.median(x.get("comm_gbit_s", 0) for x in rows),
            "gather_ms": statistics.median(x.get("zero_gather_ms", 0) for x in rows),
            "gather_busy_ms": statistics.median(x.get("zero_gather_busy_ms", 0) for x in rows)}


def peer(launcher, args):
    """bench/peer_pytorch.py with args, started by launcher (a command prefix): its last JSON line"""
    cmd = launcher + ["/usr/bin/python3", os.path.join(ROOT, "bench", "peer_pytorch.py")] + args
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode or not lines:
        sys.exit(f"netlab_bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-3000:]}")
    return json.loads(lines[-1])


def torch_alone(model, windows):
    batch, _ = MODELS[model]
    out = peer(["taskset", "-c", "0"], ["--one", "--models", model, "--batch", str(batch), "--threads", "1",
                "--steps", str(10 * windows)])
    return {"step_ms": 1e3 * batch / out["img_s"]}


def torch(model, cap, windows):
    batch, _ = MODELS[model]
    out = peer([NETLAB, "--rate", cap, "each", "--"], ["--env-ddp", "--models", model, "--batch", str(batch),
                "--threads", "1", "--steps", str(10 * windows)])
    return {"step_ms": out["step_ms"]}


def spread(xs):
    return f"{statistics.median(xs):7.1f} ({min(xs):.1f}-{max(xs):.1f})"


def med(xs):
    return statistics.median(xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--caps", default="1gbit,5gbit")
    ap.add_argument("--models", default="cnn,resnet20")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--windows", type=int, default=4, help="timed windows of 10 steps each run")
    ap.add_argument("--sweep", help="instead: overlap on at each of these bucket_mb (e.g. 0.25,1,4,25) and auto")
    ap.add_argument("--zero", action="store_true", help="instead: zero 0, 1 and 2 with zero_overlap off and on")
    ap.add_argument("--json", help="append one JSON line per cap and model here")
    args = ap.parse_args()
    if os.geteuid():
        sys.exit("netlab_bench: needs root (network namespaces); HINT: sudo /usr/bin/python3 bench/netlab_bench.py")
    metrics = os.path.join(tempfile.mkdtemp(prefix="netlab_bench."), "m.jsonl")
    print(f"2 ranks x 1 thread, each in its own network namespace, links capped by tc tbf; {args.pairs} rounds; "
          "step ms, median (min-max)")
    zero_modes = [("0", "auto"), ("1", "false"), ("1", "true"), ("1", "auto"), ("2", "false"), ("2", "true"),
                  ("2", "auto")]
    if args.zero:
        print(f"{'cap':>6} {'model':>9} | " + " ".join(f"{'zero ' + z + ('' if z == '0' else ' ' + o):>19}"
                                                      for z, o in zero_modes) +
              " | gather waited/took ms: zero 1 off, on; zero 2 off, on")
    elif args.sweep:
        sizes = args.sweep.split(",") + ["auto"]
        print(f"{'cap':>6} {'model':>9} | " + " ".join(f"{'mb ' + x:>19}" for x in sizes) + " | auto/best  chosen")
    else:
        print(f"{'cap':>6} {'model':>9} | {'alone':>19} {'comm alone':>19} {'overlap off':>19} {'overlap on':>19} "
              f"{'tree':>19} {'auto':>19} | {'torch alone':>19} {'torch ddp':>19} | on/bound auto/bound tree/on torch/on hidden Gbit/s")
    for cap in args.caps.split(","):
        for model in args.models.split(","):
            if args.zero:
                runs = {f"{z}{o}": [] for z, o in zero_modes}
                for _ in range(args.pairs):  # turn by turn
                    for z, o in zero_modes:
                        runs[f"{z}{o}"].append(ours(model, cap, "on", args.windows, metrics, "25", [
                            f"distributed.zero={z}", f"distributed.zero_overlap={o}", "optim.name=adamw",
                            "optim.lr=0.001"]))
                col = {k: [r["step_ms"] for r in v] for k, v in runs.items()}
                gathers = " ".join(f"{med([r['gather_ms'] for r in runs[k]]):.1f}/"
                                   f"{med([r['gather_busy_ms'] or r['gather_ms'] for r in runs[k]]):.1f}"
                                   for k in ("1false", "1true", "2false", "2true"))
                print(f"{cap:>6} {model:>9} | " + " ".join(spread(col[f"{z}{o}"]) for z, o in zero_modes) +
                      f" | {gathers}", flush=True)
                record = {"bench": "netlab_zero", "cap": cap, "model": model, "runs": runs}
            elif args.sweep:
                runs = {x: [] for x in sizes}
                for _ in range(args.pairs):  # turn by turn
                    for x in sizes:
                        runs[x].append(ours(model, cap, "on", args.windows, metrics, x))
                col = {x: [r["step_ms"] for r in v] for x, v in runs.items()}
                best = min(med(col[x]) for x in sizes[:-1])
                chosen = sorted({r["bucket_mb"] for r in runs["auto"]})
                print(f"{cap:>6} {model:>9} | " + " ".join(spread(col[x]) for x in sizes) +
                      f" | {med(col['auto']) / best:9.3f}  {chosen}", flush=True)
                record = {"bench": "netlab_sweep", "cap": cap, "model": model, "runs": runs}
            else:
                runs = {k: [] for k in ("alone", "off", "on", "tree", "auto", "torch_alone", "torch")}
                for _ in range(args.pairs):  # turn by turn: the machine's drift hits every column alike
                    for mode in ("alone", "off", "on"):
                        runs[mode].append(ours(model, cap, mode, args.windows, metrics))
                    runs["tree"].append(ours(model, cap, "on", args.windows, metrics, env=TREE))
                    runs["auto"].append(ours(model, cap, "on", args.windows, metrics, "auto"))
                    runs["torch_alone"].append(torch_alone(model, args.windows))
                    runs["torch"].append(torch(model, cap, args.windows))
                col = {k: [x["step_ms"] for x in v] for k, v in runs.items()}
                comm = [x["comm_ms"] for x in runs["off"]]
                bound = [max(a, c) for a, c in zip(col["alone"], comm)]
                on_bound = med([o / b for o, b in zip(col["on"], bound)])
                auto_bound = med([o / b for o, b in zip(col["auto"], bound)])
                torch_on = med([t / o for t, o in zip(col["torch"], col["on"])])
                tree_on = med([t / o for t, o in zip(col["tree"], col["on"])])
                hidden = med([1 - x["exposed_ms"] / x["comm_ms"] if x["comm_ms"] else 0 for x in runs["on"]])
                gbit = med([x["gbit_s"] for x in runs["off"]])
                print(f"{cap:>6} {model:>9} | {spread(col['alone'])} {spread(comm)} {spread(col['off'])} "
                      f"{spread(col['on'])} {spread(col['tree'])} {spread(col['auto'])} | {spread(col['torch_alone'])} "
                      f"{spread(col['torch'])} | {on_bound:8.2f} {auto_bound:10.2f} {tree_on:7.2f} {torch_on:8.2f} "
                      f"{100 * hidden:5.0f}% {gbit:6.2f}", flush=True)
                record = {"bench": "netlab", "cap": cap, "model": model, "runs": runs}
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
