#!/usr/bin/env python3
"""Trains a small GPT-2 with PyTorch 1.13 (written with torch operations) and writes its initial weights, its
batches, the loss of every step and the final weights as one safetensors file, read by tests/unit/test_train.cpp,
which trains the same model with attnx and compares step by step.

    /usr/bin/python3 scripts/torch_train_reference.py [OUTPUT]   (default: tests/data/torch_train.safetensors)

Everything is float64. The model: vocabulary 24, context 12, d_model 16, 4 heads, 2 layers (GPT-2's pre-norm
blocks, GELU (tanh), LM head tied to wte), weights named as Hugging Face's GPT2LMHeadModel ("<run>.transformer.h.0.
attn.c_attn.weight", Conv1D (in, out)). Batches: 3 sequences of 12 random ids and random targets, some of them
-100 (ignored). Runs, each from the same initial weights:
  adamw  30 steps of AdamW (betas 0.9, 0.95, eps 1e-8, weight decay 0.1 on matrices only), learning rate by linear
         warmup (5 steps) and cosine decay to 1e-3 at step 30 from a peak of 1e-2, gradients clipped to norm 1.0
  sgd    10 steps of SGD, lr 0.05, momentum 0.9, weight decay 0.01 (every parameter)
Stored: "init.*" (the initial weights), "batch.ids" and "batch.targets" (steps, 3, 12), "grad.*" (the gradients of
the first step, unclipped), "<run>.loss" (steps), "<run>.norm" (the gradient norm before clipping, adamw only),
"<run>.*" (the weights after the last step).
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from safetensors_write import save  # noqa: E402

out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/torch_train.safetensors"
torch.manual_seed(66)
DT = torch.float64
V, C, D, H, NL = 24, 12, 16, 4, 2
B, L = 3, 12
ADAM_STEPS, SGD_STEPS = 30, 10


def init_params():
    p = {"wte.weight": torch.randn(V, D, dtype=DT) * 0.3, "wpe.weight": torch.randn(C, D, dtype=DT) * 0.1}
    for i in range(NL):
        h = f"h.{i}."
        for ln in ("ln_1", "ln_2"):
            p[h + ln + ".weight"] = 1 + 0.1 * torch.randn(D, dtype=DT)
            p[h + ln + ".bias"] = 0.1 * torch.randn(D, dtype=DT)
        p[h + "attn.c_attn.weight"] = torch.randn(D, 3 * D, dtype=DT) * 0.3
        p[h + "attn.c_attn.bias"] = torch.randn(3 * D, dtype=DT) * 0.1
        p[h + "attn.c_proj.weight"] = torch.randn(D, D, dtype=DT) * 0.3
        p[h + "attn.c_proj.bias"] = torch.randn(D, dtype=DT) * 0.1
        p[h + "mlp.c_fc.weight"] = torch.randn(D, 4 * D, dtype=DT) * 0.3
        p[h + "mlp.c_fc.bias"] = torch.randn(4 * D, dtype=DT) * 0.1
        p[h + "mlp.c_proj.weight"] = torch.randn(4 * D, D, dtype=DT) * 0.2
        p[h + "mlp.c_proj.bias"] = torch.randn(D, dtype=DT) * 0.1
    p["ln_f.weight"] = 1 + 0.1 * torch.randn(D, dtype=DT)
    p["ln_f.bias"] = 0.1 * torch.randn(D, dtype=DT)
    return p


def forward(p, ids, targets):
    b, t = ids.shape
    x = p["wte.weight"][ids] + p["wpe.weight"][:t]
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    for i in range(NL):
        h = f"h.{i}."
        a = F.layer_norm(x, (D,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], 1e-5)
        qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]
        q, k, v = (z.reshape(b, t, H, D // H).transpose(1, 2) for z in qkv.split(D, dim=-1))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D // H)
        s = s.masked_fill(~mask, float("-inf"))
        o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, t, D)
        x = x + o @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        a = F.layer_norm(x, (D,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], 1e-5)
        u = F.gelu(a @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"], approximate="tanh")
        x = x + u @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (D,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    logits = x @ p["wte.weight"].T
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-100)


def lr_at(step):  # attnx::train::warmup_cosine{peak 1e-2, min 1e-3, warmup 5, total 30}
    peak, low, warm, total = 1e-2, 1e-3, 5, ADAM_STEPS
    if step < warm:
        return peak * (step + 1) / warm
    return low + 0.5 * (peak - low) * (1 + math.cos(math.pi * (step - warm) / (total - warm)))


init = init_params()
ids = torch.randint(0, V, (ADAM_STEPS, B, L))
targets = torch.randint(0, V, (ADAM_STEPS, B, L))
targets[torch.rand(ADAM_STEPS, B, L) < 0.1] = -100

tensors = {"batch.ids": ids.to(torch.int32), "batch.targets": targets.to(torch.int32)}
for n, t in init.items():
    tensors["init.transformer." + n] = t.clone()

# The first step's gradients.
p = {n: t.clone().requires_grad_(True) for n, t in init.items()}
forward(p, ids[0], targets[0]).backward()
for n, t in p.items():
    tensors["grad.transformer." + n] = t.grad.clone()


def run(name, steps, make_opt, schedule=None, clip=None):
    params = {n: t.clone().requires_grad_(True) for n, t in init.items()}
    opt = make_opt(params)
    losses, norms = [], []
    for s in range(steps):
        opt.zero_grad()
        loss = forward(params, ids[s], targets[s])
        loss.backward()
        if clip is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(list(params.values()), clip)))
        if schedule is not None:
            for g in opt.param_groups:
                g["lr"] = schedule(s)
        opt.step()
        losses.append(float(loss))
    tensors[name + ".loss"] = torch.tensor(losses, dtype=DT)
    if norms:
        tensors[name + ".norm"] = torch.tensor(norms, dtype=DT)
    for n, t in params.items():
        tensors[name + ".transformer." + n] = t.detach().clone()


def adamw(params):
    decay = [t for t in params.values() if t.dim() >= 2]
    keep = [t for t in params.values() if t.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": keep, "weight_decay": 0.0}],
                             lr=1e-2, betas=(0.9, 0.95), eps=1e-8, foreach=False)


run("adamw", ADAM_STEPS, adamw, schedule=lr_at, clip=1.0)
run("sgd", SGD_STEPS, lambda ps: torch.optim.SGD(list(ps.values()), lr=0.05, momentum=0.9, weight_decay=0.01))
save(out, tensors, {"attnx.heads": str(H)})
print(f"wrote {out}: {len(tensors)} tensors; adamw loss {tensors['adamw.loss'][0]:.6f} -> {tensors['adamw.loss'][-1]:.6f}")
