#!/usr/bin/env python3
"""Run several benchmark binaries in alternation, so that their figures come from the same run.

    bench_compare.py --out compare.json --rounds 5 --min-time 0.3 \\
        native=build/bench/bench/attnx_bench:'BM_fused' default=build/bench-default/bench/attnx_bench:'BM_fused'

Each round runs every binary once (one repetition of every benchmark its filter selects) before the next
round starts; a slow moment of the machine then hits every binary alike, and the medians over the rounds
are compared. Writes {"runs": {label: {benchmark: [GFLOP/s per round]}}, "labels": {label: {benchmark:
label}}}. Standard library only. OPENBLAS_CORETYPE is removed from the benchmarks' environment (OpenBLAS
then uses its AVX-512 kernel where the CPU has it).
"""
import argparse
import json
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-time", default="0.3")
    ap.add_argument("specs", nargs="+", help="label=binary:filter")
    a = ap.parse_args()
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    specs = []
    for s in a.specs:
        label, rest = s.split("=", 1)
        binary, flt = rest.split(":", 1)
        specs.append((label, binary, flt))
    runs, labels = {}, {}
    for r in range(a.rounds):
        for label, binary, flt in specs:
            out = subprocess.run([binary, f"--benchmark_filter={flt}", f"--benchmark_min_time={a.min_time}",
                                  "--benchmark_format=json"], capture_output=True, text=True, env=env)
            if out.returncode != 0:
                print(out.stderr, file=sys.stderr)
                sys.exit(f"bench_compare: {binary} failed")
            for b in json.loads(out.stdout)["benchmarks"]:
                if "FLOPS" not in b or b.get("error_occurred"):
                    continue
                runs.setdefault(label, {}).setdefault(b["name"], []).append(float(b["FLOPS"]) / 1e9)
                labels.setdefault(label, {})[b["name"]] = b.get("label", "")
        print(f"bench_compare: round {r + 1}/{a.rounds} done", file=sys.stderr)
    with open(a.out, "w") as f:
        json.dump({"runs": runs, "labels": labels, "rounds": a.rounds, "min_time": a.min_time}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
