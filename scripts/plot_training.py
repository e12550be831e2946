#!/usr/bin/env python3
"""Draws the losses that examples/train_char_gpt.cpp writes with --log (step,train_loss,held_out_loss).

    /usr/bin/python3 scripts/plot_training.py run.csv docs/training_loss.png
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src, out = sys.argv[1], sys.argv[2]
steps, train, held_steps, held = [], [], [], []
with open(src) as f:
    for row in csv.DictReader(f):
        s = int(row["step"]) + 1
        steps.append(s)
        train.append(float(row["train_loss"]))
        if row["held_out_loss"]:
            held_steps.append(s)
            held.append(float(row["held_out_loss"]))
fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(steps, train, lw=0.8, label="training batch")
ax.plot(held_steps, held, "o-", label="held-out text")
ax.set_xlabel("step")
ax.set_ylabel("cross-entropy (nats per byte)")
ax.set_title("train_char_gpt: 4 blocks, d_model 128, byte-level, batch 16 x 128")
ax.grid(alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(out, dpi=110)
print(f"wrote {out}")
