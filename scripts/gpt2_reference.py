#!/usr/bin/env python3
"""Writes a small GPT-2 (the architecture of Hugging Face's GPT2LMHeadModel, random weights) and PyTorch's
logits for a prompt and for greedy generation, as one safetensors file that tests/unit/test_gpt2.cpp and
examples/gpt2_generate.cpp read.

    /usr/bin/python3 scripts/gpt2_reference.py [OUTPUT]   (default: examples/data/gpt2_tiny.safetensors)

Needs Debian's python3-torch (1.13); writes the file with scripts/lib/safetensors_write.py (standard library),
no `safetensors` or `transformers` package. The forward pass is written here with torch operations, in
float64 from the float32 weights that the file stores (so the reference is the exact maths of those weights):

  h = wte[ids] + wpe[positions]
  per block: h = h + attn(ln_1(h)),  attn: c_attn (Conv1D, (d, 3d): q | k | v), 4 heads, causal,
             scale 1/sqrt(d_head), c_proj;  h = h + mlp(ln_2(h)),  mlp: c_proj(gelu_tanh(c_fc(x)))
  logits = ln_f(h) wte^T   (the LM head tied to the token embedding)

Tensor names are Hugging Face's (transformer.h.0.attn.c_attn.weight, ...; Conv1D weights stored (in, out)).
Reference tensors: ref.prompt (I32, the prompt's ids), ref.prompt_logits (F64, (prompt, vocab)),
ref.generated (I32, the 32 greedy tokens), ref.step_logits (F64, (32, vocab): the logits from which each
generated token was taken: step 0 is the prompt's last row, step s > 0 follows token s - 1).
The weights are drawn with larger scales than GPT-2's initialisation so that the logits are not flat: the script
checks that every greedy choice wins by at least MIN_MARGIN (float rounding cannot flip it) and that the generated
tokens are not one token repeated (MIN_DISTINCT), and tries the next seed otherwise.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from safetensors_write import save  # noqa: E402

VOCAB, CTX, D, LAYERS, HEADS = 512, 64, 64, 4, 4
PROMPT = [17, 301, 5, 88, 450, 2, 129, 64]
GENERATE = 32
MIN_MARGIN = 1e-2
MIN_DISTINCT = 12  # distinct tokens among the generated ones (a sequence that repeats one token tests less)
WTE_SCALE = 0.3
EPS = 1e-5


def make_weights(seed):
    g = torch.Generator().manual_seed(seed)
    def rnd(*shape, scale):
        return (torch.randn(*shape, generator=g) * scale).float()
    w = {
        "transformer.wte.weight": rnd(VOCAB, D, scale=WTE_SCALE),
        "transformer.wpe.weight": rnd(CTX, D, scale=1.0),
        "transformer.ln_f.weight": 1 + rnd(D, scale=0.1),
        "transformer.ln_f.bias": rnd(D, scale=0.1),
    }
    for i in range(LAYERS):
        p = f"transformer.h.{i}."
        w[p + "ln_1.weight"] = 1 + rnd(D, scale=0.1)
        w[p + "ln_1.bias"] = rnd(D, scale=0.1)
        w[p + "attn.c_attn.weight"] = rnd(D, 3 * D, scale=0.3)
        w[p + "attn.c_attn.bias"] = rnd(3 * D, scale=0.05)
        w[p + "attn.c_proj.weight"] = rnd(D, D, scale=0.2)
        w[p + "attn.c_proj.bias"] = rnd(D, scale=0.05)
        w[p + "ln_2.weight"] = 1 + rnd(D, scale=0.1)
        w[p + "ln_2.bias"] = rnd(D, scale=0.1)
        w[p + "mlp.c_fc.weight"] = rnd(D, 4 * D, scale=0.3)
        w[p + "mlp.c_fc.bias"] = rnd(4 * D, scale=0.05)
        w[p + "mlp.c_proj.weight"] = rnd(4 * D, D, scale=0.2)
        w[p + "mlp.c_proj.bias"] = rnd(D, scale=0.05)
    return w


def forward(w, ids):
    """Logits (len(ids), VOCAB) in float64, the whole sequence at once (causal)."""
    d = {k: v.double() for k, v in w.items()}
    n = len(ids)
    h = d["transformer.wte.weight"][torch.tensor(ids)] + d["transformer.wpe.weight"][:n]
    dh = D // HEADS
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for i in range(LAYERS):
        p = f"transformer.h.{i}."
        x = torch.nn.functional.layer_norm(h, (D,), d[p + "ln_1.weight"], d[p + "ln_1.bias"], EPS)
        qkv = x @ d[p + "attn.c_attn.weight"] + d[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(D, dim=-1)
        q, k, v = (t.view(n, HEADS, dh).transpose(0, 1) for t in (q, k, v))
        s = (q @ k.transpose(-1, -2)) / dh ** 0.5
        s = s.masked_fill(~causal, float("-inf"))
        a = torch.softmax(s, dim=-1) @ v
        a = a.transpose(0, 1).reshape(n, D)
        h = h + a @ d[p + "attn.c_proj.weight"] + d[p + "attn.c_proj.bias"]
        x = torch.nn.functional.layer_norm(h, (D,), d[p + "ln_2.weight"], d[p + "ln_2.bias"], EPS)
        m = torch.nn.functional.gelu(x @ d[p + "mlp.c_fc.weight"] + d[p + "mlp.c_fc.bias"], approximate="tanh")
        h = h + m @ d[p + "mlp.c_proj.weight"] + d[p + "mlp.c_proj.bias"]
    h = torch.nn.functional.layer_norm(h, (D,), d["transformer.ln_f.weight"], d["transformer.ln_f.bias"], EPS)
    return h @ d["transformer.wte.weight"].T


def margin(row):
    top = torch.topk(row, 2).values
    return float(top[0] - top[1])


def reference(w):
    ids = list(PROMPT)
    prompt_logits = forward(w, ids)
    steps, generated = [], []
    row = prompt_logits[-1]
    for _ in range(GENERATE):
        if margin(row) < MIN_MARGIN:
            return None
        t = int(torch.argmax(row))
        steps.append(row)
        generated.append(t)
        ids.append(t)
        row = forward(w, ids)[-1]
    if len(set(generated)) < MIN_DISTINCT:
        return None
    return prompt_logits, torch.stack(steps), generated


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "examples/data/gpt2_tiny.safetensors"
    torch.set_num_threads(1)
    for seed in range(100):
        w = make_weights(seed)
        r = reference(w)
        if r is not None:
            break
    else:
        sys.exit("gpt2_reference.py: no seed below 100 gives greedy choices with a margin of %g and %d distinct tokens"
                 % (MIN_MARGIN, MIN_DISTINCT))
    prompt_logits, step_logits, generated = r
    worst = min(margin(row) for row in step_logits)
    tensors = dict(w)
    tensors["ref.prompt"] = torch.tensor(PROMPT, dtype=torch.int32)
    tensors["ref.prompt_logits"] = prompt_logits
    tensors["ref.generated"] = torch.tensor(generated, dtype=torch.int32)
    tensors["ref.step_logits"] = step_logits
    meta = {"vocab": str(VOCAB), "context": str(CTX), "d_model": str(D), "layers": str(LAYERS), "heads": str(HEADS),
            "attnx.heads": str(HEADS), "attnx.kv_heads": str(HEADS),  # what attnx's loaders check (load_gpt2)
            "seed": str(seed), "smallest_margin": "%.6g" % worst, "torch": torch.__version__}
    save(out, tensors, meta)
    print("gpt2_reference.py: wrote %s (seed %d, smallest greedy margin %.4g, generated %s)" % (out, seed, worst, generated))


if __name__ == "__main__":
    main()
