#!/usr/bin/env python3
"""What a user's program costs to compile through the installed attnx package.

    python3 bench/compile_time/measure.py [--build DIR] [--reps N] [--compilers g++,clang++] [--header-only]
                                          [--into docs/benchmarks.md]

Installs the library built in DIR (default build/gcc, which must be configured and built: cmake --build DIR
--target attnx) into DIR/compile-time-prefix, configures bench/compile_time (find_package(attnx)) once per
compiler with -O2, and times each probe's compile command (the one CMake generates for the target; the object
is written to /dev/null) N times (default 5): CPU seconds (user + system) and the compiler's peak resident memory,
from /usr/bin/time. Prints a Markdown table with medians, the empty program (#include <vector>) in the same run,
and the machine (CPU, load) it ran on. --into FILE also puts it in FILE's "Compile time" section (between the markers
that scripts/bench_report.py keeps when it writes the page again), replacing the one there.

Probes (issue targets in brackets): (a) attention: one float causal attention, 8 lines [< 3 s]; (b)
worked_example: examples/worked_example.cpp [< 3 s]; (c) mha_decode: a multi-head attention forward and decoding
steps over a KV cache [< 6 s]; (d) gpt2: GPT-2 in its 124M configuration, loaded from safetensors, generating
[< 10 s]. Peak memory < 1 GB each; clang within 1.5x of g++.
"""
import argparse, json, os, platform, shlex, statistics, subprocess, sys, datetime

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
PROBES = ['attention', 'worked_example', 'mha_decode', 'gpt2']
TARGETS = {'attention': 3.0, 'worked_example': 3.0, 'mha_decode': 6.0, 'gpt2': 10.0}


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, **kw)


def cpu_name():
    try:
        for line in open('/proc/cpuinfo'):
            if line.startswith('model name'):
                return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or 'unknown CPU'


def commands(build, compiler, prefix):
    out = os.path.join(build, 'compile-time-' + os.path.basename(compiler))
    run(['cmake', '-S', os.path.join(ROOT, 'bench', 'compile_time'), '-B', out, '-DCMAKE_BUILD_TYPE=Release',
         '-DCMAKE_CXX_FLAGS_RELEASE=-O2', '-DCMAKE_CXX_COMPILER=' + compiler, '-DCMAKE_PREFIX_PATH=' + prefix],
        stdout=subprocess.DEVNULL)
    cmds = {}
    for entry in json.load(open(os.path.join(out, 'compile_commands.json'))):
        target = entry['output'].split('/')[1].replace('.dir', '') if 'output' in entry else None
        if target is None:  # (CMake < 3.20 has no "output": use the object path in the command)
            target = entry['command'].split('CMakeFiles/')[1].split('.dir')[0]
        args = shlex.split(entry['command'])
        o = args.index('-o')
        args[o + 1] = '/dev/null'
        cmds[target] = (args, entry['directory'])
    return cmds


def timed(args, cwd):
    r = subprocess.run(['/usr/bin/time', '-f', '%U %S %M'] + args, cwd=cwd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit('compile failed: ' + ' '.join(args) + '\n' + r.stderr)
    u, s, m = r.stderr.strip().split('\n')[-1].split()
    return float(u) + float(s), int(m) / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default=os.path.join(ROOT, 'build', 'gcc'))
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--compilers', default='g++,clang++')
    ap.add_argument('--header-only', action='store_true', help='also time the header-only form of each probe')
    ap.add_argument('--into', help='a Markdown page whose compile-time section to replace (docs/benchmarks.md)')
    a = ap.parse_args()
    prefix = os.path.join(a.build, 'compile-time-prefix')
    run(['cmake', '--install', a.build, '--prefix', prefix], stdout=subprocess.DEVNULL)
    compilers = a.compilers.split(',')
    cmds = {c: commands(a.build, c, prefix) for c in compilers}
    names = ['empty'] + PROBES + ([p + '_header_only' for p in PROBES] if a.header_only else [])
    times = {(c, n): [] for c in compilers for n in names}
    load0 = os.getloadavg()[0]
    for _ in range(a.reps):  # round by round, so that a slow minute touches every probe alike
        for c in compilers:
            for n in names:
                times[(c, n)].append(timed(*cmds[c][n]))
    load1 = os.getloadavg()[0]
    med = {k: (statistics.median(t for t, _ in v), max(m for _, m in v)) for k, v in times.items()}
    versions = {c: run([c, '--version'], capture_output=True).stdout.split('\n')[0] for c in compilers}
    out = []
    out.append(f'Compile time of a program through find_package(attnx), -O2, {a.reps} runs each, medians of CPU seconds '
          f'(user + system) and the largest peak memory of the compiler. {datetime.date.today()}, {cpu_name()}, '
          f'{os.cpu_count()} CPUs, load {load0:.2f} before, {load1:.2f} after; '
          + '; '.join(versions[c] for c in compilers) + '.\n')
    head = '| probe | target | ' + ' | '.join(f'{c} s | {c} MB' for c in compilers)
    if len(compilers) > 1:
        head += f' | {compilers[1]} / {compilers[0]}'
    out.append(head + ' |')
    out.append('|' + '---|' * (head.count('|') - 1))
    for n in names:
        base = n.replace('_header_only', '')
        tgt = 'baseline' if n == 'empty' else ('header-only' if n.endswith('_header_only') else f'< {TARGETS[base]:g} s')
        row = f'| {n} | {tgt} | ' + ' | '.join(f'{med[(c, n)][0]:.2f} | {med[(c, n)][1]:.0f}' for c in compilers)
        if len(compilers) > 1:
            row += f' | {med[(compilers[1], n)][0] / med[(compilers[0], n)][0]:.2f}'
        out.append(row + ' |')
    text = '\n'.join(out) + '\n'
    print(text)
    if a.into:
        begin, end = '<!-- compile-time: bench/compile_time/measure.py -->', '<!-- compile-time: end -->'
        section = (f'{begin}\n## Compile time\n\nGenerated by `bench/compile_time/measure.py` (`python3 '
                   f'bench/compile_time/measure.py --into docs/benchmarks.md`); the probes are in bench/compile_time/probes '
                   f'(worked_example: examples/worked_example.cpp).\n\n{text}{end}\n')
        page = open(a.into).read()
        i, j = page.find(begin), page.find(end)
        page = page[:i] + section + page[j + len(end) + 1:] if 0 <= i < j else page.rstrip('\n') + '\n\n' + section
        open(a.into, 'w').write(page)
        print('wrote the compile-time section of ' + a.into)


if __name__ == '__main__':
    main()
