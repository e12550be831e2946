#!/usr/bin/env python3
"""Prints the expected output of the tiny transformer block that tests/unit/test_layers.cpp evaluates at compile
time (static_assert), computed here with plain loops in Python's double precision (standard library only).

    python3 scripts/block_reference.py

The block: pre-norm decoder, d_model 4, 2 heads (d_k = d_v = 2), hidden 8, GELU (erf form), causal, biases;
input (L = 3, 4). Every parameter is a formula of its indices, the same in the C++ test (param(tag, i, j)):
    param(tag, i, j) = ((i * 7 + j * 3 + tag * 5) % 11 - 5) / 10
with tags: w_q 1, w_k 2, w_v 3, w_o 4, b_q 5, b_k 6, b_v 7, b_o 8, ln_1 weight 9 / bias 10, ln_2 weight 11 / bias 12,
up 13 / up bias 14, down 15 / down bias 16; the layer norms' weights are 1 + param; x(i, j) = param(0, i, j) * 4.
"""
import math

D, H, HID, L = 4, 2, 8, 3
DK = D // H
EPS = 1e-5


def param(tag, i, j):
    return ((i * 7 + j * 3 + tag * 5) % 11 - 5) / 10


def mat(tag, r, c):
    return [[param(tag, i, j) for j in range(c)] for i in range(r)]


def vec(tag, n):
    return [param(tag, 0, j) for j in range(n)]


def matmul(a, b):
    return [[sum(a[i][k] * b[k][j] for k in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]


def add_row(a, v):
    return [[x + v[j] for j, x in enumerate(row)] for row in a]


def layer_norm(a, w, b):
    out = []
    for row in a:
        mean = sum(row) / len(row)
        var = sum((x - mean) ** 2 for x in row) / len(row)
        out.append([(x - mean) / math.sqrt(var + EPS) * w[j] + b[j] for j, x in enumerate(row)])
    return out


def attention(x):
    q = add_row(matmul(x, mat(1, D, D)), vec(5, D))
    k = add_row(matmul(x, mat(2, D, D)), vec(6, D))
    v = add_row(matmul(x, mat(3, D, D)), vec(7, D))
    merged = [[0.0] * D for _ in range(L)]
    for h in range(H):
        for i in range(L):
            s = [sum(q[i][h * DK + c] * k[j][h * DK + c] for c in range(DK)) / math.sqrt(DK) for j in range(i + 1)]
            m = max(s)
            e = [math.exp(t - m) for t in s]
            tot = sum(e)
            for c in range(DK):
                merged[i][h * DK + c] = sum(e[j] / tot * v[j][h * DK + c] for j in range(i + 1))
    return add_row(matmul(merged, mat(4, D, D)), vec(8, D))


def gelu(t):
    return 0.5 * t * (1 + math.erf(t / math.sqrt(2)))


def block(x):
    ln1 = layer_norm(x, [1 + w for w in vec(9, D)], vec(10, D))
    a = attention(ln1)
    h = [[x[i][j] + a[i][j] for j in range(D)] for i in range(L)]
    ln2 = layer_norm(h, [1 + w for w in vec(11, D)], vec(12, D))
    up = [[gelu(t) for t in row] for row in add_row(matmul(ln2, mat(13, D, HID)), vec(14, HID))]
    down = add_row(matmul(up, mat(15, HID, D)), vec(16, D))
    return [[h[i][j] + down[i][j] for j in range(D)] for i in range(L)]


x = [[param(0, i, j) * 4 for j in range(D)] for i in range(L)]
y = block(x)
print("// scripts/block_reference.py")
print("constexpr double block_expected[%d][%d] = {" % (L, D))
for row in y:
    print("    {" + ", ".join(repr(v) for v in row) + "},")
print("};")
