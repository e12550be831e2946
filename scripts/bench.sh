#!/usr/bin/env bash
# Build and run attnx's benchmarks, then write docs/benchmarks.md (and docs/benchmarks.png when
# matplotlib is installed) from the results.
#
#   scripts/bench.sh            full run (about half an hour)
#   scripts/bench.sh --quick    one repetition and round, short minimum time: a smoke test of the pipeline
#
# Three builds of the benchmarks, measured in one run:
#   build/bench           -O3 -march=native (CMake Release): the main tables
#   build/bench-default   -O2 and nothing else: what a user gets with the compiler's defaults (the kernels
#                         choose their instruction set at run time); compared cell by cell with the native build
#   build/bench-baseline  the fused-kernel benchmark of an earlier commit (ATTNX_BENCH_BASELINE, default
#                         1d05f55, the last one before the execution context), -O3 -march=native: this
#                         version against that one, cell by cell ("none" skips it)
# The comparisons alternate the binaries round by round (scripts/bench_compare.py).
#
# Environment:
#   ATTNX_BENCH_REPS      repetitions of the main run (default 5); medians are reported
#   ATTNX_BENCH_ROUNDS    rounds of the comparisons (default 5)
#   ATTNX_BENCH_MIN_TIME  minimum seconds per repetition (default 0.1 main run, 0.3 comparisons)
#   ATTNX_BENCH_FILTER    Google Benchmark filter regex of the main run (default: all)
#   ATTNX_BENCH_RSS_L     sequence lengths of the peak-RSS probe (default "16384 32768")
#   ATTNX_BENCH_BASELINE  the earlier commit (default 1d05f55; "none": no baseline)
#   ATTNX_BENCH_WAIT_IDLE wait up to this many seconds for the 1-minute load average to drop
#                         below 0.5 before running (default 0: do not wait)
#   CXX                   compiler (default g++)
#
# OPENBLAS_CORETYPE is unset for the benchmark processes only, so that OpenBLAS picks its
# AVX-512 kernel on this CPU (the environment may force the AVX2 one for tests).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

# The Debian packages of the benchmarks (as root: installed when missing; otherwise the apt-get line is printed):
# Google Benchmark, OpenBLAS and Eigen (the unfused baselines), python3-torch (PyTorch's GPT-2 beside attnx's).
ATTNX_SCRIPT=bench.sh
. "$ROOT/scripts/lib/packages.sh"
ensure_packages cmake g++ git libboost-dev libbenchmark-dev libopenblas-dev libeigen3-dev python3 python3-torch

REPS="${ATTNX_BENCH_REPS:-5}"
ROUNDS="${ATTNX_BENCH_ROUNDS:-5}"
MIN_TIME="${ATTNX_BENCH_MIN_TIME:-0.1}"
CMP_TIME="${ATTNX_BENCH_MIN_TIME:-0.3}"
FILTER="${ATTNX_BENCH_FILTER:-.}"
RSS_L="${ATTNX_BENCH_RSS_L:-16384 32768}"
BASELINE="${ATTNX_BENCH_BASELINE:-1d05f55}"
if [ "${1:-}" = "--quick" ]; then
  REPS=1
  ROUNDS=1
  MIN_TIME=0.01
  CMP_TIME=0.01
  RSS_L="${ATTNX_BENCH_RSS_L:-16384}"
fi
CXX_BIN="$(command -v "${CXX:-g++}")"  # the full path, as CMake caches it
BUILD="build/bench"
OUT="$BUILD/results"
mkdir -p "$OUT"

# --- builds (one after the other: never two builds, or a build and a run, at once) ------------------------
common=(-DCMAKE_CXX_COMPILER="$CXX_BIN" -DATTNX_BUILD_BENCH=ON -DATTNX_BUILD_TESTS=OFF -DATTNX_BUILD_EXAMPLES=OFF)
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DATTNX_BENCH_NATIVE=ON "${common[@]}" >/dev/null
cmake --build "$BUILD" -j 2 --target attnx_bench attnx_rss_probe attnx_scaling_probe bench_gemm bench_mha bench_dynamic bench_decode \
  bench_gpt2 bench_backward bench_variants
cmake -S . -B build/bench-default -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2" -DATTNX_BENCH_NATIVE=OFF \
  "${common[@]}" >/dev/null
cmake --build build/bench-default -j 2 --target attnx_bench bench_gemm bench_mha
have_baseline=0
if [ "$BASELINE" != none ]; then
  # Exported once per commit (a fresh export would touch every file and rebuild it on every run).
  want="$(git rev-parse --verify -q "$BASELINE^{commit}" || true)"
  have="$(cat build/bench-baseline/commit 2>/dev/null || true)"
  if [ -n "$want" ] && [ "$want" != "$have" ]; then
    rm -rf build/bench-baseline
    mkdir -p build/bench-baseline/src
    git archive "$want" | tar -x -C build/bench-baseline/src && echo "$want" > build/bench-baseline/commit
  fi
  if [ -n "$want" ] && [ "$(cat build/bench-baseline/commit 2>/dev/null)" = "$want" ]; then
    cmake -S build/bench-baseline/src -B build/bench-baseline/build -DCMAKE_BUILD_TYPE=Release "${common[@]}" >/dev/null
    cmake --build build/bench-baseline/build -j 2 --target attnx_bench
    have_baseline=1
  else
    echo "bench.sh: cannot export $BASELINE: no baseline comparison" >&2
  fi
fi

waited=0
while [ "$waited" -lt "${ATTNX_BENCH_WAIT_IDLE:-0}" ] &&
      awk '{ exit !($1 >= 0.5) }' /proc/loadavg; do
  sleep 10
  waited=$((waited + 10))
done
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- the main run: the fused kernel against the unfused baselines, the FMA peak -------------------------
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

# --- the comparisons, alternating binaries -----------------------------------------------------------------
fused=(native="$BUILD/bench/attnx_bench:BM_fused/|BM_fma_peak"
       default="build/bench-default/bench/attnx_bench:BM_fused/|BM_fma_peak")
if [ "$have_baseline" = 1 ]; then
  fused+=(baseline="build/bench-baseline/build/bench/attnx_bench:BM_fused/")
fi
python3 scripts/bench_compare.py --out "$OUT/compare_fused.json" --rounds "$ROUNDS" --min-time "$CMP_TIME" "${fused[@]}"
python3 scripts/bench_compare.py --out "$OUT/compare_gemm.json" --rounds "$ROUNDS" --min-time "$CMP_TIME" \
  native="$BUILD/bench/bench_gemm:impl:(attnx|attnx_2t|openblas|eigen)/" \
  default="build/bench-default/bench/bench_gemm:impl:(attnx|attnx_2t)/"
python3 scripts/bench_compare.py --out "$OUT/compare_mha.json" --rounds "$ROUNDS" --min-time "$CMP_TIME" \
  native="$BUILD/bench/bench_mha:BM_mha_(fused|projections)/L:(128|512|1024|2048)/" \
  default="build/bench-default/bench/bench_mha:BM_mha_fused/L:(512|1024)/"
# run_repeated BINARY OUT: every benchmark of BINARY, repetitions interleaved, JSON to $OUT/OUT.json
run_repeated() {
  local cmd=(env -u OPENBLAS_CORETYPE "$BUILD/bench/$1"
    --benchmark_repetitions="$REPS" --benchmark_min_time="$CMP_TIME"
    --benchmark_enable_random_interleaving=true
    --benchmark_out="$OUT/$2.json" --benchmark_out_format=json)
  echo "+ ${cmd[*]}"
  "${cmd[@]}" | grep -v '_\(mean\|median\|stddev\|cv\) ' || true
}
run_repeated bench_dynamic dynamic
run_repeated bench_decode decode
run_repeated bench_gpt2 gpt2
# PyTorch's GPT-2 beside attnx's (Debian's python3-torch, the system Python); skipped when torch is missing.
rm -f "$OUT/gpt2_torch.jsonl"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "+ /usr/bin/python3 scripts/bench_gpt2_torch.py --reps $((REPS * 2 - 1))"
  env -u OPENBLAS_CORETYPE /usr/bin/python3 scripts/bench_gpt2_torch.py --reps $((REPS * 2 - 1)) | tee "$OUT/gpt2_torch.jsonl"
  echo "+ /usr/bin/python3 scripts/bench_gpt2_torch.py --reps $REPS --config 124m"
  env -u OPENBLAS_CORETYPE /usr/bin/python3 scripts/bench_gpt2_torch.py --reps "$REPS" --config 124m | tee -a "$OUT/gpt2_torch.jsonl"
else
  echo "bench.sh: python3-torch is not installed: the GPT-2 table has no PyTorch column (apt-get install python3-torch)"
fi
# The fused backward, then PyTorch's autograd on the same problems.
run_repeated bench_backward backward
rm -f "$OUT/backward_torch.jsonl"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "+ /usr/bin/python3 scripts/bench_backward_torch.py --reps $((REPS * 2 - 1))"
  env -u OPENBLAS_CORETYPE /usr/bin/python3 scripts/bench_backward_torch.py --reps $((REPS * 2 - 1)) | tee "$OUT/backward_torch.jsonl"
fi
run_repeated bench_variants variants
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

# The report needs only the standard library; the plot needs matplotlib, which may be installed
# for the system Python only (apt-get install python3-matplotlib) when python3 is another one.
PY=python3
if ! "$PY" -c 'import matplotlib' 2>/dev/null && [ -x /usr/bin/python3 ] &&
   /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  PY=/usr/bin/python3
fi
cpu_model="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
"$PY" scripts/bench_report.py \
  --bench "$OUT/bench.json" --rss "$OUT/rss.jsonl" --scaling "$OUT/scaling.jsonl" \
  --compare-fused "$OUT/compare_fused.json" --compare-gemm "$OUT/compare_gemm.json" \
  --compare-mha "$OUT/compare_mha.json" --baseline "$BASELINE" --dynamic "$OUT/dynamic.json" --decode "$OUT/decode.json" \
  --gpt2 "$OUT/gpt2.json" --gpt2-torch "$OUT/gpt2_torch.jsonl" \
  --backward "$OUT/backward.json" --backward-torch "$OUT/backward_torch.jsonl" --variants "$OUT/variants.json" \
  --cpu "$cpu_model" \
  --compiler "$("$CXX_BIN" --version | head -n 1)" \
  --flags "main run: -O3 -march=native (CMake Release); default-flags build: -O2 only; softmax of the unfused baselines: + -ffast-math" \
  --command "scripts/bench.sh $* (ATTNX_BENCH_REPS=$REPS ATTNX_BENCH_ROUNDS=$ROUNDS ATTNX_BENCH_FILTER='$FILTER')" \
  --load "before: $load_before; after: $load_after (1/5/15-minute load averages, $(nproc) CPUs)" \
  --markdown docs/benchmarks.md --plot docs/benchmarks.png
