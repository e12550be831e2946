#!/usr/bin/env python3
"""PyTorch 1.13's training step for the model of bench/bench_train.cpp (examples/train_char_gpt.cpp's GPT: vocabulary
256, context 128, d_model 128, 4 heads, 4 layers, GELU (tanh), tied head), float32, batch 16 x 128: forward, backward
and AdamW (torch.optim.AdamW, the single-tensor form), and the forward alone, on 1 and 2 threads. Written with torch
operations (softmax(Q K^T / sqrt(d) + causal) V, as nanoGPT's manual path: PyTorch 1.13 has no fused attention on
CPU). Prints one JSON object per measurement: the median seconds of the repetitions, and tokens per second.

    /usr/bin/python3 scripts/bench_train_torch.py [--reps 7]
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

V, C, D, H, NL, B = 256, 128, 128, 4, 4, 16


def params(g):
    r = lambda *s, scale=0.02: (torch.randn(*s, generator=g) * scale).requires_grad_()
    p = {"wte": r(V, D), "wpe": r(C, D)}
    for i in range(NL):
        p[f"{i}.ln1w"], p[f"{i}.ln1b"] = torch.ones(D).requires_grad_(), torch.zeros(D).requires_grad_()
        p[f"{i}.ln2w"], p[f"{i}.ln2b"] = torch.ones(D).requires_grad_(), torch.zeros(D).requires_grad_()
        p[f"{i}.attn_w"], p[f"{i}.attn_b"] = r(D, 3 * D), torch.zeros(3 * D).requires_grad_()
        p[f"{i}.proj_w"], p[f"{i}.proj_b"] = r(D, D), torch.zeros(D).requires_grad_()
        p[f"{i}.fc_w"], p[f"{i}.fc_b"] = r(D, 4 * D), torch.zeros(4 * D).requires_grad_()
        p[f"{i}.fc2_w"], p[f"{i}.fc2_b"] = r(4 * D, D), torch.zeros(D).requires_grad_()
    p["lnfw"], p["lnfb"] = torch.ones(D).requires_grad_(), torch.zeros(D).requires_grad_()
    return p


def loss_of(p, ids, targets, mask):
    b, t = ids.shape
    x = p["wte"][ids] + p["wpe"][:t]
    for i in range(NL):
        a = F.layer_norm(x, (D,), p[f"{i}.ln1w"], p[f"{i}.ln1b"])
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in torch.addmm(p[f"{i}.attn_b"], a.view(-1, D), p[f"{i}.attn_w"]).view(b, t, 3 * D).split(D, dim=-1))
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D // H))
        s = s.masked_fill(mask, float("-inf"))
        o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b * t, D)
        x = x + torch.addmm(p[f"{i}.proj_b"], o, p[f"{i}.proj_w"]).view(b, t, D)
        a = F.layer_norm(x, (D,), p[f"{i}.ln2w"], p[f"{i}.ln2b"]).view(-1, D)
        u = F.gelu(torch.addmm(p[f"{i}.fc_b"], a, p[f"{i}.fc_w"]), approximate="tanh")
        x = x + torch.addmm(p[f"{i}.fc2_b"], u, p[f"{i}.fc2_w"]).view(b, t, D)
    x = F.layer_norm(x, (D,), p["lnfw"], p["lnfb"])
    logits = x.view(-1, D) @ p["wte"].T
    return F.cross_entropy(logits, targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    g = torch.Generator().manual_seed(1)
    p = params(g)
    opt = torch.optim.AdamW(list(p.values()), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
    ids = torch.randint(0, V, (B, C), generator=g)
    targets = torch.randint(0, V, (B, C), generator=g)
    mask = torch.ones(C, C, dtype=torch.bool).triu(1)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for kind in ("step", "forward"):
            times = []
            for r in range(a.reps + 1):
                t0 = time.perf_counter()
                if kind == "step":
                    opt.zero_grad(set_to_none=False)
                    loss = loss_of(p, ids, targets, mask)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
                    opt.step()
                else:
                    with torch.no_grad():
                        loss_of(p, ids, targets, mask)
                if r:  # (the first is a warm-up)
                    times.append(time.perf_counter() - t0)
            s = statistics.median(times)
            print(json.dumps({"name": f"torch_train/{kind}/{threads}", "seconds": s, "tokens_per_second": B * C / s,
                              "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
