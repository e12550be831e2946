#!/usr/bin/env python3
"""Turn attnx benchmark results into docs/benchmarks.md (and a plot when matplotlib exists).

Input: Google Benchmark JSON (attnx_bench --benchmark_out=... --benchmark_repetitions=N) and the
JSON lines of attnx_rss_probe. Every figure is the median over the repetitions; ratios compare
implementations measured in the same run. Standard library only (matplotlib optional).
"""
import argparse
import collections
import json
import os
import statistics
import sys

IMPLS = collections.OrderedDict([
    ("fused", "attnx fused kernel"),
    ("openblas", "OpenBLAS sgemm + softmax + sgemm"),
    ("eigen", "Eigen product + softmax + product"),
    ("attnx_expr", "attnx expression → fused kernel"),
    ("attnx_eval", "attnx row evaluator (unfused)"),
    ("naive", "naive loops"),
])


def seconds(b, field):
    """A Google Benchmark time field of b in seconds (its time_unit)."""
    return b[field] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]

def load_bench(path):
    with open(path) as f:
        data = json.load(f)
    runs = collections.defaultdict(list)  # (impl, L, d, causal, threads) -> [GFLOP/s]
    cpu = collections.defaultdict(list)   # same key -> [CPU seconds per iteration] (process CPU for threads > 1)
    labels = {}
    peak = []
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        impl = b["name"].split("/")[0].replace("BM_", "")
        gflops = b["FLOPS"] / 1e9
        if impl == "fma_peak":
            peak.append(gflops)
            labels["fma_peak"] = b.get("label", "")
            continue
        key = (impl, int(b["L"]), int(b["d"]), int(b["causal"]), int(b["threads"]))
        runs[key].append(gflops)
        cpu[key].append(seconds(b, "cpu_time"))
        if b.get("label"):
            labels[impl] = b["label"]
    med = {k: statistics.median(v) for k, v in runs.items()}
    global CPU
    CPU = {k: statistics.median(v) for k, v in cpu.items()}
    reps = max((len(v) for v in runs.values()), default=0)
    return data.get("context", {}), med, (statistics.median(peak) if peak else None), peak, labels, reps


CPU = {}


def cpu_efficiency(L, d, causal):
    """CPU seconds of the fused kernel on one thread / CPU seconds of the whole process on two:
    1.0 means the second thread did no extra work (no duplicated work, spinning or contention
    inside the process), whatever other processes did to the wall time."""
    c1, c2 = CPU.get(("fused", L, d, causal, 1)), CPU.get(("fused", L, d, causal, 2))
    return c1 / c2 if c1 and c2 else None


def load_rss(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    rows.append(json.loads(line))
    except FileNotFoundError:
        pass
    return rows


def near_goal(v, goal, digits):
    """v with `digits` decimals, or with as many more as it takes for the figure not to read as the other side of
    goal (84.96 is not "85", 1.798 is not "1.80")."""
    d = digits
    while (round(v, d) >= goal) != (v >= goal) and d < digits + 4:
        d += 1
    return f"{v:.{d}f}"


def fmt(x, spec="{:.1f}"):
    return "–" if x is None else spec.format(x)


def best_unfused(med, L, d, causal, threads):
    cands = [(med.get((impl, L, d, causal, threads)), impl) for impl in ("openblas", "eigen")]
    cands = [c for c in cands if c[0] is not None]
    return max(cands) if cands else (None, None)


def tables(med, peak, Ls):
    out = []
    for d in (64, 128):
        for causal in (0, 1):
            if not any(k[2] == d and k[3] == causal for k in med):
                continue
            out.append(f"\n### d = {d}, {'causal' if causal else 'no mask'}\n")
            out.append("GFLOP/s (medians); % of the FMA peak in brackets for the fused kernel; "
                       "`2T/1T` is the wall-clock speed-up of 2 threads; `2T CPU eff.` = CPU time on 1 thread / "
                       "CPU time of the process on 2 (1.00: the second thread added no work); "
                       "`x` columns are ratios fused / best unfused at the same thread count "
                       "(1 thread: the better of OpenBLAS and Eigen; 2 threads: OpenBLAS).\n")
            out.append("| L | fused 1T | fused 2T | 2T/1T | 2T CPU eff. | attnx expr 1T | OpenBLAS 1T | OpenBLAS 2T | Eigen 1T | attnx row eval 1T | naive 1T | x 1T | x 2T |")
            out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for L in Ls:
                g = lambda impl, t: med.get((impl, L, d, causal, t))
                f1, f2 = g("fused", 1), g("fused", 2)
                b1, _ = best_unfused(med, L, d, causal, 1)
                b2, _ = best_unfused(med, L, d, causal, 2)
                f1s = fmt(f1) + (f" ({100 * f1 / peak:.0f}%)" if f1 and peak else "")
                out.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                    L, f1s, fmt(f2), fmt(f2 / f1 if f1 and f2 else None, "{:.2f}"),
                    fmt(cpu_efficiency(L, d, causal), "{:.2f}"), fmt(g("attnx_expr", 1)),
                    fmt(g("openblas", 1)), fmt(g("openblas", 2)), fmt(g("eigen", 1)),
                    fmt(g("attnx_eval", 1)), fmt(g("naive", 1)),
                    fmt(f1 / b1 if f1 and b1 else None, "{:.2f}"), fmt(f2 / b2 if f2 and b2 else None, "{:.2f}")))
    return out


def targets(med, peak, rss, probe_runs=()):
    """The issue's targets, each as (text, figure, met)."""
    rows = []
    big = [L for L in sorted({k[1] for k in med}) if L >= 1024]

    def worst(fn, causal):
        vals = [(fn(L, causal), L) for L in big]
        vals = [v for v in vals if v[0] is not None]
        return min(vals) if vals else (None, None)

    if peak:
        for causal in (0, 1):
            v, L = worst(lambda L, c: (med.get(("fused", L, 64, c, 1)) or 0) / peak * 100 or None, causal)
            rows.append((f"fused, one thread, d = 64, L ≥ 1024, {'causal' if causal else 'no mask'}: ≥ 75% of FMA peak (aim 80%)",
                         None if v is None else f"min {v:.1f}% (L = {L})", None if v is None else v >= 75))

    def ratio(L, c):
        f = med.get(("fused", L, 64, c, 1))
        b, _ = best_unfused(med, L, 64, c, 1)
        return f / b if f and b else None

    for causal, goal in ((0, 1.5), (1, 2.5)):
        v, L = worst(ratio, causal)
        rows.append((f"fused vs best unfused (OpenBLAS AVX-512 / Eigen), one thread, d = 64, L ≥ 1024, "
                     f"{'causal' if causal else 'no mask'}: ≥ {goal}×",
                     None if v is None else f"min {v:.2f}× (L = {L})", None if v is None else v >= goal))

    def scaling(L, c):
        f1, f2 = med.get(("fused", L, 64, c, 1)), med.get(("fused", L, 64, c, 2))
        return f2 / f1 if f1 and f2 else None

    for causal in (0, 1):
        v, L = worst(scaling, causal)
        e, eL = worst(lambda L, c: cpu_efficiency(L, 64, c), causal)
        extra = "" if e is None else f"; CPU efficiency min {e:.2f} (L = {eL})"
        rows.append((f"fused, 2 threads vs 1 (wall clock), d = 64, L ≥ 1024, {'causal' if causal else 'no mask'}: ≥ 1.8×",
                     None if v is None else f"min {v:.2f}× (L = {L}){extra}", None if v is None else v >= 1.8))
    probes = [r for r in probe_runs if r["d"] == 64 and r["L"] >= 1024]
    if probes:
        worst_probe = min(probes, key=lambda r: r["speedup"])
        rows.append(("fused, 2 threads vs 1, best wall clock of N alternating runs (attnx_scaling_probe), d = 64, "
                     "L ≥ 1024: ≥ 1.8×",
                     f"min {worst_probe['speedup']:.2f}× (L = {worst_probe['L']}, "
                     f"{'causal' if worst_probe['causal'] else 'no mask'})",
                     worst_probe["speedup"] >= 1.8))
    for r in rss:
        if r["impl"] == "fused" and r["L"] == 32768:
            mib = r["extra_kib"] / 1024
            rows.append(("fused, L = 32768, d = 64: peak memory beyond inputs and outputs < 64 MiB",
                         f"{mib:.1f} MiB", mib < 64))
    return rows


def load_compare(path):
    if not path:
        return None
    try:
        with open(path) as f:
            d = json.load(f)
    except FileNotFoundError:
        return None
    med = {label: {name: statistics.median(v) for name, v in runs.items()} for label, runs in d["runs"].items()}
    return {"med": med, "raw": d["runs"], "rounds": d.get("rounds"), "labels": d.get("labels", {})}


def parse_name(name):
    """BM_x/L:1024/d:64/causal:0/threads:1[/...] -> ('BM_x', {'L': '1024', ...})"""
    parts = name.split("/")
    fields = {}
    for p in parts[1:]:
        if ":" in p:
            k, v = p.split(":", 1)
            fields[k] = v
    return parts[0], fields


def fused_comparison(cmp, baseline):
    """The default-flags build and the baseline against the native build, cell by cell."""
    out, rows = [], []
    if not cmp:
        return out, rows
    med = cmp["med"]
    nat, dfl, base = med.get("native", {}), med.get("default", {}), med.get("baseline", {})
    peak_n, peak_d = nat.get("BM_fma_peak"), dfl.get("BM_fma_peak")
    out += ["", "## Default flags against -march=native, and this version against the previous one", "",
            f"The same fused-kernel benchmark from three builds, run in alternation ({cmp['rounds']} rounds, "
            "medians; scripts/bench_compare.py): `native` (-O3 -march=native), `default` (-O2 and nothing "
            "else: the kernels pick their instruction set at run time) and `previous` (commit "
            f"{baseline}, before this version's execution context, -O3 -march=native). GFLOP/s.", ""]
    if peak_n:
        out.append(f"FMA peak in this comparison: {peak_n:.1f} GFLOP/s (native build), "
                   f"{fmt(peak_d)} (default build, the same instructions chosen at run time).")
        out.append("")
    out.append("| d | mask | threads | L | native | default | default / native | previous | native / previous |")
    out.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    worst_d, worst_b = (None, None), (None, None)
    cells = []
    for name in nat:
        impl, f = parse_name(name)
        if impl == "BM_fused":
            cells.append(((int(f["d"]), int(f["causal"]), int(f["threads"]), int(f["L"])), name, f))
    for _, name, f in sorted(cells):
        n, d, b = nat.get(name), dfl.get(name), base.get(name)
        rd = d / n if n and d else None
        rb = n / b if n and b else None
        cell = f"d={f['d']} {'causal' if f['causal'] == '1' else 'none'} {f['threads']}T L={f['L']}"
        if rd is not None and (worst_d[0] is None or rd < worst_d[0]):
            worst_d = (rd, cell)
        if rb is not None and (worst_b[0] is None or rb < worst_b[0]):
            worst_b = (rb, cell)
        out.append(f"| {f['d']} | {'causal' if f['causal'] == '1' else 'none'} | {f['threads']} | {f['L']} | {fmt(n)} | "
                   f"{fmt(d)} | {fmt(rd, '{:.3f}')} | {fmt(b)} | {fmt(rb, '{:.3f}')} |")
    if worst_d[0] is not None:
        rows.append(("default-flags build within 5% of the -march=native build, fused kernel, every cell",
                     f"min {worst_d[0]:.3f} ({worst_d[1]})", worst_d[0] >= 0.95))
    if worst_b[0] is not None:
        rows.append((f"prefill speed kept: no cell more than 3% slower than commit {baseline}, same run",
                     f"min {worst_b[0]:.3f} ({worst_b[1]})", worst_b[0] >= 0.97))
    return out, rows


def gemm_comparison(cmp):
    out, rows = [], []
    if not cmp:
        return out, rows
    nat, dfl = cmp["med"].get("native", {}), cmp["med"].get("default", {})
    cells = {}
    for name, v in nat.items():
        _, f = parse_name(name)
        key = (name.split("/")[1], f["T"], int(f["M"]), int(f["K"]), int(f["N"]))
        cells.setdefault(key, {})[f["impl"]] = (v, dfl.get(name))
    out += ["", "## Products (bench_gemm)", "",
            f"GFLOP/s = 2·M·K·N per second, medians of {cmp['rounds']} alternating rounds. `attnx`: `C = A * B` "
            "through the library (one thread, CPU time); `attnx 2T`: the same with a two-thread context (wall time); "
            "`default`: the -O2 build's attnx (one thread). OpenBLAS (its AVX-512 kernel) and Eigen: one thread.", "",
            "| product | T | M×K×N | attnx | attnx 2T | 2T/1T | default | default / native | OpenBLAS | Eigen | attnx / OpenBLAS |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    worst = (None, None)
    for key in sorted(cells):
        c = cells[key]
        a1, d1 = c.get("attnx", (None, None))
        a2, _ = c.get("attnx_2t", (None, None))
        ob, _ = c.get("openblas", (None, None))
        eg, _ = c.get("eigen", (None, None))
        rd = d1 / a1 if a1 and d1 else None
        if rd is not None and (worst[0] is None or rd < worst[0]):
            worst = (rd, f"{key[0]} {key[1]} {key[2]}x{key[3]}x{key[4]}")
        out.append(f"| {key[0]} | {key[1]} | {key[2]}×{key[3]}×{key[4]} | {fmt(a1)} | {fmt(a2)} | "
                   f"{fmt(a2 / a1 if a1 and a2 else None, '{:.2f}')} | {fmt(d1)} | {fmt(rd, '{:.3f}')} | {fmt(ob)} | {fmt(eg)} | "
                   f"{fmt(a1 / ob if a1 and ob else None, '{:.2f}')} |")
    if worst[0] is not None:
        rows.append(("default-flags build within 5% of the -march=native build, GEMM, every product",
                     f"min {worst[0]:.3f} ({worst[1]})", worst[0] >= 0.95))
    return out, rows


def mha_comparison(cmp):
    out, rows = [], []
    if not cmp:
        return out, rows
    nat, dfl = cmp["med"].get("native", {}), cmp["med"].get("default", {})
    cells, dcells = {}, {}
    for name, v in nat.items():
        impl, f = parse_name(name)
        cells.setdefault((int(f["L"]), int(f["B"])), {})[(impl, f.get("threads", "1"))] = v
    for name, v in dfl.items():
        impl, f = parse_name(name)
        dcells[(int(f["L"]), int(f["B"]), f.get("threads", "1"))] = v
    out += ["", "## The multi-head attention forward pass (bench_mha)", "",
            "`y = mha(x)`, `multi_head_attention<float, 512, 8>` (d_k = d_v = 64, biases, no mask); GFLOP/s = "
            f"(8·B·L·512² + B·8·4·L²·64) per second, medians of {cmp['rounds']} alternating rounds. 1T: a one-thread "
            "context (CPU time); 2T: two threads (wall time); `projections`: the four products alone, one thread; "
            "`default`: the -O2 build.", "",
            "| L | B | fused 1T | fused 2T | 2T/1T | projections 1T | default 1T | default / native 1T | default 2T |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    worst = (None, None)
    for key in sorted(cells):
        c = cells[key]
        f1, f2, pr = c.get(("BM_mha_fused", "1")), c.get(("BM_mha_fused", "2")), c.get(("BM_mha_projections", "1"))
        d1, d2 = dcells.get((key[0], key[1], "1")), dcells.get((key[0], key[1], "2"))
        sp = f2 / f1 if f1 and f2 else None
        if key[0] >= 512 and sp is not None and (worst[0] is None or sp < worst[0]):
            worst = (sp, f"L = {key[0]}, B = {key[1]}")
        out.append(f"| {key[0]} | {key[1]} | {fmt(f1)} | {fmt(f2)} | {fmt(sp, '{:.2f}')} | {fmt(pr)} | {fmt(d1)} | "
                   f"{fmt(d1 / f1 if d1 and f1 else None, '{:.3f}')} | {fmt(d2)} |")
    if worst[0] is not None:
        rows.append(("MHA forward (d_model 512, 8 heads, L ≥ 512), 2 threads vs 1: ≥ 1.8×",
                     f"min {worst[0]:.2f}× ({worst[1]})", worst[0] >= 1.8))
    return out, rows


def dynamic_comparison(path):
    """bench_dynamic: dyn against the same static shapes (medians of repetitions), and the run-time sweep."""
    out, rows = [], []
    if not path:
        return out, rows
    with open(path) as f:
        data = json.load(f)
    runs = collections.defaultdict(list)  # (kind, dyn, L) -> [GFLOP/s]
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        kind = b["name"].split("/")[0].replace("BM_", "")
        runs[(kind, int(b["dyn"]), int(b["L"]))].append(b["FLOPS"] / 1e9)
    med = {k: statistics.median(v) for k, v in runs.items()}
    reps = max((len(v) for v in runs.values()), default=0)
    out += ["", "## Run-time lengths: dyn against static (bench_dynamic)", "",
            "The same computation with the sequence length a template argument (`tensor<float, L, 64>`) and a "
            "run-time value (`tensor<float, dyn, 64>`), one thread, GFLOP/s medians of "
            f"{reps} interleaved repetitions: `attention` one head, d = 64, no mask (the fused kernel); `gemm` x W with "
            "x (L, 512), W (512, 512); `mha` the forward pass of `multi_head_attention<float, 512, 8>` on (1, L, 512).", "",
            "| L | attention static | dyn | dyn / static | gemm static | dyn | dyn / static | mha static | dyn | dyn / static |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    worst = {}
    for L in sorted({k[2] for k in med if k[0] != "sweep"}):
        cells = []
        for kind in ("attention", "gemm", "mha"):
            st, dy = med.get((kind, 0, L)), med.get((kind, 1, L))
            r = dy / st if st and dy else None
            if r is not None and L >= 128 and (kind not in worst or r < worst[kind][0]):
                worst[kind] = (r, L)
            cells += [fmt(st), fmt(dy), fmt(r, "{:.3f}")]
        out.append(f"| {L} | " + " | ".join(cells) + " |")
    sweep = sorted((k[2], v) for k, v in med.items() if k[0] == "sweep")
    if sweep:
        out += ["", "One binary, any length (`BM_sweep`: the dyn attention at lengths no static program instantiated):", "",
                "| L | " + " | ".join(str(L) for L, _ in sweep) + " |", "|---|" + "---:|" * len(sweep),
                "| GFLOP/s | " + " | ".join(fmt(v) for _, v in sweep) + " |"]
    for kind, (r, L) in sorted(worst.items()):
        rows.append((f"dyn {kind} within 5% of the same static shape, L ≥ 128 (one thread)", f"min {r:.3f} (L = {L})",
                     r >= 0.95))
    return out, rows


VARIANT_TEXT = {
    "causal": "causal (the reference)",
    "window": "`sliding_window(256)`",
    "window_bool": "the same window as an L x L bool tensor, `causal, allowed(M)`",
    "documents": "`causal, documents(offs)`: 5 equal documents",
    "documents_bidir": "`documents(offs)`: 5 equal documents, bidirectional",
    "prefix_lm": "`prefix_lm(L / 4)`",
    "chunked": "`causal, chunked(1024)`",
    "block_sparse": "`allowed(M)`, M of 256 x 256 blocks, 75% blocked",
    "softcap": "`softcap(30), causal`",
    "alibi": "`causal, alibi()`",
    "rel_bias": "`causal`, `S + index_select(rel, k_pos - q_pos + 255)` (a T5 relative-bias table, a function step)",
    "alibi_fn": "`causal`, `S - (q_pos - k_pos) / 16` (ALiBi written out)",
    "window_fn": "`mask_fn(q_pos >= k_pos && q_pos - k_pos < 256)` (the window as a function)",
    "softcap_fn": "`score_mod(30 tanh(s / 30))` with std::tanh, `causal`",
    "block_sparse_fn": "`mask_fn(open[i / 256][j / 256])`: block_sparse's pattern as a function",
    "block_sparse_summary": "`allowed(block_mask(M))`: block_sparse's M, its summary kept across calls",
    "sinks": "`causal, sinks(t)` (a sink logit in every row's softmax)",
}
VARIANT_GOALS = {"window": 0.2, "documents": 0.5, "block_sparse": 0.5, "block_sparse_summary": 0.5, "softcap": 1.3, "alibi": 1.15}  # issue 64's targets at L = 4096, relative to causal


def variants_comparison(path):
    """bench_variants: each variant's time over plain causal attention's at the same L (medians)."""
    out, rows = [], []
    if not path:
        return out, rows
    with open(path) as f:
        data = json.load(f)
    runs = collections.defaultdict(list)
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        kind = b["name"].split("/")[0].replace("BM_", "")
        if kind not in ("variant", "decode_variant"):
            continue
        runs[(kind, b.get("label", ""), int(b["L"]))].append(seconds(b, "real_time" if kind == "variant" else "cpu_time"))
    med = {k: statistics.median(v) for k, v in runs.items()}
    reps = max((len(v) for v in runs.values()), default=0)
    Ls = sorted({k[2] for k in med if k[0] == "variant"})
    out += ["", "## Attention variants (bench_variants)", "",
            "What a user writes (`attention(Q, K, V, masks...)`, one head, d = 64, float, one thread), time relative to "
            f"plain causal attention of the same L in the same run; medians of {reps} interleaved repetitions. The named "
            "masks skip the key tiles outside each query block's interval; a bool tensor is summarised tile by tile "
            "(the whole mask read once per call).", "",
            "| variant | " + " | ".join(f"L = {L} ms | / causal" for L in Ls) + " |",
            "|---|" + "---:|---:|" * len(Ls)]
    for name, text in VARIANT_TEXT.items():
        cells = []
        for L in Ls:
            t, c = med.get(("variant", name, L)), med.get(("variant", "causal", L))
            cells += [fmt(t * 1e3 if t else None, "{:.2f}"), fmt(t / c if t and c else None, "{:.3f}")]
        out.append(f"| {text} | " + " | ".join(cells) + " |")
    for name, goal in VARIANT_GOALS.items():
        t, c = med.get(("variant", name, 4096)), med.get(("variant", "causal", 4096))
        if t and c:
            rows.append((f"{VARIANT_TEXT[name]} <= {goal}x causal, L = 4096 (one thread)", f"{t / c:.3f}x", t / c <= goal))
    dec = sorted({k[2] for k in med if k[0] == "decode_variant"})
    if dec:
        out += ["", "One new token over a cache of L keys (d = 64, one thread): the whole cache, and `sliding_window(256)` "
                "(the chunks of 512 keys below the window are not read).", "",
                "| L | full, µs | window 256, µs | window / full |", "|---:|---:|---:|---:|"]
        for L in dec:
            f_, w = med.get(("decode_variant", "full", L)), med.get(("decode_variant", "window", L))
            out.append(f"| {L} | {fmt(f_ * 1e6 if f_ else None)} | {fmt(w * 1e6 if w else None)} | "
                       f"{fmt(w / f_ if w and f_ else None, '{:.3f}')} |")
    return out, rows


GGML = [  # issue 11: ggml_flash_attn_ext, L_q = 1, H = 8, d = 128, one thread, Zen 4 session (not this run)
    ("4096", "5.0 ms", "1.28 ms", "1.13 ms"),
    ("65536", "83 ms", "22.4 ms", "17.8 ms"),
    ("% of the fp32 bandwidth floor", "22-30%", "90-111%", "114-136%"),
]



def gpt2_comparison(path, torch_path):
    """bench_gpt2 against scripts/bench_gpt2_torch.py: tokens per second, prefill and decode, 1 and 2 threads."""
    out, rows = [], []
    if not path:
        return out, rows
    with open(path) as f:
        data = json.load(f)
    runs = collections.defaultdict(list)  # (phase, threads) -> [(seconds, tokens/s)]
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration" or b["name"].split("/")[0] not in ("BM_gpt2_prefill", "BM_gpt2_decode"):
            continue
        phase = b["name"].split("/")[0].replace("BM_gpt2_", "")
        runs[(phase, int(b["threads"]))].append((seconds(b, "real_time"), b["tokens/s"]))
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in runs.items()}
    reps = max((len(v) for v in runs.values()), default=0)
    torch_rows, torch_version = {}, None
    if torch_path and os.path.exists(torch_path):
        with open(torch_path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    r = json.loads(line)
                    if r.get("config", "small") != "small":
                        continue
                    torch_version = r.get("torch")
                    for phase in ("prefill", "decode"):
                        torch_rows[(phase, int(r["threads"]))] = (r[f"{phase}_ms"] / 1e3, r[f"{phase}_tokens_per_s"])
    out += ["", "## GPT-2: tokens per second against PyTorch (bench_gpt2, scripts/bench_gpt2_torch.py)", "",
            "The model of issue 12 (`models::gpt2`): 4 layers, d_model 256, 8 heads, vocabulary 4096, context 256, "
            "float32, random weights; the same computation in PyTorch written with torch operations and a KV cache "
            "grown by `torch.cat`, as Hugging Face's GPT-2 does, under `torch.inference_mode()`. Prefill: a "
            "128-token prompt; decode: one token at a time with 128 to 191 tokens cached. attnx: medians of "
            f"{reps} repetitions, wall time; PyTorch " + (torch_version or "(not installed: not measured)") +
            ": medians of its repetitions, in the same run. `speed` = PyTorch's time / attnx's (above 1: attnx faster).",
            "", "| phase | threads | attnx | PyTorch | speed |", "|---|---:|---:|---:|---:|"]
    for phase in ("prefill", "decode"):
        for t in (1, 2):
            a = med.get((phase, t))
            if a is None:
                continue
            tp = torch_rows.get((phase, t))
            cell = lambda x: f"{x[0] * 1e3:.3f} ms ({x[1]:,.0f} tokens/s)"
            ratio = tp[0] / a[0] if tp else None
            out.append(f"| {phase} | {t} | {cell(a)} | {cell(tp) if tp else '–'} | {fmt(ratio, '{:.2f}×')} |")
            if t == 1 and ratio is not None:
                rows.append((f"GPT-2 {phase}, one thread: against PyTorch {torch_version} (reported; no target)",
                             f"{ratio:.2f}× PyTorch's speed", None))
    return out, rows

# ggml's examples/gpt-2 on GPT-2 124M, as issue 63 measured it (Intel Xeon, 2 vCPUs; ms per token for decode, ms
# for a 128-token prefill): an external reference, not measured in this run.
GGML_124M = {("decode", 1): 48, ("decode", 2): 30, ("prefill", 1): 1141, ("prefill", 2): 558}
GGML_124M_F16 = {("decode", 1): 30, ("decode", 2): 19, ("prefill", 1): 636, ("prefill", 2): 374}


def gpt2_124m_comparison(path, torch_path):
    """bench_gpt2's 124M rows against their weight-read floor (the weight bytes at BM_read's bandwidth, same run),
    PyTorch (scripts/bench_gpt2_torch.py --config 124m) and ggml's figures of issue 63."""
    out, rows = [], []
    if not path:
        return out, rows
    with open(path) as f:
        data = json.load(f)
    runs, bw, wbytes = collections.defaultdict(list), collections.defaultdict(list), None
    slots = collections.defaultdict(list)  # (slots, threads) -> [seconds per step]
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        name = b["name"].split("/")[0]
        t = int(b["threads"])
        if name == "BM_read":
            bw[t].append(b["BYTES"])
        elif name == "BM_gpt2_124m_decode":
            runs[("decode", 128, t)].append(seconds(b, "real_time"))
            wbytes = b.get("WEIGHT_BYTES", wbytes)
        elif name == "BM_gpt2_124m_prefill":
            runs[("prefill", int(b["prompt"]), t)].append(seconds(b, "real_time"))
        elif name == "BM_gpt2_124m_slots":
            slots[(int(b["slots"]), t)].append(seconds(b, "real_time"))
    if not runs:
        return out, rows
    med = {k: statistics.median(v) for k, v in runs.items()}
    bwm = {t: statistics.median(v) for t, v in bw.items()}
    torch_rows, torch_version = {}, None
    if torch_path and os.path.exists(torch_path):
        with open(torch_path) as f:
            for line in f:
                if line.strip().startswith("{"):
                    r = json.loads(line)
                    if r.get("config") != "124m":
                        continue
                    torch_version = r.get("torch")
                    t = int(r["threads"])
                    torch_rows[("decode", 128, t)] = r["decode_ms"] / 1e3
                    torch_rows[("prefill", 128, t)] = r["prefill_ms"] / 1e3
                    if "prefill512_ms" in r:
                        torch_rows[("prefill", 512, t)] = r["prefill512_ms"] / 1e3
    out += ["", "## GPT-2 124M: decode against the weight-read floor (bench_gpt2, scripts/bench_gpt2_torch.py --config 124m)",
            "", "`models::gpt2` in GPT-2's 124M configuration (12 layers, d_model 768, 12 heads, vocabulary 50257, context "
            "1024), float32, random weights. Decode: one token at a time, the caches holding 128 to 191 tokens; every "
            "weight is read once per token" + (f" ({wbytes / 2**20:.0f} MiB)" if wbytes else "") + ", so the floor is "
            "those bytes at the read bandwidth measured in the same run on the same threads (BM_read, a buffer 4x the "
            "last-level cache); above 100% when the last-level cache keeps part of the weights from one token to the next. "
            "Prefill: a prompt of 128 or 512 tokens (`prompt`; decode: the prompt before the decoded tokens). PyTorch " + (torch_version or "(not installed: not measured)") + " runs the same "
            "model written with torch operations, in the same run. ggml: the figures of issue 63 (its examples/gpt-2, "
            "f32 and f16 weights, on an Intel Xeon of these machines, another run): an external reference.", "",
            "| phase | prompt | threads | attnx | floor | % of floor | PyTorch | ggml f32 | ggml f16 |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (phase, n, t) in sorted(med, key=lambda k: (k[0] != "decode", k[1], k[2])):
        a = med[(phase, n, t)]
        floor = wbytes / bwm[t] if phase == "decode" and wbytes and t in bwm else None
        pct = 100 * floor / a if floor else None
        tp = torch_rows.get((phase, n, t))
        g32 = GGML_124M.get((phase, t)) if n == 128 else None
        g16 = GGML_124M_F16.get((phase, t)) if n == 128 else None
        out.append(f"| {phase} | {n} | {t} | {a * 1e3:.1f} ms | {fmt(floor * 1e3 if floor else None, '{:.1f} ms')} | "
                   f"{fmt(pct, '{:.0f}%')} | {fmt(tp * 1e3 if tp else None, '{:.1f} ms')} | "
                   f"{fmt(g32, '{:.0f} ms')} | {fmt(g16, '{:.0f} ms')} |")
        if phase == "decode" and pct is not None:
            rows.append((f"GPT-2 124M decode, {t} thread{'s' if t > 1 else ''}: % of the weight-read floor (target 90%)",
                         f"{pct:.0f}%", pct >= 90))
    if slots:
        sm = {k: statistics.median(v) for k, v in slots.items()}
        out += ["", "Continuous batching (`BM_gpt2_124m_slots`): S sequences stepped together, one token each, the time "
                "per step against one slot's on the same threads (the weights are read once per step).", "",
                "| slots | threads | ms per step | / one slot | tokens/s |", "|---:|---:|---:|---:|---:|"]
        for (n, t) in sorted(sm, key=lambda k: (k[1], k[0])):
            one = sm.get((1, t))
            ratio = sm[(n, t)] / one if one else None
            out.append(f"| {n} | {t} | {sm[(n, t)] * 1e3:.1f} | {fmt(ratio, '{:.2f}x')} | {n / sm[(n, t)]:.1f} |")
            if n > 1 and ratio is not None:
                rows.append((f"GPT-2 124M, {n} slots, {t} thread{'s' if t > 1 else ''}: step time / one slot's "
                             "(target 1.3x)", f"{ratio:.2f}x", ratio <= 1.3))
    return out, rows


def backward_comparison(path, torch_path):
    """bench_backward (the fused attention backward against this run's FMA peak, 1 and 2 threads, and the unfused
    rules) against scripts/bench_backward_torch.py (PyTorch's autograd through its unfused attention)."""
    out, rows = [], []
    if not path:
        return out, rows
    with open(path) as f:
        data = json.load(f)
    runs, peak = collections.defaultdict(list), []  # (kind, L, causal, threads) -> [seconds]
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        parts = b["name"].split("/")
        kind = parts[0].replace("BM_", "")
        if kind == "fma_peak":
            peak.append(b["FLOPS"] / 1e9)
        elif kind == "backward_fused":
            runs[("fused", int(parts[1]), int(parts[3]), int(parts[4]))].append(seconds(b, "real_time"))
        elif kind == "backward_rules":
            runs[("rules", int(parts[1]), int(parts[2]), 1)].append(seconds(b, "real_time"))
    med = {k: statistics.median(v) for k, v in runs.items()}
    fma = statistics.median(peak) if peak else None
    reps = max((len(v) for v in runs.values()), default=0)
    torch_s, torch_version = {}, None
    if torch_path and os.path.exists(torch_path):
        with open(torch_path) as f:
            for line in f:
                if line.strip().startswith("{"):
                    r = json.loads(line)
                    torch_version = r.get("torch", torch_version)
                    _, L, _, c, t = r["name"].split("/")
                    torch_s[(int(L), int(c), int(t))] = r["seconds"]
    flops = lambda L, c: 2.5 * 4.0 * L * L * 64 * (0.5 if c else 1.0)
    out += ["", "## The fused attention backward (bench_backward, scripts/bench_backward_torch.py)", "",
            "`kernels::flash_attention_backward`: dQ, dK, dV of one head, L × 64 float32, from dO, the forward's O and "
            "lse (docs/gradients.md). GFLOP/s counts 2.5 × the forward's 4·L²·d (half for causal): the five products "
            "of the backward. `rules`: attnx's unfused backward (grad() with the fused path off: the L × L weights "
            "stored, its forward included). PyTorch " + (torch_version or "(not installed: not measured)") +
            ": autograd through `softmax(Q Kᵀ / √d) V` written with torch operations, the backward alone, in the "
            f"same run. Medians of {reps} repetitions (attnx) and of PyTorch's, wall time; FMA peak of this run "
            + (f"{fma:.1f} GFLOP/s." if fma else "not measured."), "",
            "| L | mask | threads | attnx fused | GFLOP/s | % of peak | 2 threads / 1 | rules | PyTorch | speed against PyTorch |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for L in sorted({k[1] for k in med}):
        for c in (0, 1):
            for t in (1, 2):
                a = med.get(("fused", L, c, t))
                if a is None:
                    continue
                gf = flops(L, c) / a / 1e9
                pct = 100 * gf / fma if fma and t == 1 else None
                one = med.get(("fused", L, c, 1))
                scale = one / a if t == 2 and one else None
                rules = med.get(("rules", L, c, 1)) if t == 1 else None
                tp = torch_s.get((L, c, t))
                ratio = tp / a if tp else None
                out.append(f"| {L} | {'causal' if c else 'none'} | {t} | {a * 1e3:.2f} ms | {gf:.1f} | {fmt(pct, '{:.0f}%')} | "
                           f"{fmt(scale, '{:.2f}×')} | {fmt(rules * 1e3 if rules else None, '{:.1f} ms')} | "
                           f"{fmt(tp * 1e3 if tp else None, '{:.2f} ms')} | {fmt(ratio, '{:.2f}×')} |")
                mask = "causal" if c else "no mask"
                if t == 1 and L == 1024 and pct is not None:
                    rows.append((f"backward, L {L}, {mask}, one thread: % of the FMA peak", f"{pct:.0f}%", pct >= 60))
                if t == 1 and L == 1024 and ratio is not None:
                    rows.append((f"backward, L {L}, {mask}, one thread: against PyTorch {torch_version}'s autograd "
                                 "(target 2.5×)", f"{ratio:.2f}×", ratio >= 2.5))
                if t == 2 and L == 1024 and scale is not None:
                    rows.append((f"backward, L {L}, {mask}: 2 threads against 1 (target 1.8×)", f"{scale:.2f}×",
                                 scale >= 1.8))
    return out, rows


def roofline_table(roof, fma):
    """The four-row decode cells against both of their limits, each measured next to the cell: per repetition, the
    time of the cell's bytes at the read bandwidth (BYTES / FLOOR) and of its operations at the FMA rate
    (FLOPS / FMA_PEAK), each as a share of the cell's time, and the kernel's rate (FLOPS)."""
    def med(keys, f):
        v = [x for k in keys for x in roof.get(k, [])]
        return statistics.median(f(*x) for x in v) if v else None
    out = ["", "The four-row cells against the arithmetic limit: the FMA rate of register-resident FMA chains on the "
           "same threads, measured next to each cell like its floor (`BM_fma` in the same run, for reference: " +
           ", ".join(f"{statistics.median(fma[t]):.1f} GFLOP/s on {t} thread{'s' if t > 1 else ''}" for t in sorted(fma)) +
           "). Four rows at d 128 do 2 floating-point operations (one FMA lane) per byte of fp32 K and V and 4 per byte "
           "of 16-bit ones (4 d per row and key). `FMAs / bytes` = the time of the cell's operations at the FMA rate / "
           "the time of its bytes at the read bandwidth (below 100%: the bytes bind; 16-bit: the bf16 and f16 cells "
           "together); `GFLOP/s (% peak)` = the kernel's rate and its share of the FMA rate. Medians over the "
           "repetitions.", "",
           "| H | L_k | threads | FMAs / bytes, fp32 | FMAs / bytes, 16-bit | fp32 GFLOP/s (% peak) | bf16 GFLOP/s (% peak) | f16 GFLOP/s (% peak) |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ratio = lambda by_bytes, by_fma, rate: by_fma / by_bytes * 100
    for H, Lk, t in sorted({(k[1], k[3], k[4]) for k in roof if k[2] == 4}, key=lambda k: (k[2], k[0], k[1])):
        key = lambda st: (st, H, 4, Lk, t)
        cells = [fmt(med([key("fp32")], ratio), "{:.0f}%"), fmt(med([key("bf16"), key("f16")], ratio), "{:.0f}%")]
        for st in ("fp32", "bf16", "f16"):
            rate, share = med([key(st)], lambda _, __, r: r), med([key(st)], lambda _, by_fma, __: by_fma * 100)
            cells.append(f"{rate:.1f} ({share:.0f}%)" if rate is not None else "–")
        out.append(f"| {H} | {Lk} | {t} | " + " | ".join(cells) + " |")
    return out


def decode_comparison(path, run_note=""):
    """bench_decode: the decode kernel against the bandwidth floor measured in the same run, and OpenBLAS."""
    out, rows = [], []
    run_note = run_note.strip().rstrip(".")  # the sentence's period is added below
    if not path:
        return out, rows
    with open(path) as f:
        data = json.load(f)
    ctx = data.get("context", {})
    runs = collections.defaultdict(list)  # (impl, H, Lq, Lk, threads) -> [(seconds, GB/s)]
    floor = collections.defaultdict(list)  # threads -> [GB/s]
    fma = collections.defaultdict(list)  # threads -> [GFLOP/s], BM_fma
    roof = collections.defaultdict(list)  # (impl, H, Lq, Lk, threads) -> [(bytes' share, FMAs' share, GFLOP/s)]
    paired = collections.defaultdict(list)  # (storage, H, Lq, Lk, threads) -> [fp32 time / 16-bit time, in alternation]
    pair_iters = []  # pairs timed per repetition
    gqa = collections.defaultdict(list)  # (storage, H, G, Lq, Lk, threads) -> [(seconds, the cell's floor in GB/s)]
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        name = b["name"].split("/")[0].replace("BM_", "")
        if name == "read":
            floor[int(b["threads"])].append(b["BYTES"] / 1e9)
            continue
        if name == "fma":
            fma[int(b["threads"])].append(b["FLOPS_PEAK"] / 1e9)
            continue
        f = dict(kv.split(":") for kv in b["name"].split("/")[1:] if ":" in kv)
        if name.startswith("gqa_"):
            gqa[(name.replace("gqa_", ""), int(f["H"]), int(f["G"]), int(f["Lq"]), int(f["Lk"]), int(f["threads"]))].append(
                (seconds(b, "real_time"), b.get("FLOOR", 0) / 1e9))
            continue
        if name.startswith("pair_"):
            paired[(name.replace("pair_", ""), int(f["H"]), int(f["Lq"]), int(f["Lk"]), int(f["threads"]))].append(b["X_FP32"])
            pair_iters.append(int(b["iterations"]))
            continue
        key = (name.replace("decode_", ""), int(f["H"]), int(f["Lq"]), int(f["Lk"]), int(f["threads"]))
        runs[key].append((seconds(b, "real_time"), b["BYTES"] / 1e9, b.get("FLOOR", 0) / 1e9))
        if b.get("FLOOR") and b.get("FMA_PEAK"):  # decode cells (rates: a share of the cell's time each)
            roof[key].append((b["BYTES"] / b["FLOOR"], b["FLOPS"] / b["FMA_PEAK"], b["FLOPS"] / 1e9))
    fl = {t: statistics.median(v) for t, v in floor.items()}
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in runs.items()}
    # % of the floor: per repetition, against the read bandwidth measured next to it (FLOOR) when the run has
    # it, else against BM_read's median; in fp32 bytes (2 H Lk d 4), so 16-bit K/V can exceed 100%.
    def pct_of(k):
        H, Lk, t = k[1], k[3], k[4]
        fp32_bytes = 2 * H * Lk * 128 * 4 / 1e9
        per = [fp32_bytes / (sec * (fr if fr > 0 else fl.get(t, 0))) * 100 for sec, _, fr in runs[k] if fr > 0 or fl.get(t)]
        return statistics.median(per) if per else None
    adjacent = all(x[2] > 0 for k, v in runs.items() if k[0] != "unfused" for x in v)
    reps = max((len(v) for v in runs.values()), default=0)
    # bench_decode records "memory": "settled" when it allocates its blocks at start (bench_decode.cpp).
    settled = ("; the copies and the floor's buffer allocated once at the start of the run, after a settling block "
               "of 1.5 GiB that nothing reads (the first memory a process allocates read 10-20% slower on the Intel "
               "Xeon of the nineteenth session: bench_decode.cpp)" if ctx.get("memory") == "settled" else "")
    out += ["", "## Decoding: the decode kernel against the memory-bandwidth floor (bench_decode)", "",
            "One batch item, H heads (= KV heads), d = 128, L_q new query rows against L_k cached keys (bottom-right "
            "causal), K and V rotated over enough copies (3× the last-level cache) that every iteration reads them "
            "from memory" + settled + ". **floor** = bytes of K and V / the read bandwidth with the same number of "
            "threads (a "
            "vectorised read of a buffer 4× the last-level cache), "
            + ("measured next to each cell (the mean of one read just before and one just after its timed loop: this "
               "VM's bandwidth moves by up to 2× within minutes, so a floor measured once per run misplaces cells run "
               "minutes later); `BM_read` in the same run, for reference: " if adjacent else "measured in the same run (`BM_read`): ")
            + ", ".join(f"{fl[t]:.1f} GB/s on {t} thread{'s' if t > 1 else ''}" for t in sorted(fl)) +
            f". Medians of {reps} repetitions, wall time. `% floor` = the fp32 floor time / the time, per repetition "
            "(above 100% for bf16 / f16, which read half the bytes). `× fp32` = the fp32 time / the 16-bit time (medians; "
            "with the cells interleaved at random, each median spans the same minutes). `× OpenBLAS` = the unfused OpenBLAS time (sgemm, row softmax, "
            "sgemm per head) / the fp32 kernel's.", "",
            f"Run: {ctx.get('date', '?')}" + (f"; {run_note}" if run_note else "") + ".", "",
            "| H | L_q | L_k | threads | fp32 ms | GB/s | % floor | × OpenBLAS | bf16 ms | % floor | × fp32 | f16 ms | % floor | × fp32 |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    worst = {}
    half = {}       # (storage, threads) -> (smallest ratio of the times, H, L_q, L_k)
    half_norm = {}  # (storage, threads) -> the smallest ratio of the % floor
    for H, Lq, Lk, t in sorted({k[1:] for k in med}, key=lambda k: (k[3], k[0], k[1], k[2])):
        f32 = med.get(("fp32", H, Lq, Lk, t))
        if not f32:
            continue
        pct = pct_of(("fp32", H, Lq, Lk, t))
        ob = med.get(("unfused", H, Lq, Lk, t))
        cells = [fmt(f32[0] * 1e3, "{:.3f}"), fmt(f32[1]), fmt(pct, "{:.0f}%"), fmt(ob[0] / f32[0] if ob else None, "{:.2f}×")]
        if Lk >= 4096 and pct is not None:
            k = (Lq, t)
            if k not in worst or pct < worst[k][0]:
                worst[k] = (pct, H, Lk)
        for st in ("bf16", "f16"):
            r = med.get((st, H, Lq, Lk, t))
            p = pct_of((st, H, Lq, Lk, t)) if r else None
            x = f32[0] / r[0] if r else None
            xn = p / pct if p is not None and pct else None  # the same against each cell's own floor
            if Lk >= 16384 and xn is not None:
                half_norm[(st, t)] = min(xn, half_norm.get((st, t), xn))
            cells += [fmt(r[0] * 1e3 if r else None, "{:.3f}"), fmt(p, "{:.0f}%"), fmt(x, "{:.2f}×")]
            if Lk >= 16384 and x is not None and ((st, t) not in half or x < half[(st, t)][0]):
                half[(st, t)] = (x, H, Lq, Lk)
        out.append(f"| {H} | {Lq} | {Lk} | {t} | " + " | ".join(cells) + " |")
    pmed = {k: statistics.median(v) for k, v in paired.items()}
    pworst = {}  # (storage, threads) -> (smallest paired ratio, H, L_q, L_k)
    if pmed:
        out += ["", "The 16-bit speed-up timed in alternation (`BM_pair_<bf16|f16>`): the fp32 and the 16-bit kernel on the "
                "same cell, one evaluation of each in turn, so that both see the same minutes of this host's bandwidth; "
                "`× fp32` = the fp32 time / the 16-bit time, median over the repetitions "
                f"({min(pair_iters)} to {max(pair_iters)} pairs a repetition in this run). The targets' verdicts use "
                "these ratios; the table above's come from cells timed apart.", "",
                "| H | L_q | L_k | threads | bf16 × fp32 | f16 × fp32 |", "|---:|---:|---:|---:|---:|---:|"]
        for H, Lq, Lk, t in sorted({k[1:] for k in pmed}, key=lambda k: (k[3], k[0], k[1], k[2])):
            cells = []
            for st in ("bf16", "f16"):
                x = pmed.get((st, H, Lq, Lk, t))
                cells.append(fmt(x, "{:.2f}×"))
                if x is not None and ((st, t) not in pworst or x < pworst[(st, t)][0]):
                    pworst[(st, t)] = (x, H, Lq, Lk)
            out.append(f"| {H} | {Lq} | {Lk} | {t} | " + " | ".join(cells) + " |")
    if gqa:
        out += ["", "GQA (`BM_gqa_<fp32|bf16>`): H query heads over G KV heads, H / G × L_q rows a KV head sharing one pass "
                "over its keys (at L_q 2, eight rows: two passes over each block of 256 keys, rows 0-3 then 4-7, since "
                "3b1e0de; decoding.md). Bytes of K and "
                "V: 2 G L_k d. `% floor` as above (fp32 bytes, against the floor measured next to each cell); `× fp32` = "
                "the fp32 time / the bf16 time (medians of cells timed apart). Not among issue 11's targets (its cells have "
                "H = KV heads); for the figures of the model shapes decoding meets.", "",
                "| H | G | L_q | rows a KV head | L_k | threads | fp32 ms | % floor | bf16 ms | % floor | × fp32 |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        def gqa_cell(k):
            v = gqa.get(k)
            if not v:
                return None, None
            fp32_bytes = 2 * k[2] * k[4] * 128 * 4 / 1e9
            per = [fp32_bytes / (sec * fr) * 100 for sec, fr in v if fr > 0]
            return statistics.median(sec for sec, _ in v), (statistics.median(per) if per else None)
        for H, G, Lq, Lk, t in sorted({k[1:] for k in gqa}, key=lambda k: (k[4], k[2], k[3])):
            f32, pf = gqa_cell(("fp32", H, G, Lq, Lk, t))
            b16, pb = gqa_cell(("bf16", H, G, Lq, Lk, t))
            out.append(f"| {H} | {G} | {Lq} | {H // G * Lq} | {Lk} | {t} | {fmt(f32 * 1e3 if f32 else None, '{:.3f}')} | "
                       f"{fmt(pf, '{:.0f}%')} | {fmt(b16 * 1e3 if b16 else None, '{:.3f}')} | {fmt(pb, '{:.0f}%')} | "
                       f"{fmt(f32 / b16 if f32 and b16 else None, '{:.2f}×')} |")
    if roof:
        out += roofline_table(roof, fma)
    out += ["", "External reference (not measured here; ggml is not a dependency): the figures quoted in issue 11 for "
            "`ggml_flash_attn_ext`, L_q = 1, H = 8, d = 128, one thread, measured on an AMD Zen 4 session with about "
            "24 GB/s of single-core read bandwidth. Compare them through `% floor`, not milliseconds (another CPU):", "",
            "| L_k | attnx before the decode kernel | ggml, F32 K/V | ggml, F16 K/V |", "|---|---:|---:|---:|"]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in GGML]
    for (Lq, t), (pct, H, Lk) in sorted(worst.items()):
        rows.append((f"decode fp32, L_q = {Lq}, {t} thread{'s' if t > 1 else ''}, L_k ≥ 4096: ≥ 85% of the bandwidth floor",
                     f"min {near_goal(pct, 85, 0)}% (H {H}, L_k {Lk})", pct >= 85))
    for (st, t), (x, H, Lq, Lk) in sorted(half.items()):
        norm = half_norm.get((st, t))
        apart = (f"min {x:.2f}× (H {H}, L_q {Lq}, L_k {Lk})" +
                 (f"; against each cell's own floor min {norm:.2f}×" if norm is not None and adjacent else ""))
        name = f"decode {st} K/V ≥ 1.8× fp32, L_k ≥ 16384, {t} thread{'s' if t > 1 else ''}"
        if (st, t) in pworst:
            px, pH, pLq, pLk = pworst[(st, t)]
            rows.append((name, f"min {near_goal(px, 1.8, 2)}× timed in alternation (H {pH}, L_q {pLq}, L_k {pLk}); cells timed apart: " + apart,
                         px >= 1.8))
        else:
            rows.append((name, apart, x >= 1.8))
    return out, rows


def plot(med, peak, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(2, 2, figsize=(12, 9), sharex=True)
    colors = {"fused": "C0", "openblas": "C1", "eigen": "C2", "attnx_eval": "C3", "naive": "C4", "attnx_expr": "C5"}
    for ax, (d, causal) in zip(axes.flat, [(64, 0), (64, 1), (128, 0), (128, 1)]):
        for impl, title in IMPLS.items():
            for t, style in ((1, "-o"), (2, "--s")):
                pts = sorted((k[1], v) for k, v in med.items() if k[0] == impl and k[2] == d and k[3] == causal and k[4] == t)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=colors[impl], label=f"{title}, {t} thread{'s' if t > 1 else ''}")
        if peak:
            ax.axhline(peak, color="k", lw=0.8, ls=":", label="FMA peak, one core")
        ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0)
        ax.set_title(f"fp32, d = {d}, {'causal' if causal else 'no mask'}")
        ax.set_xlabel("L (= Lq = Lk)")
        ax.set_ylabel("GFLOP/s (4 L² d, half for causal)")
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)
    return True


def run_lines(ctx, a, extra):
    """The "## Run" list of a page: the benchmark JSON's context and the command line's description, with the
    page's own lines (extra) after the flags."""
    return ["## Run", "",
            f"- date: {ctx.get('date', '?')}",
            f"- machine: {a.cpu or '?'}; {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz (as reported), host `{ctx.get('host_name', '?')}`",
            f"- compiler: {a.compiler}",
            f"- flags: {a.flags}"] + extra + [
            f"- Google Benchmark library build type: {ctx.get('library_build_type', '?')}",
            f"- load averages: {a.load}",
            f"- command: `{a.command}`", ""]


def target_table(rows):
    """(text, figure, met) rows as the "## Targets" table."""
    md = ["## Targets", "", "| target | measured | met |", "|---|---|---|"]
    for text, fig, met in rows:
        md.append(f"| {text} | {fig or 'not measured'} | {'yes' if met else ('no' if met is not None else '–')} |")
    return md


def decode_page(a):
    """A page of its own for a bench_decode run made apart from the full scripts/bench.sh run (another session,
    another CPU): its own run description, the decode targets, the decode table."""
    with open(a.decode) as f:
        ctx = json.load(f).get("context", {})
    dec_md, dec_rows = decode_comparison(a.decode, a.decode_note)
    md = ["# attnx decode benchmarks (bench_decode on its own)", "",
          "Generated by `scripts/bench_report.py --decode-only` from a run of `bench_decode` alone; do not edit by hand.",
          "The full benchmark page ([benchmarks.md](benchmarks.md)) comes from another run, possibly on another CPU:",
          "compare figures within one page only.", ""]
    md += run_lines(ctx, a, ["- threads: 1 and 2 (the `threads` argument)"])
    md += target_table(dec_rows) + dec_md + [""]
    with open(a.markdown, "w") as f:
        f.write("\n".join(md))
    print(f"wrote {a.markdown}")
    return 0


def iterations(data):
    """(kind, name parts, benchmark) for each repetition of a Google Benchmark JSON, kind without "BM_"."""
    for b in data["benchmarks"]:
        if b.get("run_type") == "iteration":
            parts = b["name"].split("/")
            yield parts[0].replace("BM_", ""), parts, b


def train_page(a):
    """A page of its own for bench_train (a training step of examples/train_char_gpt.cpp's GPT and its parts) beside
    scripts/bench_train_torch.py (PyTorch 1.13 on the same model), run one after the other on one machine."""
    with open(a.train) as f:
        data = json.load(f)
    ctx = data.get("context", {})
    runs, peak, rss, flops = collections.defaultdict(list), [], {}, {}
    for kind, parts, b in iterations(data):
        if kind == "fma_peak":
            peak.append(b["FLOPS"] / 1e9)
            continue
        threads = int(parts[1].split(":")[-1]) if len(parts) > 1 and "threads" in parts[1] else 1
        runs[(kind, threads)].append(seconds(b, "real_time"))
        if "PEAK_RSS_MB" in b:
            rss[(kind, threads)] = b["PEAK_RSS_MB"]
        if "FLOPS" in b:
            flops.setdefault((kind, threads), []).append(b["FLOPS"] / 1e9)
    med = {k: statistics.median(v) for k, v in runs.items()}
    fma = statistics.median(peak) if peak else None
    reps = max((len(v) for v in runs.values()), default=0)
    torch_s, torch_version = {}, None
    if a.train_torch and os.path.exists(a.train_torch):
        with open(a.train_torch) as f:
            for line in f:
                if line.strip().startswith("{"):
                    r = json.loads(line)
                    torch_version = r.get("torch", torch_version)
                    _, kind, t = r["name"].split("/")
                    torch_s[(kind, int(t))] = r["seconds"]
    tokens = 16 * 128
    md = ["# attnx training benchmarks (bench_train, scripts/bench_train_torch.py)", "",
          "Generated by `scripts/bench_report.py --train-only`; do not edit by hand. The model: "
          "examples/train_char_gpt.cpp's GPT (vocabulary 256, context 128, d_model 128, 4 heads, 4 layers, float32), "
          "batch 16 × 128 tokens. A step is forward, backward, clipping and AdamW. PyTorch " +
          (torch_version or "(not installed: not measured)") + " runs the same model written with torch operations "
          "(scripts/bench_train_torch.py), after attnx in the same session.", ""]
    md += run_lines(ctx, a, ["- threads: 1 and 2 (the `threads` argument; torch.set_num_threads)",
                             f"- repetitions: {reps} per configuration, medians reported"])
    if fma:
        md += [f"FMA peak of one core: **{fma:.1f} GFLOP/s**.", ""]
    rows = []
    md += ["| threads | attnx step | tokens/s | PyTorch step | tokens/s | attnx against PyTorch | attnx forward | PyTorch forward | peak RSS |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t in (1, 2):
        st = med.get(("train_step", t))
        if st is None:
            continue
        tp = torch_s.get(("step", t))
        ratio = tp / st if tp else None
        fw, tf = med.get(("train_forward", t)), torch_s.get(("forward", t))
        md.append(f"| {t} | {st * 1e3:.0f} ms | {tokens / st:.0f} | {fmt(tp * 1e3 if tp else None, '{:.0f} ms')} | "
                  f"{fmt(tokens / tp if tp else None, '{:.0f}')} | {fmt(ratio, '{:.2f}×')} | "
                  f"{fmt(fw * 1e3 if fw else None, '{:.0f} ms')} | {fmt(tf * 1e3 if tf else None, '{:.0f} ms')} | "
                  f"{fmt(rss.get(('train_step', t)), '{:.0f} MB')} |")
        if ratio is not None:
            rows.append((f"training step, {t} thread{'s' if t > 1 else ''}: against PyTorch {torch_version}"
                         + (" (target 2×)" if t == 1 else ""), f"{ratio:.2f}×", ratio >= 2 if t == 1 else None))
    md += ["", "### Where a step's time goes", "",
           "Each part timed on its own with the step's shapes: the attention of every layer (the forward with its "
           "log-sum-exp, then the fused backward, as backward(attention) runs them; the step saves the forward's log-sum-exp and runs the forward once), the matrix products (forward, "
           "dX = dY Wᵀ and dW = Xᵀ dY of every projection, the MLP and the LM head), the optimizer (clipping and "
           "AdamW); the rest is the step minus these (the element-wise work forward and backward: layer norms, GELU "
           "and its derivative, bias sums, residual sums; the loss; the embedding; the copies into kept activations).", "",
           "| threads | step | attention | GFLOP/s | matrix products | GFLOP/s | optimizer | the rest |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t in (1, 2):
        st = med.get(("train_step", t))
        if st is None:
            continue
        at, gm, op = med.get(("train_attention", t)), med.get(("train_gemm", t)), med.get(("train_optimizer", 1))
        rest = st - sum(x for x in (at, gm, op) if x)
        af = statistics.median(flops[("train_attention", t)]) if ("train_attention", t) in flops else None
        gf = statistics.median(flops[("train_gemm", t)]) if ("train_gemm", t) in flops else None
        pc = lambda x: f"{x * 1e3:.0f} ms ({100 * x / st:.0f}%)" if x else "–"
        md.append(f"| {t} | {st * 1e3:.0f} ms | {pc(at)} | {fmt(af)} | {pc(gm)} | {fmt(gf)} | {pc(op)} | {pc(rest)} |")
    md += [""] + target_table(rows) + [""]
    with open(a.markdown, "w") as f:
        f.write("\n".join(md))
    print(f"wrote {a.markdown}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bench", default="", help="attnx_bench's JSON (required unless --decode-only)")
    ap.add_argument("--decode-only", action="store_true",
                    help="write only the decode page (docs/benchmarks-decode.md) from --decode: a bench_decode run on its own")
    ap.add_argument("--rss", default="")
    ap.add_argument("--scaling", default="")
    ap.add_argument("--compiler", default="")
    ap.add_argument("--flags", default="")
    ap.add_argument("--command", default="")
    ap.add_argument("--load", default="")
    ap.add_argument("--cpu", default="")
    ap.add_argument("--compare-fused", default="")
    ap.add_argument("--compare-gemm", default="")
    ap.add_argument("--compare-mha", default="")
    ap.add_argument("--baseline", default="")
    ap.add_argument("--dynamic", default="")
    ap.add_argument("--decode", default="")
    ap.add_argument("--decode-note", default="", help="how the decode run differs from the main one (date, commit, load)")
    ap.add_argument("--gpt2", default="", help="bench_gpt2's JSON")
    ap.add_argument("--gpt2-torch", default="", help="scripts/bench_gpt2_torch.py's output (JSON lines)")
    ap.add_argument("--backward", default="", help="bench_backward's JSON")
    ap.add_argument("--variants", default="", help="bench_variants' JSON")
    ap.add_argument("--backward-torch", default="", help="scripts/bench_backward_torch.py's output (JSON lines)")
    ap.add_argument("--train-only", action="store_true",
                    help="write only the training page (docs/benchmarks-train.md) from --train and --train-torch")
    ap.add_argument("--train", default="", help="bench_train's JSON")
    ap.add_argument("--train-torch", default="", help="scripts/bench_train_torch.py's output (JSON lines)")
    ap.add_argument("--markdown", required=True)
    ap.add_argument("--plot", default="")
    a = ap.parse_args()
    if a.decode_only:
        return decode_page(a)
    if a.train_only:
        return train_page(a)
    if not a.bench:
        ap.error("--bench is required (or --decode-only with --decode)")

    ctx, med, peak, peak_runs, labels, reps = load_bench(a.bench)
    rss = load_rss(a.rss) if a.rss else []
    scaling = load_rss(a.scaling) if a.scaling else []
    Ls = sorted({k[1] for k in med})
    plotted = plot(med, peak, a.plot) if a.plot else False

    md = ["# attnx benchmarks", "",
          "Generated by `scripts/bench_report.py` from a run of `scripts/bench.sh`; do not edit by hand.",
          "How to read it and what each implementation is: see the end of this page. Decode runs made on their own "
          "(other runs, possibly newer code; compare dates): [benchmarks-decode.md](benchmarks-decode.md). A training step against PyTorch, with its time broken down (attention, matrix products, optimizer, the rest) and its peak memory: [benchmarks-train.md](benchmarks-train.md).", "",
          ] + run_lines(ctx, a, [
              f"- fused kernel path: {labels.get('fused', '?')}; OpenBLAS core: {labels.get('openblas', '?')}",
              "- threads: 1 and 2 (the `threads` argument; OpenBLAS via openblas_set_num_threads)",
              f"- repetitions: {reps} per configuration, medians reported (random interleaving of repetitions)"])
    if peak:
        md.append(f"FMA peak of one core, register-resident ({labels.get('fma_peak', '')}): **{peak:.1f} GFLOP/s** "
                  f"(median of {len(peak_runs)}; range {min(peak_runs):.1f}–{max(peak_runs):.1f}).")
        md.append("")
    fused_md, fused_rows = fused_comparison(load_compare(a.compare_fused), a.baseline)
    gemm_md, gemm_rows = gemm_comparison(load_compare(a.compare_gemm))
    mha_md, mha_rows = mha_comparison(load_compare(a.compare_mha))
    dyn_md, dyn_rows = dynamic_comparison(a.dynamic)
    dec_md, dec_rows = decode_comparison(a.decode, a.decode_note)
    gpt2_md, gpt2_rows = gpt2_comparison(a.gpt2, a.gpt2_torch)
    bwd_md, bwd_rows = backward_comparison(a.backward, a.backward_torch)
    g124_md, g124_rows = gpt2_124m_comparison(a.gpt2, a.gpt2_torch)
    var_md, var_rows = variants_comparison(a.variants)
    md += target_table(targets(med, peak, rss, scaling) + fused_rows + gemm_rows + mha_rows + dyn_rows + dec_rows + gpt2_rows +
                       g124_rows + bwd_rows + var_rows)
    md += ["", "## Throughput", ""]
    md += tables(med, peak, Ls)
    md += fused_md + gemm_md + mha_md + dyn_md + dec_md + gpt2_md + g124_md + bwd_md + var_md
    if rss:
        md += ["", "## Peak memory (one head, d = 64, one thread, separate processes)", "",
               "`extra` = peak RSS during the evaluation minus the peak RSS once inputs and output exist "
               "(getrusage ru_maxrss).", "",
               "| implementation | L | inputs + output | peak RSS | extra | time |", "|---|---:|---:|---:|---:|---:|"]
        for r in rss:
            md.append("| {} | {} | {:.1f} MiB | {:.1f} MiB | {:.1f} MiB | {:.2f} s |".format(
                "fused" if r["impl"] == "fused" else "unfused (OpenBLAS)", r["L"], r["inputs_outputs_kib"] / 1024,
                r["rss_peak_kib"] / 1024, r["extra_kib"] / 1024, r["seconds"]))
    if scaling:
        md += ["", "## Two threads, best of alternating runs", "",
               "`attnx_scaling_probe L d causal N` alternates one-thread and two-thread calls N times each and keeps "
               "the best wall time of each: on a machine shared with other work this catches the moments when both "
               "cores are free, which the medians above (wall time, 2 threads) rarely see.", "",
               "| L | d | mask | runs each | best 1 thread | best 2 threads | speed-up |", "|---:|---:|---|---:|---:|---:|---:|"]
        for r in scaling:
            md.append("| {} | {} | {} | {} | {:.3f} ms | {:.3f} ms | {:.2f}× |".format(
                r["L"], r["d"], "causal" if r["causal"] else "none", r["rounds"], r["best_1t_s"] * 1e3,
                r["best_2t_s"] * 1e3, r["speedup"]))
    md += ["", "## Plot", ""]
    md.append("![GFLOP/s against L](benchmarks.png)" if plotted else
              "(matplotlib is not installed: no plot was drawn in this run.)")
    md += ["", "## What is measured", "",
           "- GFLOP/s = 4·Lq·Lk·d per second (two products of 2·L²·d), half of that with a causal mask: only "
           "the unmasked work counts, for every implementation (so an unfused implementation that computes the "
           "full score matrix is charged only for the useful half).",
           "- Time base: one-thread figures use the CPU time of the benchmarking thread (less disturbed by other "
           "processes sharing the 2 cores); two-thread figures use wall time.",
           "- fp32, one head, Q, K, V of L × d row-major, N(0, 1) entries, scale 1/√d; causal = top-left.",
           "- **attnx fused kernel**: `attnx::kernels::flash_attention` (docs/fused_kernel.md).",
           "- **OpenBLAS**: `cblas_sgemm` (Q·Kᵀ, scaled) → row softmax → `cblas_sgemm` (·V); the L × L score matrix is "
           "materialised. OPENBLAS_CORETYPE is unset for the run so OpenBLAS uses its AVX-512 kernel. With 2 threads the "
           "softmax rows are split between the 2 threads as well.",
           "- **Eigen**: the same with Eigen 3.4 products (one thread, no OpenMP).",
           "- The unfused softmax is compiled with -ffast-math so that GCC vectorises `expf` (glibc libmvec): the "
           "strongest simple baseline.",
           "- **attnx expression**: `attnx::evaluate(softmax(scale(Q * transpose(K), s)) * V)` on views (with "
           "`mask(..., causal)`), which the library recognises and runs with the fused kernel (one thread); "
           "its gap to the direct kernel call is the dispatch and result-allocation overhead.",
           "- **attnx row evaluator**: the same expression with a context whose fused path is off: the "
           "library's row-by-row evaluation of the same problem (`kernels::attention_rows`), unfused; L ≤ 2048.",
           "- **naive**: three plain loops with a stable softmax, L ≤ 512.",
           "- **FMA peak**: independent FMA chains on registers, the ceiling for every figure.",
           "- Benchmarks share 2 cores with other work on this machine: 2-thread figures are the most sensitive "
           "to that; compare ratios within one run, not across runs.", ""]
    # The compile-time section comes from bench/compile_time/measure.py (--into): kept as the page had it.
    section = compile_time_section(a.markdown)
    with open(a.markdown, "w") as f:
        f.write("\n".join(md))
        if section:
            f.write("\n" + section)
    print(f"wrote {a.markdown}" + (f" and {a.plot}" if plotted else " (no plot: matplotlib missing)"))
    return 0


COMPILE_TIME_BEGIN = "<!-- compile-time: bench/compile_time/measure.py -->"
COMPILE_TIME_END = "<!-- compile-time: end -->"


def compile_time_section(path):
    """The page's compile-time section (between the markers), or "" when it has none."""
    try:
        text = open(path).read()
    except OSError:
        return ""
    i, j = text.find(COMPILE_TIME_BEGIN), text.find(COMPILE_TIME_END)
    return text[i:j + len(COMPILE_TIME_END)] + "\n" if 0 <= i < j else ""


if __name__ == "__main__":
    sys.exit(main())
