#!/usr/bin/env python3
"""Writes the attention variants computed with PyTorch 1.13's operations (it has none of them built in) and their
autograd gradients as one safetensors file, read by tests/unit/test_torch_variants.cpp.

    /usr/bin/python3 scripts/torch_variants_reference.py [OUTPUT]   (default: tests/data/torch_variants.safetensors)

Everything is float64. One Q, K, V ("q", "k", "v": (2, 3, 37, 4), B = 2, H = 3 heads, L = 37, not a multiple of any
tile) and one output gradient "dy" serve every case; s = Q K^T / sqrt(4) = Q K^T / 2; query i is at position i
(self-attention). Each case writes "<case>.y" and its gradients "<case>.dq", ".dk", ".dv".

Cases (True = the key is allowed):
  softcap     5 tanh(s / 5), causal                                      (Gemma 2, Grok)
  alibi       s + m_h (j - i), causal, m_h BLOOM's slopes for 3 heads    (2^-4, 2^-8 and 2^-2: the power of two
              below 3 is 2, then every other slope of 4 heads)
  window      causal, j > i - 6                                           (sliding_window(6))
  window_lr   i - 3 <= j <= i + 2                                         (sliding_window(3, 2))
  documents   causal within documents [0, 10), [10, 10), [10, 25), [25, 37) (an empty one among them)
  prefix_lm   j < 9 or j <= i                                             (prefix_lm(9))
  chunked     causal within chunks of 8                                   (chunked(8))
  relbias     s + rel[clamp(j - i + 9, 0, 18)], rel 19 values             (T5's relative bias, clamped)
  scoremod    s (1 + b) + 0.01 (h (i mod 5) - j mod 3)                   (any function of the position)
  maskfn      (i + j) mod 3 != 1 or j == i                                (a mask as a function)
  varlen      sequences of 8, 0, 12, 17 queries over 12, 3, 0, 22 keys packed along each axis (query offsets
              0 8 8 20 37, key offsets 0 12 15 15 37), causal bottom-right in each    (varlen(qo, ko, causal_bottom_right))
  varlen_any  the same sequences, every key of the query's own sequence               (varlen(qo, ko))
  sinks       causal, a sink logit per head ("sinks.table") in every row's softmax, no value (gpt-oss); its gradient
              "sinks.dtable" too
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from safetensors_write import save  # noqa: E402

out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/torch_variants.safetensors"
torch.manual_seed(64)
D = torch.float64
B, H, L, d = 2, 3, 37, 4
tensors = {}
i = torch.arange(L)[:, None]
j = torch.arange(L)[None, :]
causal = j <= i


q = (torch.rand(B, H, L, d, dtype=D) * 4 - 2).requires_grad_()
k = (torch.rand(B, H, L, d, dtype=D) * 4 - 2).requires_grad_()
v = (torch.rand(B, H, L, d, dtype=D) * 2 - 1).requires_grad_()
dy = torch.rand(B, H, L, d, dtype=D) * 2 - 1
for n, t in (("q", q), ("k", k), ("v", v), ("dy", dy)):
    tensors[n] = t.detach()


def case(name, mod=None, allowed=None):
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    if mod is not None:
        s = mod(s)
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    y = torch.softmax(s, dim=-1) @ v
    dq, dk, dv = torch.autograd.grad(y, [q, k, v], dy)
    for n, t in (("y", y), ("dq", dq), ("dk", dk), ("dv", dv)):
        tensors[f"{name}.{n}"] = t.detach()


case("softcap", lambda s: 5 * torch.tanh(s / 5), causal)
slopes = torch.tensor([2.0 ** -4, 2.0 ** -8, 2.0 ** -2], dtype=D)[None, :, None, None]
case("alibi", lambda s: s + slopes * (j - i).to(D), causal)
case("window", None, causal & (j > i - 6))
case("window_lr", None, (j >= i - 3) & (j <= i + 2))
doc = torch.tensor([0] * 10 + [2] * 15 + [3] * 12)
case("documents", None, causal & (doc[:, None] == doc[None, :]))
case("prefix_lm", None, (j < 9) | causal)
case("chunked", None, causal & (i // 8 == j // 8))
rel = torch.rand(19, dtype=D) * 2 - 1
tensors["relbias.table"] = rel
case("relbias", lambda s: s + rel[torch.clamp(j - i + 9, 0, 18)], None)
bb = torch.arange(B, dtype=D)[:, None, None, None]
hh = torch.arange(H, dtype=D)[None, :, None, None]
case("scoremod", lambda s: s * (1 + bb) + 0.01 * (hh * (i % 5).to(D) - (j % 3).to(D)), None)
case("maskfn", None, ((i + j) % 3 != 1) | (j == i))
qo = torch.tensor([0, 8, 8, 20, 37])
ko = torch.tensor([0, 12, 15, 15, 37])
qs = torch.bucketize(torch.arange(L), qo[1:], right=True)[:, None]  # each query's sequence
ks = torch.bucketize(torch.arange(L), ko[1:], right=True)[None, :]  # each key's
nq, nk = (qo[qs + 1] - qo[qs]), (ko[qs + 1] - ko[qs])
case("varlen", None, (ks == qs) & ((j - ko[qs]) + nq <= (i - qo[qs]) + nk))
case("varlen_any", None, ks == qs)

# Attention sinks (gpt-oss): one logit per head joins each row's softmax and carries no value; its gradient too.
sink = (torch.rand(H, dtype=D) * 2 - 1).requires_grad_()
s = (q @ k.transpose(-1, -2) / math.sqrt(d)).masked_fill(~causal, float("-inf"))
logits = torch.cat([s, sink[None, :, None, None].expand(B, H, L, 1)], dim=-1)
y = torch.softmax(logits, dim=-1)[..., :L] @ v
dq, dk, dv, dsink = torch.autograd.grad(y, [q, k, v, sink], dy)
for n, t in (("table", sink), ("y", y), ("dq", dq), ("dk", dk), ("dv", dv), ("dtable", dsink)):
    tensors[f"sinks.{n}"] = t.detach()

save(out, tensors, {"torch": torch.__version__})
print(f"wrote {len(tensors)} tensors to {out}")
