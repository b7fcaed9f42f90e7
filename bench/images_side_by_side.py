#!/usr/bin/env python3
"""images_side_by_side.py: the folder source's decode + augment throughput against torchvision's
ImageFolder + DataLoader, turn by turn in one run: the same ImageNet-sized JPEGs (about 500x375,
quality 90, written once by scripts/make_image_folder.sh), RandomResizedCrop(224) + flip +
normalisation, batch 64, the same worker count (1 and 2), P pairs with the order swapped each
pair; medians, the median per-pair ratio per worker and its range, one JSON line.
    bench/images_side_by_side.py [--pairs 3] [--batches 12] [--dir build/bench-images]"""
import argparse, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

def run_json(cmd):
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)["img_s"]
    raise RuntimeError(f"{' '.join(cmd)} gave no result:\n{out.stdout}\n{out.stderr}")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--dir", default=os.path.join(ROOT, "build/bench-images"))
    a = ap.parse_args()
    if not os.path.isdir(os.path.join(a.dir, "train")):
        subprocess.run([os.path.join(ROOT, "scripts/make_image_folder.sh"), a.dir, "--train", "100", "--val", "2"],
                       check=True)
    results = []
    print(f"{'workers':>7} {'dptrain img/s':>14} {'torchvision img/s':>18} {'ratio (range)':>22}")
    for workers in (1, 2):
        ours, peer, ratios = [], [], []
        for p in range(a.pairs):
            got = {}
            for who in (["ours", "peer"] if p % 2 == 0 else ["peer", "ours"]):
                cmd = [os.path.join(ROOT, "build/bench/bench_images")] if who == "ours" else \
                      ["/usr/bin/python3", os.path.join(HERE, "peer_images.py")]
                got[who] = run_json(cmd + [a.dir, str(workers), str(a.batches)])
            ours.append(got["ours"]); peer.append(got["peer"]); ratios.append(got["ours"] / got["peer"])
        r = dict(workers=workers, ours=statistics.median(ours), torchvision=statistics.median(peer),
                 ratio=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios))
        results.append(r)
        print(f"{workers:>7} {r['ours']:>14.0f} {r['torchvision']:>18.0f} "
              f"{r['ratio']:>10.2f} [{r['ratio_min']:.2f}, {r['ratio_max']:.2f}]")
    print(json.dumps({"bench": "images_side_by_side", "pairs": a.pairs, "results": results}))

if __name__ == "__main__":
    main()
