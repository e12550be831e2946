#!/usr/bin/env bash
# Line coverage of the library's headers by the unit tests (g++ --coverage, gcov): which lines of
# include/attnx no unit test runs. A developer's tool, not part of the test command.
#
#   scripts/coverage.sh            build build/coverage (g++ -O1 --coverage), run the unit tests, report
#   scripts/coverage.sh -v         ... and list every line never run
#   scripts/coverage.sh report     the report again from the last run's data (-v as above)
#
# The report counts a line as run when any instantiation of it ran (a template line run for float only
# counts). gcov sees only the code that was instantiated and emitted: a template never instantiated is
# not counted at all, and code run only at compile time (constexpr) counts as never run; the instruction
# sets the CPU lacks are never run. Line attribution at -O1 is approximate. Needs g++ (gcov of the same
# version: GCOV=gcov-12 to choose), cmake, python3 and the test dependencies (scripts/test.sh installs
# them); about 6 minutes on 2 cores.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="$ROOT/build/coverage"
VERBOSE=()
RUN=1
for a in "$@"; do
  case "$a" in
    -v) VERBOSE=(--lines) ;;
    report) RUN=0 ;;
    *) echo "usage: scripts/coverage.sh [report] [-v]" >&2; exit 2 ;;
  esac
done
command -v python3 >/dev/null || { echo "coverage.sh: needs python3" >&2; exit 1; }
command -v gcov >/dev/null || { echo "coverage.sh: needs gcov (g++)" >&2; exit 1; }

if [ "$RUN" = 1 ]; then
  GEN=()
  # (a build directory keeps the generator it was configured with)
  if [ ! -f "$DIR/CMakeCache.txt" ] && command -v ninja >/dev/null; then GEN=(-G Ninja); fi
  cmake -S "$ROOT" -B "$DIR" "${GEN[@]}" -DCMAKE_CXX_COMPILER=g++ -DATTNX_BUILD_TESTS=ON -DATTNX_BUILD_EXAMPLES=ON \
    -DATTNX_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 --coverage" \
    -DCMAKE_EXE_LINKER_FLAGS=--coverage -DATTNX_SANITIZE= >"$DIR.configure.log" 2>&1 ||
    { tail -n 20 "$DIR.configure.log"; exit 1; }
  # The unit test programs (test_mixed_flags and test_warnings_api check build flags, not lines).
  mapfile -t targets < <(cmake --build "$DIR" --target help | sed -n 's/^\(\.\.\. \)\{0,1\}\(test_[a-z0-9_]*\).*/\2/p' |
                         grep -v -E '^test_(mixed_flags|warnings_api)$' | sort -u)
  if [ "${#targets[@]}" -eq 0 ]; then
    echo "coverage.sh: no unit test targets (Boost.Test missing? see $DIR.configure.log)" >&2
    exit 1
  fi
  find "$DIR" -name '*.gcda' -delete
  cmake --build "$DIR" -j "$(nproc)" --target "${targets[@]}"
  # A failing test still leaves its coverage: report it and go on to the report.
  if ! ctest --test-dir "$DIR" -j "$(nproc)" -R '^unit\.' -E '^unit\.mixed_flags' --output-on-failure >"$DIR.ctest.log" 2>&1; then
    echo "coverage.sh: some unit tests failed (the report counts what ran; $DIR.ctest.log):"
    grep -E '\*\*\*|Failed' "$DIR.ctest.log" | tail -n 20 || true
  fi
  tail -n 3 "$DIR.ctest.log"
fi
python3 "$ROOT/scripts/coverage_report.py" "$DIR" "$ROOT/include" "${VERBOSE[@]}"
