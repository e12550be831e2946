#!/usr/bin/env python3
"""Time two builds of one benchmark against each other, in alternation: does a change cost run time?

    python3 scripts/bench_ab.py --rounds 3 --filter 'BM_fused' old=build/bench-old/bench/attnx_bench \\
        new=build/bench/bench/attnx_bench [--min-time 0.2] [--out ab.json]

Each round runs A, then B (the order swapped every other round), every benchmark the filter selects once; per
benchmark the medians of real time over the rounds are compared. Prints each benchmark's B / A time ratio (above 1:
B is slower), the worst one, and how many are more than 3% slower. Standard library only; OPENBLAS_CORETYPE is
removed from the benchmarks' environment.
"""
import argparse, json, os, statistics, subprocess, sys


def run(binary, flt, min_time, env):
    out = subprocess.run([binary, f'--benchmark_filter={flt}', f'--benchmark_min_time={min_time}', '--benchmark_format=json'],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f'bench_ab: {binary} failed:\n{out.stderr}')
    return {b['name']: float(b['real_time']) for b in json.loads(out.stdout)['benchmarks']
            if b.get('run_type', 'iteration') == 'iteration' and not b.get('error_occurred')}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--filter', default='.')
    ap.add_argument('--min-time', default='0.2')
    ap.add_argument('--out')
    ap.add_argument('a')
    ap.add_argument('b')
    args = ap.parse_args()
    env = dict(os.environ)
    env.pop('OPENBLAS_CORETYPE', None)
    (la, ba), (lb, bb) = (s.split('=', 1) for s in (args.a, args.b))
    times = {la: {}, lb: {}}
    for r in range(args.rounds):
        order = [(la, ba), (lb, bb)] if r % 2 == 0 else [(lb, bb), (la, ba)]
        for label, binary in order:
            for name, t in run(binary, args.filter, args.min_time, env).items():
                times[label].setdefault(name, []).append(t)
        print(f'bench_ab: round {r + 1}/{args.rounds}', file=sys.stderr)
    rows = []
    for name in times[la]:
        if name in times[lb]:
            ta, tb = statistics.median(times[la][name]), statistics.median(times[lb][name])
            rows.append((tb / ta, name, ta, tb))
    for ratio, name, ta, tb in rows:
        print(f'{ratio:6.3f}  {name}  ({la} {ta:.4g}, {lb} {tb:.4g})')
    worst = max(rows) if rows else None
    slower = sum(1 for r in rows if r[0] > 1.03)
    print(f'{len(rows)} benchmarks; {lb}/{la} time ratio median {statistics.median(r[0] for r in rows):.3f}, '
          f'worst {worst[0]:.3f} ({worst[1]}); {slower} more than 3% slower')
    if args.out:
        json.dump({'times': times, 'a': la, 'b': lb}, open(args.out, 'w'), indent=1)


if __name__ == '__main__':
    main()
