#!/usr/bin/env bash
# Line coverage of the library's headers by the unit tests (g++ --coverage, gcov): which lines of
# include/attnx no unit test runs. A developer's tool, not part of the test command.
#
#   scripts/coverage.sh            build build/coverage (g++ -O1 --coverage), run the unit tests, report
#   scripts/coverage.sh -v         ... and list every line never run
#   scripts/coverage.sh report     the report again from the last run's data (-v as above)
#
# The report counts a line as run when any instantiation of it ran (a template line run for float only
# counts). Lines evaluated only at compile time (constexpr) count as never run. Needs g++ (gcov), cmake,
# python3 and the test dependencies (scripts/test.sh installs them); about 6 minutes on 2 cores.
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
  command -v ninja >/dev/null && GEN=(-G Ninja)
  cmake -S "$ROOT" -B "$DIR" "${GEN[@]}" -DCMAKE_CXX_COMPILER=g++ -DATTNX_BUILD_TESTS=ON -DATTNX_BUILD_EXAMPLES=ON \
    -DATTNX_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 --coverage" \
    -DCMAKE_EXE_LINKER_FLAGS=--coverage -DATTNX_SANITIZE= >/dev/null
  # The unit test programs (test_mixed_flags and test_warnings_api check build flags, not lines).
  mapfile -t targets < <(cmake --build "$DIR" --target help | sed -n 's/^\(\.\.\. \)\{0,1\}\(test_[a-z0-9_]*\).*/\2/p' |
                         grep -v -E '^test_(mixed_flags|warnings_api)$' | sort -u)
  find "$DIR" -name '*.gcda' -delete
  cmake --build "$DIR" -j "$(nproc)" --target "${targets[@]}"
  ctest --test-dir "$DIR" -j "$(nproc)" -R '^unit\.' -E '^unit\.mixed_flags' --timeout 900 --output-on-failure | tail -n 3
fi
python3 "$ROOT/scripts/coverage_report.py" "$DIR" "$ROOT/include" "${VERBOSE[@]}"
