#!/usr/bin/env bash
# Build attnx and run its tests in these configurations:
#
#   gcc    build/gcc    g++ -O2, every test: unit, examples, compile_fail and
#                       their controls, headers, warnings, install
#   clang  build/clang  clang++ -O0 (the kernels and the unit tests that
#                       spend their time in their own reference loops -O1)
#                       with AddressSanitizer + UBSan (ASan at -O1 compiles
#                       2.6x slower): unit and
#                       example tests, compile_fail (each failing program:
#                       the one-error and message checks; the controls and the
#                       headers tests, compiler-neutral, run under gcc),
#                       warnings (install runs under gcc: the consumer is
#                       built without sanitizers), and the libFuzzer targets
#                       (the safetensors loader and the kernel-vs-reference
#                       differential target, ATTNX_FUZZ_SECONDS each, default
#                       60) linked with this build's library, which gets
#                       libFuzzer's coverage instrumentation too
#   tsan   build/tsan   g++ -O1, ThreadSanitizer: the unit tests that start
#                       threads: concurrent callers, changing thread counts,
#                       fork (test_context), the threaded kernels (flash
#                       attention, decode split-K, GEMM, dispatch,
#                       differential) and the memory layer; not the decode
#                       loop variants (unit.decode.few_rows*: one driver,
#                       the same threading as unit.decode's cases, and most
#                       of this configuration's time)
#   fuzz   build/fuzz   (not in the default set) clang++ -O1 with libFuzzer +
#                       ASan + UBSan, only the two fuzz targets, for longer
#                       runs (ATTNX_FUZZ_SECONDS=3600 scripts/test.sh fuzz);
#                       corpus and findings in build/<config>/fuzz/
#   asan   build/asan   (not in the default set) g++ -O1 with AddressSanitizer
#                       + UBSan: unit and example tests
#   coverage  build/coverage  (not in the default set) g++ -O1 --coverage:
#                       the unit tests, then per header of include/attnx the
#                       lines of compiled code no unit test ran
#                       (scripts/coverage_report.py; ATTNX_COVERAGE_LINES=1
#                       lists them)
#
#   scripts/test.sh                                    gcc, clang and tsan
#   scripts/test.sh gcc|clang|tsan|fuzz|asan|coverage  one of them
#
# On Debian/Ubuntu it first checks the packages it needs (cmake, g++, clang,
# libclang-rt-14-dev, libboost-dev, libboost-test-dev, nlohmann-json3-dev, libopenmpi-dev, openmpi-bin;
# ninja-build is used when present) and, when run as root, installs the
# missing ones with apt-get.
#
# It goes on through every configuration even when one fails, prints a
# summary, and ends with the line 'N passed, N failed' (ctest's counts over
# all configurations; a configuration that fails to configure or build
# counts one failure more). Exit status: 0 only if nothing failed and at
# least one test ran.
#
# Environment: ATTNX_JOBS (default: nproc) parallel build jobs and tests.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT" || exit 1

usage() {
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

CONFIGS=(gcc clang tsan)
if [ $# -gt 1 ]; then
  usage >&2
  exit 2
elif [ $# -eq 1 ]; then
  case "$1" in
    gcc|clang|asan|tsan|fuzz|coverage) CONFIGS=("$1") ;;
    -h|--help) usage; exit 0 ;;
    *) echo "test.sh: unknown configuration '$1'" >&2; usage >&2; exit 2 ;;
  esac
fi

# --- Debian packages ---------------------------------------------------------
ATTNX_SCRIPT=test.sh
. "$ROOT/scripts/lib/packages.sh"

packages=(cmake g++ libboost-dev libboost-test-dev nlohmann-json3-dev libopenmpi-dev openmpi-bin)
for c in "${CONFIGS[@]}"; do
  # clang++'s sanitizer runtimes (libFuzzer too) are in libclang-rt-14-dev
  if [ "$c" = clang ] || [ "$c" = fuzz ]; then packages+=(clang libclang-rt-14-dev); fi
  if [ "$c" = coverage ]; then packages+=(python3); fi  # the report (gcov comes with g++)
done
ensure_packages "${packages[@]}"

# --- common settings -----------------------------------------------------------
JOBS="${ATTNX_JOBS:-$(nproc 2>/dev/null || echo 2)}"
if command -v ninja >/dev/null 2>&1; then
  GENERATOR=Ninja
  KEEP_GOING=(-k 0)
else
  GENERATOR="Unix Makefiles"
  KEEP_GOING=(-k)
fi

TOTAL_PASSED=0
TOTAL_FAILED=0
SUMMARY=()

# run_config NAME CXX CTEST_EXCLUDE_REGEX CMAKE_ARGS...
#   (environment: ONLY_LABEL, a ctest label to run instead of all but the excluded;
#    ONLY_TESTS, a ctest name regex (-R) to run only those; SKIP_TESTS, one (-E) to leave out;
#    ONLY_TARGETS, the targets to build instead of all)
run_config() {
  local name="$1" cxx="$2" exclude="$3"
  shift 3
  local dir="build/$name"
  local t0 t_conf=0 t_build=0 t_test=0
  local status="ok" passed=0 failed=0 total=0 note=""

  echo
  echo "=================================================================="
  echo "== $name: $dir ($cxx, $GENERATOR)"
  echo "=================================================================="

  # A build directory made with another generator, compiler or checkout
  # cannot simply be reconfigured: start it afresh.
  if [ -f "$dir/CMakeCache.txt" ]; then
    if ! grep -qxF "CMAKE_GENERATOR:INTERNAL=$GENERATOR" "$dir/CMakeCache.txt" ||
       ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT" "$dir/CMakeCache.txt" ||
       [ "$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$dir/CMakeCache.txt")" != "$(command -v "$cxx")" ]; then
      echo "-- $name: removing stale $dir"
      rm -rf "$dir"
    fi
  fi

  t0=$SECONDS
  if ! cmake -S . -B "$dir" -G "$GENERATOR" -DCMAKE_CXX_COMPILER="$cxx" \
       -DATTNX_BUILD_TESTS=ON -DATTNX_BUILD_EXAMPLES=ON -DATTNX_BUILD_BENCH=OFF "$@"; then
    t_conf=$((SECONDS - t0))
    SUMMARY+=("$(printf '%-6s FAILED: configure failed (configure %ds)' "$name" "$t_conf")")
    TOTAL_FAILED=$((TOTAL_FAILED + 1))
    return
  fi
  t_conf=$((SECONDS - t0))

  t0=$SECONDS
  local build_ok=1
  local targets=()
  if [ -n "${ONLY_TARGETS:-}" ]; then
    # shellcheck disable=SC2206
    targets=(--target ${ONLY_TARGETS})
  fi
  if ! cmake --build "$dir" -j "$JOBS" "${targets[@]}" -- "${KEEP_GOING[@]}"; then
    build_ok=0
    status="FAILED"
    note="build failed; "
  fi
  t_build=$((SECONDS - t0))

  t0=$SECONDS
  local log="$dir/ctest-summary.log" ctest_args=(--test-dir "$dir" --output-on-failure -j "$JOBS")
  if [ -n "$exclude" ]; then
    ctest_args+=(-LE "$exclude")
  fi
  if [ -n "${ONLY_LABEL:-}" ]; then
    ctest_args+=(-L "$ONLY_LABEL")
  fi
  if [ -n "${ONLY_TESTS:-}" ]; then
    ctest_args+=(-R "$ONLY_TESTS")
  fi
  if [ -n "${SKIP_TESTS:-}" ]; then
    ctest_args+=(-E "$SKIP_TESTS")
  fi
  echo "-- $name: ctest ${ctest_args[*]}"
  if ! ctest "${ctest_args[@]}" 2>&1 | tee "$log"; then
    status="FAILED"
  fi
  t_test=$((SECONDS - t0))

  # "95% tests passed, 1 tests failed out of 20"
  local line
  line="$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)"
  if [ -n "$line" ]; then
    failed="$(sed -E 's/.*, ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")"
    total="$(sed -E 's/.*, ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")"
    passed=$((total - failed))
  else
    note+="ctest ran no test; "
  fi
  if [ "$build_ok" -eq 0 ] && [ "$failed" -eq 0 ]; then
    failed=1   # the build failure itself
  fi
  if [ "$failed" -gt 0 ]; then
    status="FAILED"
  fi

  TOTAL_PASSED=$((TOTAL_PASSED + passed))
  TOTAL_FAILED=$((TOTAL_FAILED + failed))
  SUMMARY+=("$(printf '%-6s %-6s %3d passed, %3d failed  %s(configure %ds, build %ds, test %ds)' \
    "$name" "$status" "$passed" "$failed" "$note" "$t_conf" "$t_build" "$t_test")")
}

# The tests that start threads (the ThreadSanitizer configuration builds and runs only these).
TSAN_TESTS=(context decode differential flash_attention fused_dispatch gemm memory)
TSAN_TARGETS="${TSAN_TESTS[*]/#/test_}"
TSAN_REGEX="^unit\.($(IFS='|'; echo "${TSAN_TESTS[*]}"))(\.|\$)"

for c in "${CONFIGS[@]}"; do
  case "$c" in
    gcc)
      run_config gcc g++ "" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O2 -DATTNX_SANITIZE= -DATTNX_STRICT_WARNINGS=ON ;;
    clang)
      run_config clang clang++ "control|headers|install" \
        -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -gline-tables-only" \
        -DATTNX_SANITIZE=address,undefined -DATTNX_STRICT_WARNINGS=ON \
        -DATTNX_BUILD_FUZZ=ON -DATTNX_FUZZ_SECONDS="${ATTNX_FUZZ_SECONDS:-60}" ;;
    asan)
      run_config asan g++ "compile_fail|headers|warnings|install|fuzz" \
        -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
        -DATTNX_SANITIZE=address,undefined -DATTNX_STRICT_WARNINGS=ON ;;
    tsan)
      ONLY_TARGETS="$TSAN_TARGETS" ONLY_TESTS="$TSAN_REGEX" SKIP_TESTS='^unit\.decode\.few_rows' \
        run_config tsan g++ "compile_fail|headers|warnings|install|fuzz" \
        -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
        -DATTNX_SANITIZE=thread ;;
    fuzz)
      ONLY_LABEL=fuzz ONLY_TARGETS="fuzz_safetensors fuzz_kernel test_safetensors" \
        run_config fuzz clang++ "" \
        -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" \
        -DATTNX_BUILD_FUZZ=ON -DATTNX_BUILD_EXAMPLES=OFF \
        -DATTNX_FUZZ_SECONDS="${ATTNX_FUZZ_SECONDS:-60}" ;;
    coverage)
      # The programs of the unit.* tests (tests/CMakeLists.txt's target attnx_unit_tests); run data from an
      # earlier run would add up, so it goes first.
      [ -d build/coverage ] && find build/coverage -name '*.gcda' -delete
      ONLY_TARGETS=attnx_unit_tests ONLY_TESTS='^unit\.' \
        run_config coverage g++ "compile_fail|headers|warnings|install|fuzz" \
        -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 --coverage" \
        -DCMAKE_EXE_LINKER_FLAGS=--coverage -DATTNX_SANITIZE=
      python3 scripts/coverage_report.py build/coverage include ${ATTNX_COVERAGE_LINES:+--lines} ||
        TOTAL_FAILED=$((TOTAL_FAILED + 1)) ;;
  esac
done

echo
echo "=================================================================="
echo "== summary"
echo "=================================================================="
for s in "${SUMMARY[@]}"; do
  echo "$s"
done
if [ $((TOTAL_PASSED + TOTAL_FAILED)) -eq 0 ]; then
  echo "test.sh: no test ran"
fi
echo "$TOTAL_PASSED passed, $TOTAL_FAILED failed"

if [ "$TOTAL_FAILED" -ne 0 ] || [ "$TOTAL_PASSED" -eq 0 ]; then
  exit 1
fi
exit 0
