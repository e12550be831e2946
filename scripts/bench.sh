#!/usr/bin/env bash
# Build and run attnx's benchmarks, then write docs/benchmarks.md (and docs/benchmarks.png when
# matplotlib is installed) from the results.
#
#   scripts/bench.sh            full run (a few minutes)
#   scripts/bench.sh --quick    one repetition, short minimum time: a smoke test of the pipeline
#
# Environment:
#   ATTNX_BENCH_REPS      repetitions per benchmark (default 5); medians are reported
#   ATTNX_BENCH_MIN_TIME  minimum seconds per repetition (default 0.1)
#   ATTNX_BENCH_FILTER    Google Benchmark filter regex (default: all)
#   ATTNX_BENCH_RSS_L     sequence lengths of the peak-RSS probe (default "16384 32768")
#   ATTNX_BENCH_WAIT_IDLE wait up to this many seconds for the 1-minute load average to drop
#                         below 0.5 before running (default 0: do not wait)
#   CXX                   compiler (default g++)
#
# OPENBLAS_CORETYPE is unset for the benchmark processes only, so that OpenBLAS picks its
# AVX-512 kernel on this CPU (the environment forces the AVX2 one for tests).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

REPS="${ATTNX_BENCH_REPS:-5}"
MIN_TIME="${ATTNX_BENCH_MIN_TIME:-0.1}"
FILTER="${ATTNX_BENCH_FILTER:-.}"
RSS_L="${ATTNX_BENCH_RSS_L:-16384 32768}"
if [ "${1:-}" = "--quick" ]; then
  REPS=1
  MIN_TIME=0.01
  RSS_L="${ATTNX_BENCH_RSS_L:-16384}"
fi
CXX_BIN="${CXX:-g++}"
BUILD="build/bench"
OUT="$BUILD/results"
mkdir -p "$OUT"

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$CXX_BIN" \
  -DATTNX_BUILD_BENCH=ON -DATTNX_BUILD_TESTS=OFF -DATTNX_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$BUILD" -j 1 --target attnx_bench attnx_rss_probe attnx_scaling_probe

waited=0
while [ "$waited" -lt "${ATTNX_BENCH_WAIT_IDLE:-0}" ] &&
      awk '{ exit !($1 >= 0.5) }' /proc/loadavg; do
  sleep 10
  waited=$((waited + 10))
done
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
bench_cmd=(env -u OPENBLAS_CORETYPE "$BUILD/bench/attnx_bench"
  --benchmark_filter="$FILTER"
  --benchmark_repetitions="$REPS"
  --benchmark_min_time="$MIN_TIME"
  --benchmark_enable_random_interleaving=true
  --benchmark_out="$OUT/bench.json" --benchmark_out_format=json)
echo "+ ${bench_cmd[*]}"
"${bench_cmd[@]}" | grep -v '_\(mean\|median\|stddev\|cv\) ' || true

: >"$OUT/rss.jsonl"
for L in $RSS_L; do
  for impl in fused unfused; do
    echo "+ attnx_rss_probe $impl $L 64"
    env -u OPENBLAS_CORETYPE "$BUILD/bench/attnx_rss_probe" "$impl" "$L" 64 1 | tee -a "$OUT/rss.jsonl"
  done
done
: >"$OUT/scaling.jsonl"
for cfg in "1024 64 0 40" "4096 64 0 10" "1024 64 1 40" "4096 64 1 10"; do
  echo "+ attnx_scaling_probe $cfg"
  # shellcheck disable=SC2086
  "$BUILD/bench/attnx_scaling_probe" $cfg | tee -a "$OUT/scaling.jsonl"
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

# The report needs only the standard library; the plot needs matplotlib, which may be installed
# for the system Python only (apt-get install python3-matplotlib) when python3 is another one.
PY=python3
if ! "$PY" -c 'import matplotlib' 2>/dev/null && [ -x /usr/bin/python3 ] &&
   /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  PY=/usr/bin/python3
fi
"$PY" scripts/bench_report.py \
  --bench "$OUT/bench.json" --rss "$OUT/rss.jsonl" --scaling "$OUT/scaling.jsonl" \
  --compiler "$("$CXX_BIN" --version | head -n 1)" \
  --flags "-O3 -march=native (CMake Release); softmax of the unfused baselines: + -ffast-math" \
  --command "scripts/bench.sh $* (ATTNX_BENCH_REPS=$REPS ATTNX_BENCH_MIN_TIME=$MIN_TIME ATTNX_BENCH_FILTER='$FILTER')" \
  --load "before: $load_before; after: $load_after (1/5/15-minute load averages, $(nproc) CPUs)" \
  --markdown docs/benchmarks.md --plot docs/benchmarks.png
