#!/usr/bin/env python3
"""PyTorch 1.13's autograd through its unfused attention, the problems of bench/bench_backward.cpp: one head, L x 64
float32, scale 1/sqrt(64), causal (masked_fill with -inf) or not, 1 and 2 threads. Times the backward alone
(torch.autograd.grad over a retained graph: dQ, dK, dV from dO), and prints one JSON object per problem: the median
of the repetitions in seconds and the same FLOPS counter as the C++ benchmark (2.5 x the forward's 4 L^2 d, half for
causal), so that the two are compared in one run.

    /usr/bin/python3 scripts/bench_backward_torch.py [--reps 7]
"""
import argparse
import json
import statistics
import time

import torch


def measure(L, d, causal, threads, reps):
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(42)
    q, k, v = (torch.randn(L, d, generator=g).requires_grad_() for _ in range(3))
    d_o = torch.sin(0.37 * torch.arange(L * d, dtype=torch.float32)).reshape(L, d)
    s = (q @ k.T) * (1.0 / d ** 0.5)
    if causal:
        s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.autograd.grad(o, (q, k, v), d_o, retain_graph=True)
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    flops = 2.5 * 4.0 * L * L * d * (0.5 if causal else 1.0)
    return {"name": f"torch_backward/{L}/{d}/{int(causal)}/{threads}", "seconds": t, "FLOPS": flops / t,
            "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    for L in (1024, 2048):
        for causal in (False, True):
            for threads in (1, 2):
                print(json.dumps(measure(L, 64, causal, threads, args.reps)), flush=True)


if __name__ == "__main__":
    main()
