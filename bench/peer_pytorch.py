#!/usr/bin/env python3
"""peer_pytorch.py: the PyTorch peer of bench_mlp/bench_conv: the same models (MLP
784-256-256-10, the 2-stage CNN, CIFAR-style ResNet-20 with 1x1 projection shortcuts,
ResNet-50 v1.5) trained with SGD on random data of the same shapes, same batch and threads.
Prints a table, one JSON line, and with --ours FILE (bench_conv's JSON line) the ratio.
Debian: apt-get install python3-torch (runs with /usr/bin/python3)."""
import argparse, json, time
import torch
import torch.nn as nn

def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))

def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))

class Block(nn.Module):
    def __init__(self, cin, planes, stride, bottleneck):
        super().__init__()
        out = planes * 4 if bottleneck else planes
        if bottleneck:
            self.body = nn.Sequential(
                nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(),
                nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(),
                nn.Conv2d(planes, out, 1, bias=False), nn.BatchNorm2d(out))
        else:
            self.body = nn.Sequential(
                nn.Conv2d(cin, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(),
                nn.Conv2d(planes, planes, 3, 1, 1, bias=False), nn.BatchNorm2d(planes))
        self.down = None
        if stride != 1 or cin != out:
            self.down = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))
    def forward(self, x):
        return torch.relu(self.body(x) + (self.down(x) if self.down is not None else x))

def resnet(blocks, widths, bottleneck, cifar, cin, classes):
    stem = [nn.Conv2d(cin, widths[0], 3, 1, 1, bias=False)] if cifar else \
           [nn.Conv2d(cin, widths[0], 7, 2, 3, bias=False)]
    layers = stem + [nn.BatchNorm2d(widths[0]), nn.ReLU()] + ([] if cifar else [nn.MaxPool2d(3, 2, 1)])
    c = widths[0]
    for stage, (n, w) in enumerate(zip(blocks, widths)):
        for j in range(n):
            layers.append(Block(c, w, 2 if j == 0 and stage > 0 else 1, bottleneck))
            c = w * 4 if bottleneck else w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes)]
    return nn.Sequential(*layers)

def vit():  # configs/vit_fmnist.ini's: torchvision's VisionTransformer with a 1-channel patch convolution
    import torchvision
    m = torchvision.models.VisionTransformer(image_size=28, patch_size=7, num_layers=4, num_heads=4, hidden_dim=64,
                                             mlp_dim=128, num_classes=10)
    m.conv_proj = nn.Conv2d(1, 64, 7, 7)
    return m

MODELS = {  # name: (builder, input shape, classes, batch)
    "mlp": (mlp, (1, 28, 28), 10, 64),
    "cnn": (cnn, (1, 28, 28), 10, 32),
    "resnet20": (lambda: resnet([3, 3, 3], [16, 32, 64], False, True, 3, 10), (3, 32, 32), 10, 32),
    "resnet50": (lambda: resnet([3, 4, 6, 3], [64, 128, 256, 512], True, False, 3, 1000), (3, 224, 224), 1000, 32),
    "vit": (vit, (1, 28, 28), 10, 64),
    "vit_ti": (lambda: __import__("torchvision").models.VisionTransformer(
        image_size=224, patch_size=16, num_layers=12, num_heads=3, hidden_dim=192, mlp_dim=768, num_classes=1000),
        (3, 224, 224), 1000, 8),
}

def img_s(name, steps, device, batch=None, bf16=False, channels_last=False):
    build, shape, classes, default_batch = MODELS[name]
    batch = batch or default_batch
    model = build().to(device)
    x = torch.randn(batch, *shape, device=device)
    if channels_last and len(shape) == 3:  # PyTorch's recipe: the model and its input both
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    y = torch.randint(0, classes, (batch,), device=device)
    loss_fn = nn.CrossEntropyLoss()
    for i in range(steps + 2):  # two warm-up steps, as bench_step
        if i == 2:
            if device == "cuda": torch.cuda.synchronize()
            t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    if device == "cuda": torch.cuda.synchronize()
    return batch * steps / (time.perf_counter() - t0), sum(p.numel() for p in model.parameters())

ZERO_STATE = {}  # ddp_seconds with zero: the optimizer state this rank holds, MiB

def ddp_seconds(name, steps, batch, bucket_mb=25.0, adamw=False, zero=False):
    """The timed part of a gloo DDP rank (the process group already joined): same model,
    per-rank batch, SGD with momentum (adamw: AdamW, lr 1e-3; zero: wrapped in
    ZeroRedundancyOptimizer, each rank keeping its parameters' state); two warm-up steps, then
    the ranks' summed seconds."""
    import torch.distributed as dist
    build, shape, classes, _ = MODELS[name]
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(build(), bucket_cap_mb=bucket_mb)
    if zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW if adamw else torch.optim.SGD,
                                      lr=1e-3 if adamw else 0.01, **({} if adamw else {"momentum": 0.9}))
    elif adamw:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, *shape)
    y = torch.randint(0, classes, (batch,))
    loss_fn = nn.CrossEntropyLoss()
    for i in range(steps + 2):
        if i == 2:
            dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    t = torch.tensor([time.perf_counter() - t0])
    dist.all_reduce(t)
    inner = opt.optim if zero else opt  # the state this rank holds
    ZERO_STATE["mb"] = sum(v.numel() * v.element_size() for st in inner.state.values() for v in st.values()
                           if torch.is_tensor(v) and v.dim() > 0) / 1048576
    return t.item()

def ddp_worker(rank, world, name, steps, batch, threads, port, out, adamw=False, zero=False):
    """One gloo DDP rank (the peer of `mpirun -np 2 bench_step`): the ranks' mean step time
    gives the global img/s (with rank 0's optimizer state, MiB)."""
    import os
    import torch.distributed as dist
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    seconds = ddp_seconds(name, steps, batch, adamw=adamw, zero=zero)
    if rank == 0:
        out.put((batch * world * steps / (seconds / world), ZERO_STATE["mb"]))
    dist.destroy_process_group()

def ddp_env_main(name, steps, batch, threads, bucket_mb):
    """One gloo DDP rank started by a launcher that sets torchrun's variables (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT: scripts/netlab.sh each): rank 0 prints the ranks' mean step time
    over the timed steps, in ms, as one JSON line."""
    import torch.distributed as dist
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    seconds = ddp_seconds(name, steps, batch, bucket_mb)
    if rank == 0:
        print(json.dumps({"bench": "torch_ddp_env", "model": name, "batch": batch, "threads": threads, "ranks": world,
                          "bucket_mb": bucket_mb, "torch": torch.__version__,
                          "step_ms": round(1e3 * seconds / world / steps, 3)}), flush=True)
    dist.destroy_process_group()

def ddp_img_s(name, steps, batch, threads, world=2, adamw=False, zero=False, state=None):
    import random
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = random.randint(20000, 40000)
    procs = [ctx.Process(target=ddp_worker, args=(r, world, name, steps, batch, threads, port, out, adamw, zero))
             for r in range(world)]
    for p in procs: p.start()
    rate, mb = out.get()
    for p in procs: p.join()
    if state is not None: state["optim_state_mb"] = round(mb, 4)
    return rate

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", default="mlp,cnn,resnet20")
    ap.add_argument("--ours", help="a file with bench_conv's and bench_mlp's JSON lines, to print ratios")
    ap.add_argument("--batch", type=int, help="batch for every model (default: each model's own)")
    ap.add_argument("--steps", type=int, help="timed steps for every model (default: each model's own)")
    ap.add_argument("--tf32", action="store_true", help="cuda: allow TF32 (dptrain's [train] tf32 = true)")
    ap.add_argument("--ddp", type=int, default=0, help="N gloo DDP ranks on this machine, --threads each")
    ap.add_argument("--bf16", action="store_true", help="torch.autocast(dtype=torch.bfloat16) around forward and loss")
    ap.add_argument("--channels-last", action="store_true",
                    help="model and input in torch.channels_last (dptrain's [train] memory_format = nhwc)")
    ap.add_argument("--one", action="store_true", help="one model: print only its JSON line (side_by_side.py)")
    ap.add_argument("--env-ddp", action="store_true",
                    help="one gloo DDP rank of --models (one model), RANK/WORLD_SIZE/MASTER_* from the environment "
                         "(scripts/netlab.sh each); rank 0 prints the mean step time")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="--env-ddp: DDP's bucket_cap_mb")
    ap.add_argument("--adamw", action="store_true", help="--ddp: AdamW (lr 1e-3) instead of SGD with momentum")
    ap.add_argument("--zero", action="store_true",
                    help="--ddp: the optimizer in torch.distributed.optim.ZeroRedundancyOptimizer (ZeRO stage 1)")
    args = ap.parse_args()
    if args.env_ddp:
        ddp_env_main(args.models, args.steps or 20, args.batch or MODELS[args.models][3], args.threads, args.bucket_mb)
        return
    if args.device == "cuda":  # the same math as dptrain's default: FP32, no TF32, cuDNN heuristics
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cudnn.benchmark = False
    if args.one:
        name = args.models
        batch = args.batch or MODELS[name][3]
        extra = {}
        if args.ddp:
            rate = ddp_img_s(name, args.steps, batch, args.threads, args.ddp, args.adamw, args.zero, extra)
        else:
            torch.set_num_threads(args.threads)
            torch.manual_seed(0)
            rate, _ = img_s(name, args.steps, args.device, batch, args.bf16, args.channels_last)
        print(json.dumps({"bench": "torch_step", "model": name, "batch": batch, "threads": args.threads, "bf16": args.bf16,
                          "channels_last": args.channels_last,
                          "ranks": max(args.ddp, 1), "torch": torch.__version__, "img_s": round(rate, 2),
                          "adamw": args.adamw, "zero": args.zero, **extra}))
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    steps = {"mlp": 300, "cnn": 20, "resnet20": 5, "resnet50": 2, "vit": 20, "vit_ti": 2}
    if args.device == "cuda": steps = {"mlp": 300, "cnn": 100, "resnet20": 50, "resnet50": 20, "vit": 100, "vit_ti": 20}
    if args.steps: steps = {k: args.steps for k in steps}
    ours = {}
    if args.ours:
        for line in open(args.ours):
            if line.startswith("{"):
                j = json.loads(line)
                if j.get("bench") == "conv":
                    ours.update({"cnn": j["cnn_img_s"], "resnet20": j["resnet20_img_s"], "resnet50": j["resnet50_img_s"]})
                if j.get("bench") == "mlp":
                    for r in j["results"]:
                        if r["threads"] == args.threads and r["batch"] == 64: ours["mlp"] = r["img_s"]
    print(f"PyTorch {torch.__version__} | device {args.device} | {args.threads} threads | SGD training steps")
    print(f"{'model':10} {'batch':>6} {'params':>10} {'torch img/s':>12} {'dptrain img/s':>14} {'ratio':>7}")
    results = []
    for name in args.models.split(","):
        rate, params = img_s(name, steps[name], args.device, args.batch)
        batch = args.batch or MODELS[name][3]
        mine = ours.get(name) or 0
        ratio = f"{mine / rate:.2f}" if mine else "-"
        print(f"{name:10} {batch:>6} {params:>10} {rate:>12.1f} {mine:>14.1f} {ratio:>7}")
        results.append({"model": name, "batch": batch, "torch_img_s": round(rate, 2),
                        "dptrain_img_s": mine, "ratio": (mine / rate) if mine else None})
    print(json.dumps({"bench": "peer_pytorch", "device": args.device, "threads": args.threads,
                      "torch": torch.__version__, "results": results}))

if __name__ == "__main__":
    main()
