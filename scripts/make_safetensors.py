#!/usr/bin/env python3
"""Writes the small safetensors files that examples/load_weights.cpp reads (Python standard library
only: struct + json; no torch, no numpy).

    python3 scripts/make_safetensors.py [OUTPUT_DIR]      (default: examples/data)

Two files:
  mha_small.safetensors           the weights of a multi-head attention, F32, named and laid out as a
                                  PyTorch / Hugging Face checkpoint stores them: attn.q_proj.weight is
                                  (out, in) = (heads*d_k, d_model), attn.q_proj.bias is (heads*d_k,), ...
                                  __metadata__ holds the sizes, the head counts also under
                                  the keys attnx's loaders check ("attnx.heads", "attnx.kv_heads":
                                  the weights' shapes do not say them, docs/mha.md).
  mha_small.expected.safetensors  an input x (F32, (B, L, d_model)) and the expected output y (F64),
                                  computed here with plain double-precision loops from exactly the F32
                                  values stored (causal mask and per-batch key lengths; lengths in the
                                  metadata).

Model: d_model 16, 4 query heads, 2 key/value heads (grouped-query attention), d_k = d_v = 4, biases;
batch 2, sequence length 5.
"""

import json
import math
import os
import random
import struct
import sys

D_MODEL, HEADS, KV_HEADS = 16, 4, 2
D_K = D_V = D_MODEL // HEADS
B, L = 2, 5
KEY_LENGTHS = [5, 3]


def f32(x):
    """x rounded to the nearest float32 (what the file stores)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def random_matrix(rng, rows, cols, scale):
    return [[f32(rng.uniform(-scale, scale)) for _ in range(cols)] for _ in range(rows)]


def random_vector(rng, n, scale):
    return [f32(rng.uniform(-scale, scale)) for _ in range(n)]


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, dtype 'F32'|'F64', shape, flat values)."""
    header = {"__metadata__": metadata}
    data = bytearray()
    for name, dtype, shape, values in tensors:
        fmt = "<%d%s" % (len(values), "f" if dtype == "F32" else "d")
        raw = struct.pack(fmt, *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(data)


def flat(m):
    return [x for row in m for x in row]


def main(argv):
    out_dir = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "data")
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(4004)
    s = 1.0 / math.sqrt(D_MODEL)  # nn.Linear's init range
    # PyTorch layout: weight[out][in].
    wq = random_matrix(rng, HEADS * D_K, D_MODEL, s)
    wk = random_matrix(rng, KV_HEADS * D_K, D_MODEL, s)
    wv = random_matrix(rng, KV_HEADS * D_V, D_MODEL, s)
    wo = random_matrix(rng, D_MODEL, HEADS * D_V, 1.0 / math.sqrt(HEADS * D_V))
    bq = random_vector(rng, HEADS * D_K, s)
    bk = random_vector(rng, KV_HEADS * D_K, s)
    bv = random_vector(rng, KV_HEADS * D_V, s)
    bo = random_vector(rng, D_MODEL, s)
    x = [[[f32(rng.uniform(-1.0, 1.0)) for _ in range(D_MODEL)] for _ in range(L)] for _ in range(B)]

    def linear(row, w, b):  # y = W row + b, W (out, in)
        return [sum(w[o][i] * row[i] for i in range(len(row))) + b[o] for o in range(len(w))]

    group = HEADS // KV_HEADS
    y = []
    for bi in range(B):
        q = [linear(r, wq, bq) for r in x[bi]]
        k = [linear(r, wk, bk) for r in x[bi]]
        v = [linear(r, wv, bv) for r in x[bi]]
        concat = [[0.0] * (HEADS * D_V) for _ in range(L)]
        for h in range(HEADS):
            g = h // group  # the key/value head this query head reads
            for i in range(L):
                allowed = [j <= i and j < KEY_LENGTHS[bi] for j in range(L)]
                scores = [sum(q[i][h * D_K + t] * k[j][g * D_K + t] for t in range(D_K)) / math.sqrt(D_K)
                          if allowed[j] else -math.inf for j in range(L)]
                m = max(scores)
                if m == -math.inf:  # every key blocked: the attention row is 0
                    continue
                e = [math.exp(sc - m) if sc != -math.inf else 0.0 for sc in scores]
                total = sum(e)
                for t in range(D_V):
                    concat[i][h * D_V + t] = sum(e[j] / total * v[j][g * D_V + t] for j in range(L))
        for i in range(L):
            y.extend(linear(concat[i], wo, bo))

    meta = {"d_model": str(D_MODEL), "heads": str(HEADS), "kv_heads": str(KV_HEADS), "d_k": str(D_K), "d_v": str(D_V),
            "bias": "true", "layout": "out_in (PyTorch nn.Linear)", "made_by": "scripts/make_safetensors.py",
            "attnx.heads": str(HEADS), "attnx.kv_heads": str(KV_HEADS)}
    write_safetensors(os.path.join(out_dir, "mha_small.safetensors"), [
        ("attn.q_proj.weight", "F32", [HEADS * D_K, D_MODEL], flat(wq)),
        ("attn.q_proj.bias", "F32", [HEADS * D_K], bq),
        ("attn.k_proj.weight", "F32", [KV_HEADS * D_K, D_MODEL], flat(wk)),
        ("attn.k_proj.bias", "F32", [KV_HEADS * D_K], bk),
        ("attn.v_proj.weight", "F32", [KV_HEADS * D_V, D_MODEL], flat(wv)),
        ("attn.v_proj.bias", "F32", [KV_HEADS * D_V], bv),
        ("attn.out_proj.weight", "F32", [D_MODEL, HEADS * D_V], flat(wo)),
        ("attn.out_proj.bias", "F32", [D_MODEL], bo),
    ], meta)
    write_safetensors(os.path.join(out_dir, "mha_small.expected.safetensors"), [
        ("x", "F32", [B, L, D_MODEL], [v for batch in x for row in batch for v in row]),
        ("y", "F64", [B, L, D_MODEL], y),
    ], {"mask": "causal", "key_lengths": ",".join(str(n) for n in KEY_LENGTHS),
        "made_by": "scripts/make_safetensors.py (plain double loops)"})
    for name in ["mha_small.safetensors", "mha_small.expected.safetensors"]:
        p = os.path.join(out_dir, name)
        print("%s: %d bytes" % (os.path.normpath(p), os.path.getsize(p)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
