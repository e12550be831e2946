#!/usr/bin/env python3
"""Writes PyTorch 1.13 autograd's gradients of attention, grouped-query attention, torch.nn.MultiheadAttention and a
pre-norm transformer block as one safetensors file, read by tests/unit/test_torch_grad.cpp.

    /usr/bin/python3 scripts/torch_grad_reference.py [OUTPUT]   (default: tests/data/torch_grad.safetensors)

Needs Debian's python3-torch (1.13); the file is written by scripts/lib/safetensors_write.py. Everything is float64.
Each case's tensors are named "<case>.<tensor>": its inputs, the output's gradient dy, and the expected gradients
"<case>.d<input>". Attention is written with torch operations (softmax(Q K^T / sqrt(d) + mask) V), so that autograd
differentiates it node by node, as PyTorch's unfused path does.

Cases (B batch items, H heads, d = 8 features per head):
  none       Q (2, 3, 5, 8), K and V (2, 3, 9, 8): no mask
  causal     L_q = L_k = 7, top-left causal (key j allowed for query i iff j <= i)
  allowed    a (5, 9) bool mask, True = allowed, no row fully blocked
  additive   a (5, 9) float bias added to every head's scores; its gradient too ("additive.dbias")
  lengths    keys j >= lengths[b] blocked, lengths = (9, 4)
  gqa        Q (2, 4, 6, 8), K and V (2, 2, 6, 8): query head h reads K/V head h // 2 (repeat_interleave), causal
  mha        nn.MultiheadAttention(16, 4, batch_first) with biases, self-attention of x (2, 7, 16), causal; its weights
             and gradients as attnx multiplies them: wq = in_proj_weight[:16].T (16, 16), bq = in_proj_bias[:16], ...,
             wo = out_proj.weight.T
  block      a pre-norm block, y = h + gelu(layer_norm(h) w1 + c1) w2 + c2 with h = x + mha(layer_norm(x)) (causal),
             x (2, 7, 16), 4 heads, hidden 32; weights in (in, out) layout
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from safetensors_write import save  # noqa: E402

out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/torch_grad.safetensors"
torch.manual_seed(65)
D = torch.float64
tensors = {}


def leaf(*shape, lo=-1.0, hi=1.0):
    return (torch.rand(*shape, dtype=D) * (hi - lo) + lo).requires_grad_()


def attend(q, k, v, mask=None, bias=None):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias
    if mask is not None:  # True = allowed
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def record(case, y, inputs, extra=None):
    dy = torch.rand(y.shape, dtype=D) * 2 - 1
    names = list(inputs)
    grads = torch.autograd.grad(y, [inputs[n] for n in names], dy)
    for n in names:
        tensors[f"{case}.{n}"] = inputs[n].detach()
    for n, g in zip(names, grads):
        tensors[f"{case}.d{n}"] = g
    tensors[f"{case}.dy"] = dy
    tensors[f"{case}.y"] = y.detach()
    for n, t in (extra or {}).items():
        tensors[f"{case}.{n}"] = t


# SDPA with each mask kind.
q, k, v = leaf(2, 3, 5, 8, lo=-2, hi=2), leaf(2, 3, 9, 8, lo=-2, hi=2), leaf(2, 3, 9, 8)
record("none", attend(q, k, v), {"q": q, "k": k, "v": v})

q, k, v = leaf(2, 3, 7, 8, lo=-2, hi=2), leaf(2, 3, 7, 8, lo=-2, hi=2), leaf(2, 3, 7, 8)
causal7 = torch.ones(7, 7, dtype=torch.bool).tril()
record("causal", attend(q, k, v, causal7), {"q": q, "k": k, "v": v})

q, k, v = leaf(2, 3, 5, 8, lo=-2, hi=2), leaf(2, 3, 9, 8, lo=-2, hi=2), leaf(2, 3, 9, 8)
allowed = torch.rand(5, 9) < 0.6
allowed[:, 0] = True  # no row fully blocked (PyTorch's softmax gives NaN there; attnx gives 0)
record("allowed", attend(q, k, v, allowed), {"q": q, "k": k, "v": v}, {"mask": allowed})

q, k, v = leaf(2, 3, 5, 8, lo=-2, hi=2), leaf(2, 3, 9, 8, lo=-2, hi=2), leaf(2, 3, 9, 8)
bias = leaf(5, 9, lo=-2, hi=2)
record("additive", attend(q, k, v, bias=bias), {"q": q, "k": k, "v": v, "bias": bias})

q, k, v = leaf(2, 3, 5, 8, lo=-2, hi=2), leaf(2, 3, 9, 8, lo=-2, hi=2), leaf(2, 3, 9, 8)
lengths = torch.tensor([9, 4])
keep = (torch.arange(9)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, L_k)
record("lengths", attend(q, k, v, keep), {"q": q, "k": k, "v": v}, {"lengths": lengths.to(torch.int64)})

# Grouped-query attention: 4 query heads over 2 K/V heads.
q, k, v = leaf(2, 4, 6, 8, lo=-2, hi=2), leaf(2, 2, 6, 8, lo=-2, hi=2), leaf(2, 2, 6, 8)
causal6 = torch.ones(6, 6, dtype=torch.bool).tril()
y = attend(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), causal6)
record("gqa", y, {"q": q, "k": k, "v": v})

# torch.nn.MultiheadAttention itself, differentiated by autograd.
m = torch.nn.MultiheadAttention(16, 4, batch_first=True).double()
with torch.no_grad():
    m.in_proj_bias.uniform_(-0.5, 0.5)
    m.out_proj.bias.uniform_(-0.5, 0.5)
x = leaf(2, 7, 16)
blocked7 = ~causal7
y, _ = m(x, x, x, attn_mask=blocked7, need_weights=False)
dy = torch.rand(y.shape, dtype=D) * 2 - 1
params = [m.in_proj_weight, m.in_proj_bias, m.out_proj.weight, m.out_proj.bias, x]
gw, gb, gow, gob, gx = torch.autograd.grad(y, params, dy)
W, b = m.in_proj_weight.detach(), m.in_proj_bias.detach()
for i, n in enumerate("qkv"):
    tensors[f"mha.w{n}"] = W[16 * i:16 * (i + 1)].T.contiguous()
    tensors[f"mha.b{n}"] = b[16 * i:16 * (i + 1)].clone()
    tensors[f"mha.dw{n}"] = gw[16 * i:16 * (i + 1)].T.contiguous()
    tensors[f"mha.db{n}"] = gb[16 * i:16 * (i + 1)].clone()
tensors["mha.wo"] = m.out_proj.weight.detach().T.contiguous()
tensors["mha.bo"] = m.out_proj.bias.detach().clone()
tensors["mha.dwo"] = gow.T.contiguous()
tensors["mha.dbo"] = gob
tensors["mha.x"], tensors["mha.dx"], tensors["mha.dy"], tensors["mha.y"] = x.detach(), gx, dy, y.detach()


# A pre-norm transformer block written with torch operations.
def heads(t):  # (B, L, 16) -> (B, 4, L, 4)
    return t.reshape(t.shape[0], t.shape[1], 4, 4).transpose(1, 2)


def merge(t):  # (B, 4, L, 4) -> (B, L, 16)
    return t.transpose(1, 2).reshape(t.shape[0], t.shape[2], 16)


p = {
    "g1": leaf(16, lo=0.5, hi=1.5), "b1": leaf(16, lo=-0.2, hi=0.2),
    "wq": leaf(16, 16, lo=-0.5, hi=0.5), "bq": leaf(16, lo=-0.2, hi=0.2),
    "wk": leaf(16, 16, lo=-0.5, hi=0.5), "bk": leaf(16, lo=-0.2, hi=0.2),
    "wv": leaf(16, 16, lo=-0.5, hi=0.5), "bv": leaf(16, lo=-0.2, hi=0.2),
    "wo": leaf(16, 16, lo=-0.5, hi=0.5), "bo": leaf(16, lo=-0.2, hi=0.2),
    "g2": leaf(16, lo=0.5, hi=1.5), "b2": leaf(16, lo=-0.2, hi=0.2),
    "w1": leaf(16, 32, lo=-0.5, hi=0.5), "c1": leaf(32, lo=-0.2, hi=0.2),
    "w2": leaf(32, 16, lo=-0.5, hi=0.5), "c2": leaf(16, lo=-0.2, hi=0.2),
    "x": leaf(2, 7, 16),
}
ln = torch.nn.functional.layer_norm
a = ln(p["x"], (16,), p["g1"], p["b1"], 1e-5)
att = attend(heads(a @ p["wq"] + p["bq"]), heads(a @ p["wk"] + p["bk"]), heads(a @ p["wv"] + p["bv"]), causal7)
h = p["x"] + merge(att) @ p["wo"] + p["bo"]
y = h + torch.nn.functional.gelu(ln(h, (16,), p["g2"], p["b2"], 1e-5) @ p["w1"] + p["c1"]) @ p["w2"] + p["c2"]
record("block", y, p)

save(out, tensors, {"torch": torch.__version__})
print("torch_grad_reference.py: wrote", out, "with", len(tensors), "tensors")
