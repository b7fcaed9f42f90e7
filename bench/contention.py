#!/usr/bin/env python3
"""contention.py: dptrain and PyTorch on a machine that is not theirs alone (issue 28 item 1).

A 2-thread run shares the cores with whatever else runs there: a CI neighbour, a data loader,
an editor's indexer. For each model it runs dptrain's bench_step and PyTorch's peer_pytorch.py
--one (the same model, batch, SGD with momentum, threads) alone and beside one busy process
(a Python loop spinning on one core), turn by turn: each pair runs the four in a rotated order
(the machine drifts: +-25% between runs). It prints each side's median img/s alone and beside
the busy process, and the median (and range) of the per-pair ratio busy / alone: how much of
its speed each keeps. dptrain with 1 thread runs too (what [train] threads = 1 gives, the HINT of
the warning a run prints when its threads wait for cores). --ours-env VAR=VALUE runs dptrain
under that environment (e.g. OMP_WAIT_POLICY=passive) as one more contender. --adapt runs
./train on the CNN with [train] adapt_threads off and on, alone and beside the busy process.
    /usr/bin/python3 bench/contention.py [--pairs 3] [--only cnn] [--threads 2] [--ours-env OMP_WAIT_POLICY=passive]
    /usr/bin/python3 bench/contention.py --adapt [--pairs 3]
Debian: python3-torch (run with /usr/bin/python3)."""
import argparse, contextlib, json, os, re, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CASES = {"mlp": (64, 300), "cnn": (64, 60), "resnet20": (128, 6)}  # batch, timed steps


def run_json(cmd, env):
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800)
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)["img_s"]
    raise RuntimeError(f"{' '.join(cmd)} gave no result:\n{out.stdout}\n{out.stderr}")


@contextlib.contextmanager
def beside_busy(busy):
    """With busy: one process spinning on one core, started before and stopped after the run."""
    spinner = None
    if busy:
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.3)
    try:
        yield
    finally:
        if spinner:
            spinner.kill()
            spinner.wait()


def timed(cmd, env, busy):
    with beside_busy(busy):
        return run_json(cmd, env)


def train_img_s(cmd, busy):
    """./train's img/s over the whole run (start and evaluation included): steps x batch / time."""
    with beside_busy(busy):
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    m = re.search(r"^done \| .*\| (\d+) steps \| ([0-9.]+) s", out.stdout, re.M)
    if not m:
        raise RuntimeError(f"{' '.join(cmd)} gave no result:\n{out.stdout}\n{out.stderr}")
    changes = [l for l in out.stdout.splitlines() if l.startswith("threads ")]
    return int(m.group(1)) * 64 / float(m.group(2)), changes


def adapt(args):
    """[train] adapt_threads: ./train on the CNN (2 threads, 600 steps, log windows of 50) with and
    without it, alone and beside the busy process, the four in a rotated order per round."""
    base = ["./train", "configs/fmnist_cnn.ini", "--set", f"train.threads={args.threads}", "--set", "train.max_steps=600",
            "--set", "log.interval=50", "--set", "data.test_limit=200", "--set", "checkpoint.dir=/tmp/dpt_contention",
            "--set", "checkpoint.final=false"]
    runs = [(a, busy) for busy in (True, False) for a in (False, True)]
    got = {r: [] for r in runs}
    for p in range(args.pairs):
        for a, busy in runs[p % len(runs):] + runs[:p % len(runs)]:
            img_s, changes = train_img_s(base + ["--set", f"train.adapt_threads={'true' if a else 'false'}"], busy)
            got[(a, busy)].append(img_s)
            if changes:
                print(f"  round {p + 1}, adapt_threads {'on' if a else 'off'}, {'busy' if busy else 'alone'}: "
                      + "; ".join(changes))
    print(f"cnn batch 64 ./train, {args.threads} threads, {args.pairs} rounds; img/s over each run (median), "
          f"adapt_threads on / off per round (median [range])")
    for busy in (True, False):
        r = [on / off for off, on in zip(got[(False, busy)], got[(True, busy)])]
        print(f"  {'beside a busy process' if busy else 'alone':24} off {statistics.median(got[(False, busy)]):8.0f} "
              f"{[round(x) for x in got[(False, busy)]]}  on {statistics.median(got[(True, busy)]):8.0f} "
              f"{[round(x) for x in got[(True, busy)]]}  on/off {statistics.median(r):.2f} [{min(r):.2f}, {max(r):.2f}]")
    print(json.dumps({"bench": "contention_adapt", "threads": args.threads, "pairs": args.pairs,
                      "img_s": {f"adapt_{'on' if a else 'off'}{'_busy' if b else ''}": [round(x, 1) for x in v]
                                for (a, b), v in got.items()}}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--adapt", action="store_true", help="./train with [train] adapt_threads on and off instead")
    ap.add_argument("--only", default="cnn", help="comma-separated models (mlp,cnn,resnet20)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ours-env", action="append", default=[], help="VAR=VALUE for an extra dptrain contender")
    args = ap.parse_args()
    if args.adapt:
        return adapt(args)
    for model in args.only.split(","):
        batch, steps = CASES[model]
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        variant = dict(env, **dict(kv.split("=", 1) for kv in args.ours_env))
        ours = [os.path.join(ROOT, "build/bench/bench_step"), model, str(batch), str(args.threads), str(steps)]
        torch = ["/usr/bin/python3", os.path.join(HERE, "peer_pytorch.py"), "--one", "--models", model,
                 "--batch", str(batch), "--threads", str(args.threads), "--steps", str(steps)]
        one = [os.path.join(ROOT, "build/bench/bench_step"), model, str(batch), "1", str(steps)]
        who = {"ours": (ours, env), "torch": (torch, env), "ours_1_thread": (one, dict(env, OMP_NUM_THREADS="1"))}
        if args.ours_env:
            who["ours_env"] = (ours, variant)
        runs = [(w, busy) for w in who for busy in (False, True)]
        got = {r: [] for r in runs}
        for p in range(args.pairs):
            order = runs[p % len(runs):] + runs[:p % len(runs)]
            for w, busy in order:
                cmd, e = who[w]
                got[(w, busy)].append(timed(cmd, e, busy))
        med = {r: statistics.median(v) for r, v in got.items()}
        keep = {w: [b / a for a, b in zip(got[(w, False)], got[(w, True)])] for w in who}
        print(f"{model} batch {batch}, {args.threads} threads, {args.pairs} pairs; img/s medians, kept = busy / alone "
              f"per pair (median [range])")
        for w in who:
            k = keep[w]
            label = w if w != "ours_env" else "ours " + " ".join(args.ours_env)
            print(f"  {label:40} alone {med[(w, False)]:8.0f}  beside a busy process {med[(w, True)]:8.0f}  "
                  f"kept {statistics.median(k):.2f} [{min(k):.2f}, {max(k):.2f}]")
        print(json.dumps({"bench": "contention", "model": model, "batch": batch, "threads": args.threads,
                          "pairs": args.pairs, "ours_env": args.ours_env,
                          "img_s": {f"{w}{'_busy' if b else ''}": [round(x, 1) for x in v] for (w, b), v in got.items()},
                          "kept": {w: [round(x, 3) for x in v] for w, v in keep.items()}}), flush=True)


if __name__ == "__main__":
    main()
