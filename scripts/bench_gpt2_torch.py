#!/usr/bin/env python3
"""PyTorch 1.13's tokens per second for the GPT-2s of bench/bench_gpt2.cpp, float32: the small one (4 layers, d_model
256, 8 heads, vocabulary 4096, context 256) and GPT-2's 124M configuration (12 layers, d_model 768, 12 heads,
vocabulary 50257, context 1024); prefill of a 128-token prompt (and of 512 tokens at 124M), and decoding one token at
a time with a KV cache holding 128 to 191 tokens, on 1 and 2 threads. Prints one JSON object per measurement (the
median of the repetitions).

    /usr/bin/python3 scripts/bench_gpt2_torch.py [--reps 7] [--config small|124m]

The model is written with torch operations (as scripts/gpt2_reference.py, with the cache as tensors that grow by
torch.cat, as Hugging Face's GPT-2 does), under torch.inference_mode().
"""
import argparse
import json
import statistics
import time

import torch

CONFIGS = {"small": (4096, 256, 256, 8, 4), "124m": (50257, 1024, 768, 12, 12)}
V, CTX, D, H, LAYERS = CONFIGS["small"]
PROMPT, SPAN = 128, 64
F = torch.nn.functional


def make(g):
    ws = 0.02 if D >= 768 else 0.06  # (the projections' scale, as bench_gpt2.cpp's)
    r = lambda *s, scale: torch.randn(*s, generator=g) * scale
    w = {"wte": r(V, D, scale=0.3), "wpe": r(CTX, D, scale=0.3), "ln_f": (1 + r(D, scale=0.1), r(D, scale=0.1)), "h": []}
    for _ in range(LAYERS):
        w["h"].append({
            "ln_1": (1 + r(D, scale=0.1), r(D, scale=0.1)), "ln_2": (1 + r(D, scale=0.1), r(D, scale=0.1)),
            "c_attn": (r(D, 3 * D, scale=ws), r(3 * D, scale=0.02)), "c_proj": (r(D, D, scale=ws), r(D, scale=0.02)),
            "c_fc": (r(D, 4 * D, scale=ws), r(4 * D, scale=0.02)), "mlp_proj": (r(4 * D, D, scale=ws / 2), r(D, scale=0.02)),
        })
    return w


def forward(w, ids, past, start):
    """ids: (n,) new tokens at positions start..; past: list of (k, v) per layer (H, L, dh) or None. Returns logits
    (n, V) and the new past."""
    n = ids.shape[0]
    h = w["wte"][ids] + w["wpe"][start:start + n]
    dh = D // H
    new_past = []
    for i, b in enumerate(w["h"]):
        x = F.layer_norm(h, (D,), *b["ln_1"], 1e-5)
        q, k, v = torch.addmm(b["c_attn"][1], x, b["c_attn"][0]).split(D, dim=-1)
        q, k, v = (t.view(n, H, dh).transpose(0, 1) for t in (q, k, v))
        if past is not None:
            k = torch.cat([past[i][0], k], dim=1)
            v = torch.cat([past[i][1], v], dim=1)
        new_past.append((k, v))
        L = k.shape[1]
        s = (q @ k.transpose(-1, -2)) / dh ** 0.5
        if n > 1:
            causal = torch.ones(n, L, dtype=torch.bool).tril(L - n)
            s = s.masked_fill(~causal, float("-inf"))
        a = (torch.softmax(s, dim=-1) @ v).transpose(0, 1).reshape(n, D)
        h = h + torch.addmm(b["c_proj"][1], a, b["c_proj"][0])
        x = F.layer_norm(h, (D,), *b["ln_2"], 1e-5)
        m = F.gelu(torch.addmm(b["c_fc"][1], x, b["c_fc"][0]), approximate="tanh")
        h = h + torch.addmm(b["mlp_proj"][1], m, b["mlp_proj"][0])
    h = F.layer_norm(h, (D,), *w["ln_f"], 1e-5)
    return h @ w["wte"].T, new_past


def timed(f, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    global V, CTX, D, H, LAYERS
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--config", choices=sorted(CONFIGS), default="small")
    args = ap.parse_args()
    V, CTX, D, H, LAYERS = CONFIGS[args.config]
    w = make(torch.Generator().manual_seed(1))
    prompts = (PROMPT, 512) if args.config == "124m" else (PROMPT,)
    with torch.inference_mode():
        for threads in (1, 2):
            torch.set_num_threads(threads)
            row = {"engine": "pytorch", "torch": torch.__version__, "config": args.config, "threads": threads}
            for n in prompts:
                ids = torch.tensor([(i * 2654435761) % V for i in range(n)])
                forward(w, ids, None, 0)  # warm-up
                t = timed(lambda: forward(w, ids, None, 0), args.reps)
                key = "prefill" if n == PROMPT else f"prefill{n}"
                row[f"{key}_ms"], row[f"{key}_tokens_per_s"] = t * 1e3, n / t
            ids = torch.tensor([(i * 2654435761) % V for i in range(PROMPT)])
            _, past0 = forward(w, ids, None, 0)

            def span():
                past, tok = past0, torch.tensor([7])
                for s in range(SPAN):
                    _, past = forward(w, tok, past, PROMPT + s)
                    tok = torch.tensor([(int(tok) * 31) % V])

            t = timed(span, args.reps) / SPAN
            row["decode_ms"], row["decode_tokens_per_s"] = t * 1e3, 1 / t
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
