#!/usr/bin/env python3
"""Line coverage of the headers under INCLUDE from the .gcda files of a --coverage build (scripts/test.sh coverage).

usage: coverage_report.py BUILD_DIR INCLUDE_DIR [--lines]

Runs gcov (JSON output) on every object file that has run data, sums each header line's count over every
object and instantiation, and prints per header the lines with code and those never run (--lines: each of
them with its text)."""
import collections
import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    build, include = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
    gcov = os.environ.get('GCOV', 'gcov')
    show_lines = '--lines' in sys.argv[3:]
    counts = collections.defaultdict(int)  # (header, line) -> times run
    gcdas = glob.glob(os.path.join(build, '**', '*.gcda'), recursive=True)
    if not gcdas:
        sys.exit('coverage_report.py: no .gcda files under ' + build + ' (run scripts/test.sh coverage first)')
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, gcda in enumerate(gcdas):
            out = os.path.join(tmp, str(n))
            os.mkdir(out)
            r = subprocess.run([gcov, '--json-format', '-o', os.path.dirname(gcda), gcda[:-5] + '.o'], cwd=out,
                               capture_output=True, text=True, check=False)
            jsons = glob.glob(os.path.join(out, '*.gcov.json.gz'))
            if r.returncode != 0 or not jsons:
                failed.append((gcda, (r.stderr or r.stdout).strip().splitlines()[-1:] or ['no output']))
            for js in jsons:
                with gzip.open(js) as f:
                    data = json.load(f)
                for fi in data['files']:
                    path = os.path.realpath(os.path.join(data.get('current_working_directory', ''), fi['file']))
                    if not path.startswith(include + os.sep):
                        continue
                    rel = os.path.relpath(path, include)
                    for line in fi['lines']:
                        counts[(rel, line['line_number'])] += line['count']
    for gcda, why in failed:
        print(f'coverage_report.py: {gcov} gave nothing for {gcda}: {why[0]}', file=sys.stderr)
    if not counts:
        sys.exit('coverage_report.py: no line of ' + include + ' in the run data')
    headers = collections.defaultdict(list)
    for (rel, line), c in counts.items():
        headers[rel].append((line, c))
    total = never_total = 0
    print(f'{"header":48s} {"lines":>6s} {"never run":>10s}')
    for rel in sorted(headers):
        lines = sorted(headers[rel])
        never = [line for line, c in lines if c == 0]
        total += len(lines)
        never_total += len(never)
        print(f'{rel:48s} {len(lines):6d} {len(never):10d}')
        if show_lines and never:
            with open(os.path.join(include, rel), encoding='utf-8') as f:
                text = f.read().splitlines()
            for line in never:
                src = text[line - 1].strip()[:120] if line <= len(text) else '(past the end: the header changed since)'
                print(f'    {line:5d}  {src}')
    print(f'{"all":48s} {total:6d} {never_total:10d}  ({100.0 * (total - never_total) / max(total, 1):.1f}% of the lines run)')


if __name__ == '__main__':
    main()
