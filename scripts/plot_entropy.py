#!/usr/bin/env python3
"""Plot the softmax-entropy table written by examples/entropy.cpp (seed 002, docs/maths.md section 4).

    build/<dir>/examples/entropy entropy.csv
    scripts/plot_entropy.py entropy.csv docs/entropy.png

Draws the mean row entropy of softmax(Q K^T) (unscaled) and softmax(Q K^T / sqrt(d)) (scaled)
against d on a log2 axis, with the maximum ln 64. Uses matplotlib when it is installed
(Debian: apt-get install python3-matplotlib); otherwise writes the same plot as SVG with the
standard library only (the output name's extension becomes .svg).
"""

import csv
import math
import sys


def read_table(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{path}: no rows")
    d = [int(r["d"]) for r in rows]
    unscaled = [float(r["unscaled"]) for r in rows]
    scaled = [float(r["scaled"]) for r in rows]
    h_max = float(rows[0]["max"])
    return d, unscaled, scaled, h_max


TITLE = "Softmax entropy over 64 keys, random N(0,1) queries and keys"


def plot_matplotlib(d, unscaled, scaled, h_max, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    ax.plot(d, scaled, "o-", color="tab:blue", label=r"scaled: softmax($QK^T/\sqrt{d}$)")
    ax.plot(d, unscaled, "s-", color="tab:red", label=r"unscaled: softmax($QK^T$)")
    ax.axhline(h_max, color="gray", linestyle="--", linewidth=1, label=f"maximum ln 64 = {h_max:.3f}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(d)
    ax.set_xticklabels([str(x) for x in d])
    ax.set_ylim(0, h_max * 1.1)
    ax.set_xlabel("dimension d")
    ax.set_ylabel("mean row entropy (nats)")
    ax.set_title(TITLE, fontsize=10)
    for x, y in zip(d, scaled):
        ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, -14), ha="center", fontsize=7)
    for x, y in zip(d, unscaled):
        ax.annotate(f"{y:.3f}", (x, y), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=7)
    ax.legend(loc="center right", fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)


def plot_svg(d, unscaled, scaled, h_max, out):
    w, h, left, right, top, bottom = 700, 420, 70, 20, 40, 50
    x0, x1 = math.log2(d[0]), math.log2(d[-1])
    y1 = h_max * 1.1

    def px(x):
        return left + (math.log2(x) - x0) / (x1 - x0) * (w - left - right)

    def py(y):
        return top + (1 - y / y1) * (h - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="13">{TITLE}</text>',
             f'<line x1="{left}" y1="{py(0)}" x2="{w - right}" y2="{py(0)}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{py(0)}" stroke="black"/>',
             f'<line x1="{left}" y1="{py(h_max)}" x2="{w - right}" y2="{py(h_max)}" stroke="gray" stroke-dasharray="5,4"/>',
             f'<text x="{w - right}" y="{py(h_max) - 4}" text-anchor="end" fill="gray">maximum ln 64 = {h_max:.3f}</text>']
    for x in d:
        parts.append(f'<text x="{px(x)}" y="{py(0) + 16}" text-anchor="middle">{x}</text>')
    for yt in range(0, int(y1) + 1):
        parts.append(f'<text x="{left - 6}" y="{py(yt) + 4}" text-anchor="end">{yt}</text>')
    parts.append(f'<text x="{w / 2}" y="{h - 10}" text-anchor="middle">dimension d</text>')
    for ys, colour, label in ((scaled, "#1f77b4", "scaled: softmax(QK^T / sqrt(d))"),
                              (unscaled, "#d62728", "unscaled: softmax(QK^T)")):
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(d, ys))
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in zip(d, ys):
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        parts.append(f'<text x="{px(d[-1]) - 4}" y="{py(ys[-1]) - 8}" text-anchor="end" fill="{colour}">{label}</text>')
    parts.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    d, unscaled, scaled, h_max = read_table(sys.argv[1])
    out = sys.argv[2]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if not out.endswith(".svg"):
            out = out.rsplit(".", 1)[0] + ".svg"
        print("matplotlib is not installed: writing SVG with the standard library")
        plot_svg(d, unscaled, scaled, h_max, out)
    else:
        plot_matplotlib(d, unscaled, scaled, h_max, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
