#!/usr/bin/env python3
"""Plot the softmax-gradient table written by examples/gradient_norm.cpp (seeds 000 and 002, docs/gradients.md).

    build/<dir>/examples/gradient_norm gradient_norm.csv
    /usr/bin/python3 scripts/plot_gradient_norm.py gradient_norm.csv docs/gradient_norm.png

Draws the median row norm of dL/dz, z the scores (Q K^T unscaled, and Q K^T / sqrt(d)), against d on log-log axes.
Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""

import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

if len(sys.argv) != 3:
    sys.exit(__doc__)
with open(sys.argv[1], newline="") as f:
    rows = list(csv.DictReader(f))
if not rows:
    sys.exit(f"{sys.argv[1]}: no rows")
d = [int(r["d"]) for r in rows]
fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
ax.plot(d, [float(r["scaled"]) for r in rows], "o-", color="tab:blue", label=r"scaled: softmax($QK^T/\sqrt{d}$)")
ax.plot(d, [float(r["unscaled"]) for r in rows], "s-", color="tab:red", label=r"unscaled: softmax($QK^T$)")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("d (features per query and key)")
ax.set_ylabel(r"median row norm of $\partial L / \partial z$")
ax.set_title("The softmax's gradient against d: 64 queries, 64 keys, N(0,1) entries")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[2])
print("plot_gradient_norm.py: wrote", sys.argv[2])
