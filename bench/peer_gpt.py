#!/usr/bin/env python3
"""peer_gpt.py: the PyTorch side of gpt_side_by_side.py: GPT-2 as llm.c trains it (the same
architecture as dptrain's [model] name = gpt: pre-LN blocks, causal attention, tanh GELU, tied
embeddings, vocabulary padded for the embedding only), AdamW, fp32, on random tokens.

    peer_gpt.py --layers L --heads H --channels C --vocab V --padded-vocab VP --seq T --batch B
                --threads N --steps S [--init-llmc CKPT --tokens SHARD]
Prints one JSON line: tok_s over the timed steps (after 3 warm-up steps), and the last loss.
With --init-llmc and --tokens (gpt_exactness.py): the weights of an llm.c checkpoint, batch i the
B*T+1 tokens from i*B*T of the shard (llm.c's order), AdamW as llm.c's train_gpt2.c (lr 1e-4,
0.9, 0.999, 1e-8, no weight decay), no warm-up steps; the JSON line has every step's loss.
Attention: PyTorch 2's scaled_dot_product_attention where there is one (the GPU image), else
(Debian's PyTorch 1.13) the materialised masked softmax, as nanoGPT's fallback path. --device
cuda runs on the GPU (gpu_check.sh). --bf16: the forward and the loss under
torch.autocast(bfloat16) (its matmuls in bf16, softmax and layer norm in fp32), the weights
and the optimizer fp32. Run with /usr/bin/python3 here."""
import argparse, json, math, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H, T):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2: its fused (flash) attention
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # 1.13 (Debian's): the materialised masked softmax, as nanoGPT's fallback
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = F.softmax(att.masked_fill(~self.mask[:T, :T], float("-inf")), dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, V, VP, T):
        super().__init__()
        self.V = V
        self.wte, self.wpe = nn.Embedding(VP, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H, T) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for name, p in self.named_parameters():  # GPT-2's initialisation, as dptrain's
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif "ln" not in name:
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight[: self.V].t()  # tied, the real vocabulary only
        return F.cross_entropy(logits.reshape(-1, self.V), targets.reshape(-1))


def load_llmc(m, path, L):
    """llm.c's fp32 GPT-2 file: 256 int32 header, then each kind of tensor for every layer."""
    import numpy as np
    with open(path, "rb") as f:
        h = np.frombuffer(f.read(1024), dtype=np.int32)
        assert h[0] == 20240326 and h[1] == 3, "not an llm.c fp32 checkpoint"
        w = np.frombuffer(f.read(), dtype=np.float32)
    kinds = [[m.wte.weight], [m.wpe.weight]] + [[rgetattr(b, n) for b in m.h] for n in (
        "ln_1.weight", "ln_1.bias", "c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias", "ln_2.weight",
        "ln_2.bias", "c_fc.weight", "c_fc.bias", "mlp_proj.weight", "mlp_proj.bias")] + [[m.ln_f.weight], [m.ln_f.bias]]
    at = 0
    with torch.no_grad():
        for ts in kinds:
            for t in ts:
                n = t.numel()
                t.copy_(torch.from_numpy(w[at:at + n].copy()).view_as(t))
                at += n
    assert at == w.size, f"{path}: {w.size} floats, the model has {at}"


def rgetattr(o, name):
    for part in name.split("."):
        o = getattr(o, part)
    return o


def main():
    ap = argparse.ArgumentParser()
    for k, d in (("layers", 4), ("heads", 4), ("channels", 256), ("vocab", 50257), ("padded-vocab", 50304),
                 ("seq", 256), ("batch", 8), ("threads", 1), ("steps", 10)):
        ap.add_argument("--" + k, type=int, default=d)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (gpu_check.sh)")
    ap.add_argument("--bf16", action="store_true", help="forward and loss under torch.autocast(bfloat16)")
    ap.add_argument("--init-llmc")
    ap.add_argument("--tokens")
    a = ap.parse_args()
    if a.init_llmc:
        return exact(a)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = GPT(a.layers, a.heads, a.channels, a.vocab, a.padded_vocab, a.seq).to(a.device)
    decay = [p for p in m.parameters() if p.dim() >= 2]
    other = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.999), eps=1e-8, foreach=True)
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, a.vocab, (a.steps + 3, a.batch, a.seq + 1), generator=g).to(a.device)
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    loss = None
    for i in range(a.steps + 3):
        if i == 3:
            sync()
            t0 = time.perf_counter()
        x, y = data[i, :, :-1], data[i, :, 1:]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=a.device.split(":")[0], dtype=torch.bfloat16, enabled=a.bf16):
            loss = m(x, y)
        loss.backward()
        opt.step()
    sync()
    dt = time.perf_counter() - t0
    print(json.dumps({"tok_s": a.steps * a.batch * a.seq / dt, "loss": float(loss), "threads": a.threads,
                      "bf16": a.bf16}))


def exact(a):
    import numpy as np
    torch.set_num_threads(a.threads)
    m = GPT(a.layers, a.heads, a.channels, a.vocab, a.padded_vocab, a.seq)
    load_llmc(m, a.init_llmc, a.layers)
    with open(a.tokens, "rb") as f:
        f.read(1024)
        tok = torch.from_numpy(np.frombuffer(f.read(), dtype=np.uint16).astype(np.int64))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    B, T, losses = a.batch, a.seq, []
    for i in range(a.steps):
        buf = tok[i * B * T: i * B * T + B * T + 1]
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=a.device.split(":")[0], dtype=torch.bfloat16, enabled=a.bf16):
            loss = m(x, y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
