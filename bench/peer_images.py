#!/usr/bin/env python3
"""peer_images.py: torchvision's ImageFolder + DataLoader on the folder bench_images reads, the
same transforms (RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize with
ImageNet's mean and std), batch and worker count; prints img/s and a JSON line.
    peer_images.py DIR WORKERS BATCHES [BATCH]
Debian: python3-torch python3-torchvision (run with /usr/bin/python3)."""
import json, os, sys, time
import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

def main():
    d, workers, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    torch.set_num_threads(1)
    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = datasets.ImageFolder(os.path.join(d, "train"), tf)
    dl = DataLoader(ds, batch_size=batch, shuffle=True, drop_last=True, num_workers=workers,
                    prefetch_factor=2 if workers else None, persistent_workers=workers > 0)
    it = iter(dl)
    def nxt():
        nonlocal it
        try:
            return next(it)
        except StopIteration:
            it = iter(dl)
            return next(it)
    nxt()  # warm-up: workers started
    t0 = time.perf_counter()
    for _ in range(batches):
        nxt()
    s = time.perf_counter() - t0
    img_s = batches * batch / s
    print(f"torchvision ImageFolder + DataLoader | {workers} workers | batch {batch} | {batches} batches | "
          f"{img_s:.1f} img/s")
    print(json.dumps({"bench": "images_torchvision", "workers": workers, "batch": batch, "img_s": round(img_s, 2)}))

if __name__ == "__main__":
    main()
