#!/usr/bin/env python3
"""Prints, as C++ arrays, PyTorch 1.13 autograd's float64 gradients of a small multi-head attention, for the
static_asserts of tests/unit/test_grad.cpp (namespace mha_small; paste the output there).

    /usr/bin/python3 scripts/torch_grad_constexpr.py

The attention: X (4 tokens, 4 features), W_Q, W_K, W_V, W_O (4 x 4), two heads of 2 features (the columns of X W
split in halves), causal, softmax(Q_h K_h^T / sqrt(2)) V_h per head, the heads concatenated, times W_O; the loss is
sum(dY o Y) for the dY below. Inputs are short decimals, written here and in the test alike.
"""
import math

import torch

D = torch.float64
X = [[0.1, -0.2, 0.3, 0.5], [0.4, 0.1, -0.5, 0.2], [-0.3, 0.2, 0.2, -0.4], [0.0, 0.5, -0.1, 0.3]]
WQ = [[0.5, -0.3, 0.2, 0.1], [0.2, 0.8, -0.4, 0.3], [-0.6, 0.1, 0.7, -0.2], [0.3, -0.5, 0.1, 0.6]]
WK = [[-0.4, 0.7, 0.3, -0.1], [0.3, -0.2, 0.5, 0.4], [0.9, 0.5, -0.3, 0.2], [-0.2, 0.1, 0.6, -0.7]]
WV = [[0.2, 0.1, -0.3, 0.4], [-0.5, 0.4, 0.2, 0.1], [0.3, -0.7, 0.5, -0.2], [0.1, 0.3, -0.4, 0.6]]
WO = [[0.6, -0.1, 0.2, 0.3], [0.1, 0.5, -0.3, 0.2], [-0.2, 0.3, 0.4, -0.5], [0.4, -0.2, 0.1, 0.7]]
DY = [[1, -0.5, 0.25, 2], [-1, 0.75, 0.5, 0.5], [0.3, -0.2, 1.5, -1], [0.8, 0.4, -0.6, 0.1]]

x = torch.tensor(X, dtype=D)
w = {n: torch.tensor(v, dtype=D, requires_grad=True) for n, v in (("WQ", WQ), ("WK", WK), ("WV", WV), ("WO", WO))}
q, k, v = x @ w["WQ"], x @ w["WK"], x @ w["WV"]
causal = torch.ones(4, 4, dtype=torch.bool).tril()
heads = []
for h in range(2):
    cols = slice(2 * h, 2 * h + 2)
    s = (q[:, cols] @ k[:, cols].T / math.sqrt(2)).masked_fill(~causal, float("-inf"))
    heads.append(torch.softmax(s, dim=-1) @ v[:, cols])
y = torch.cat(heads, dim=1) @ w["WO"]
grads = torch.autograd.grad(y, list(w.values()), torch.tensor(DY, dtype=D))
print(f"// scripts/torch_grad_constexpr.py, torch {torch.__version__}")
for (n, _), g in zip(w.items(), grads):
    rows = ", ".join("{" + ", ".join(f"{e:.17g}" for e in r) + "}" for r in g.tolist())
    print(f"constexpr double d{n}[4][4] = {{{rows}}};")
