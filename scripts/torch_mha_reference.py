#!/usr/bin/env python3
"""Writes torch.nn.MultiheadAttention's state dict, an input, boolean masks in PyTorch's polarity and the module's
outputs (the attention output and the head-averaged weights, PyTorch's defaults) as one safetensors file, read by
tests/unit/test_torch_weights.cpp and examples/port_pytorch.cpp.

    /usr/bin/python3 scripts/torch_mha_reference.py [OUTPUT]   (default: tests/data/torch_mha.safetensors)

Needs Debian's python3-torch (1.13); the file is written by scripts/lib/safetensors_write.py.
Module: embed_dim 16, num_heads 4, biases, batch_first; input x (2, 5, 16); attn_mask (5, 5) bool, True = blocked
(causal); key_padding_mask (2, 5) bool, True = padding (item 1's last two keys). The weights are float32; the
outputs are computed in float64 from them (module.double()).
Tensors: in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias (the state dict's names), x (F32),
attn_mask, key_padding_mask (BOOL, as torch stores bool tensors), y (F64), weights (F64). __metadata__ holds the
module's head counts as attnx's writers store them ("attnx.heads", "attnx.kv_heads": the weights' shapes do not say
them, docs/mha.md) and the torch version.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from safetensors_write import save  # noqa: E402

out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/torch_mha.safetensors"
torch.manual_seed(3)
m = torch.nn.MultiheadAttention(16, 4, batch_first=True)
with torch.no_grad():  # biases are zero at initialisation: give them values
    m.in_proj_bias.uniform_(-0.5, 0.5)
    m.out_proj.bias.uniform_(-0.5, 0.5)
x = torch.randn(2, 5, 16)
attn_mask = torch.ones(5, 5, dtype=torch.bool).triu(1)  # True above the diagonal: blocked
kpm = torch.tensor([[False] * 5, [False, False, False, True, True]])
md = m.double()
with torch.no_grad():
    y, w = md(x.double(), x.double(), x.double(), attn_mask=attn_mask, key_padding_mask=kpm)
sd = {k: v.float() for k, v in m.state_dict().items()}
tensors = dict(sd)
tensors.update({"x": x, "attn_mask": attn_mask, "key_padding_mask": kpm, "y": y, "weights": w})

save(out, tensors, {"torch": torch.__version__, "attnx.heads": str(m.num_heads), "attnx.kv_heads": str(m.num_heads)})
print("torch_mha_reference.py: wrote", out)
