#!/usr/bin/env python3
"""llama_reference.py: Hugging Face's LlamaForCausalLM written again (transformers is not
installable here), as tests/llama.sh's independent reference for models/llama.c, in float64
NumPy (and, for training steps, in PyTorch where it is installed): RMSNorm
(x * rsqrt(mean(x^2) + eps) * w), rotary embeddings by rotate_half with inv_freq =
theta^(-2i/d), repeat_kv for grouped-query attention, SiLU-gated MLP, no biases.
    write DIR --layers L --hidden C --heads H --kv K --inter I --vocab V --tie 0|1 --theta X --eps E --seed S --std S
        random weights (N(0, std), norms 1 + N(0, 0.1)) as DIR/model.safetensors and the
        config.json save_pretrained writes (lm_head left out when tied, as transformers does)
    loss DIR TOKENS --seq T --batch B --batches N
        the mean cross-entropy over N batches in llm.c's order (batch i: the B T + 1 tokens from
        i B T), float64, as JSON
    greedy DIR --prompt IDS --tokens N
        the N most likely next tokens after the prompt, float64, one full forward a token, as JSON
    train DIR TOKENS --seq T --batch B --steps N --lr LR   (PyTorch)
        N steps of AdamW (betas 0.9/0.999, eps 1e-8, no weight decay) in llm.c's order, the loss
        of each step (before its update) as JSON"""
import argparse, json, math, os, sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import write  # noqa: E402


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(v["shape"]).copy()
    return out


def forward64(cfg, w, ids):
    """logits (B, T, V) of ids (B, T), float64"""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    B, T = ids.shape
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    K = cfg.get("num_key_value_heads", H)
    hs = C // H
    inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, hs, 2) / hs)
    freqs = np.outer(np.arange(T), inv)
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb)[None, None], np.sin(emb)[None, None]
    rot = lambda x: np.concatenate([-x[..., hs // 2:], x[..., :hs // 2]], -1)
    rms = lambda x, g: g * x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg["rms_norm_eps"])
    mask = np.triu(np.full((T, T), -np.inf), 1)
    h = w["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = lambda n: w[f"model.layers.{l}.{n}"]
        x = rms(h, p("input_layernorm.weight"))
        q = (x @ p("self_attn.q_proj.weight").T).reshape(B, T, H, hs).transpose(0, 2, 1, 3)
        k = (x @ p("self_attn.k_proj.weight").T).reshape(B, T, K, hs).transpose(0, 2, 1, 3)
        v = (x @ p("self_attn.v_proj.weight").T).reshape(B, T, K, hs).transpose(0, 2, 1, 3)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k, v = np.repeat(k, H // K, axis=1), np.repeat(v, H // K, axis=1)
        att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hs) + mask
        att = np.exp(att - att.max(-1, keepdims=True))
        a = ((att / att.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        h = h + a @ p("self_attn.o_proj.weight").T
        x = rms(h, p("post_attention_layernorm.weight"))
        gate = x @ p("mlp.gate_proj.weight").T
        h = h + (gate / (1 + np.exp(-gate)) * (x @ p("mlp.up_proj.weight").T)) @ p("mlp.down_proj.weight").T
    h = rms(h, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return h @ head.T


def load64(d):
    return json.load(open(os.path.join(d, "config.json"))), read_safetensors(os.path.join(d, "model.safetensors"))


def batches(path, seq, batch, count):
    tok = np.fromfile(path, dtype=np.uint16)[512:].astype(np.int64)
    for i in range(count):
        chunk = tok[i * batch * seq:(i + 1) * batch * seq + 1]
        yield chunk[:-1].reshape(batch, seq), chunk[1:].reshape(batch, seq)


def cmd_loss(a):
    cfg, w = load64(a.dir)
    total, n = 0.0, 0
    for x, y in batches(a.tokens, a.seq, a.batch, a.batches):
        z = forward64(cfg, w, x)
        z = z - z.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        total += -np.take_along_axis(logp, y[..., None], -1).sum()
        n += y.size
    print(json.dumps({"loss": total / n}))


def cmd_greedy(a):
    cfg, w = load64(a.dir)
    ids = [int(x) for x in a.prompt.split(",")]
    for _ in range(a.tokens):
        ids.append(int(forward64(cfg, w, np.array([ids]))[0, -1].argmax()))
    print(json.dumps({"ids": ids}))


def torch_llama(cfg, weights):
    import torch

    class Llama(torch.nn.Module):
        def __init__(self, cfg, weights):
            super().__init__()
            self.cfg = cfg
            self.w = torch.nn.ParameterDict({k.replace(".", "__"): torch.nn.Parameter(v) for k, v in weights.items()})
            C, H = cfg["hidden_size"], cfg["num_attention_heads"]
            hs = C // H
            inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
            self.register_buffer("inv_freq", inv)

        def p(self, name):
            return self.w[name.replace(".", "__")]

        def rms(self, x, w):
            var = x.pow(2).mean(-1, keepdim=True)
            return w * (x * torch.rsqrt(var + self.cfg["rms_norm_eps"]))

        def forward(self, ids):
            cfg = self.cfg
            B, T = ids.shape
            C, H = cfg["hidden_size"], cfg["num_attention_heads"]
            K = cfg.get("num_key_value_heads", H)
            hs = C // H
            t = torch.arange(T, dtype=torch.int64).float()
            freqs = torch.outer(t, self.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos()[None, None], emb.sin()[None, None]  # (1, 1, T, hs)

            def rot(x):
                a, b = x[..., :hs // 2], x[..., hs // 2:]
                return torch.cat((-b, a), dim=-1)

            mask = torch.full((T, T), float("-inf")).triu(1)
            h = self.p("model.embed_tokens.weight")[ids]
            for l in range(cfg["num_hidden_layers"]):
                pre = f"model.layers.{l}."
                x = self.rms(h, self.p(pre + "input_layernorm.weight"))
                q = (x @ self.p(pre + "self_attn.q_proj.weight").T).view(B, T, H, hs).transpose(1, 2)
                k = (x @ self.p(pre + "self_attn.k_proj.weight").T).view(B, T, K, hs).transpose(1, 2)
                v = (x @ self.p(pre + "self_attn.v_proj.weight").T).view(B, T, K, hs).transpose(1, 2)
                q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
                k = k.repeat_interleave(H // K, dim=1)  # repeat_kv: kv head j for query heads j*rep ...
                v = v.repeat_interleave(H // K, dim=1)
                att = (q @ k.transpose(-1, -2)) / math.sqrt(hs) + mask
                a = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
                h = h + a @ self.p(pre + "self_attn.o_proj.weight").T
                x = self.rms(h, self.p(pre + "post_attention_layernorm.weight"))
                g = torch.nn.functional.silu(x @ self.p(pre + "mlp.gate_proj.weight").T) * (x @ self.p(pre + "mlp.up_proj.weight").T)
                h = h + g @ self.p(pre + "mlp.down_proj.weight").T
            h = self.rms(h, self.p("model.norm.weight"))
            head = self.p("model.embed_tokens.weight") if cfg["tie_word_embeddings"] else self.p("lm_head.weight")
            return h @ head.T

    return Llama(cfg, {k: torch.from_numpy(v) for k, v in weights.items()})


def cmd_write(a):
    os.makedirs(a.dir, exist_ok=True)
    g = np.random.default_rng(a.seed)
    n = lambda *s: (g.standard_normal(s) * a.std).astype(np.float32)
    norm = lambda C: (1 + 0.1 * g.standard_normal(C)).astype(np.float32)
    C, I, V, hs = a.hidden, a.inter, a.vocab, a.hidden // a.heads
    t = {"model.embed_tokens.weight": n(V, C)}
    for l in range(a.layers):
        pre = f"model.layers.{l}."
        t[pre + "input_layernorm.weight"] = norm(C)
        t[pre + "self_attn.q_proj.weight"] = n(C, C)
        t[pre + "self_attn.k_proj.weight"] = n(a.kv * hs, C)
        t[pre + "self_attn.v_proj.weight"] = n(a.kv * hs, C)
        t[pre + "self_attn.o_proj.weight"] = n(C, C)
        t[pre + "post_attention_layernorm.weight"] = norm(C)
        t[pre + "mlp.gate_proj.weight"] = n(I, C)
        t[pre + "mlp.up_proj.weight"] = n(I, C)
        t[pre + "mlp.down_proj.weight"] = n(C, I)
    t["model.norm.weight"] = norm(C)
    if not a.tie:
        t["lm_head.weight"] = n(V, C)
    write(os.path.join(a.dir, "model.safetensors"), t)
    cfg = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
           "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": C,
           "initializer_range": 0.02, "intermediate_size": I, "max_position_embeddings": 2048,
           "mlp_bias": False, "model_type": "llama", "num_attention_heads": a.heads,
           "num_hidden_layers": a.layers, "num_key_value_heads": a.kv, "pretraining_tp": 1,
           "rms_norm_eps": a.eps, "rope_scaling": None, "rope_theta": a.theta,
           "tie_word_embeddings": bool(a.tie), "torch_dtype": "float32", "transformers_version": "4.44.0",
           "use_cache": True, "vocab_size": V}
    json.dump(cfg, open(os.path.join(a.dir, "config.json"), "w"), indent=2)


def cmd_train(a):
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg, w = load64(a.dir)
    m = torch_llama(cfg, w)
    opt = torch.optim.AdamW(m.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    losses = []
    for x, y in batches(a.tokens, a.seq, a.batch, a.steps):
        loss = torch.nn.functional.cross_entropy(m(torch.from_numpy(x)).reshape(-1, cfg["vocab_size"]),
                                                 torch.from_numpy(y).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(json.dumps({"losses": losses}))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir")
    for k, d in (("layers", 2), ("hidden", 64), ("heads", 4), ("kv", 2), ("inter", 160), ("vocab", 256),
                 ("tie", 0), ("seed", 1)):
        w.add_argument("--" + k, type=int, default=d)
    w.add_argument("--theta", type=float, default=10000.0)
    w.add_argument("--std", type=float, default=0.02)
    w.add_argument("--eps", type=float, default=1e-5)
    def on_tokens(name, count, default):  # DIR TOKENS --seq --batch and how many batches
        q = sub.add_parser(name)
        q.add_argument("dir")
        q.add_argument("tokens")
        for k, d in (("seq", 32), ("batch", 4), (count, default)):
            q.add_argument("--" + k, type=int, default=d)
        return q
    on_tokens("train", "steps", 10).add_argument("--lr", type=float, default=1e-3)
    on_tokens("loss", "batches", 2)
    g = sub.add_parser("greedy")
    g.add_argument("dir")
    g.add_argument("--prompt", required=True)
    g.add_argument("--tokens", type=int, default=16)
    a = ap.parse_args()
    {"write": cmd_write, "train": cmd_train, "loss": cmd_loss, "greedy": cmd_greedy}[a.cmd](a)


if __name__ == "__main__":
    main()
