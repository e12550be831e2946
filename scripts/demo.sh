#!/usr/bin/env bash
# Build and run attnx's worked example.
#
#   scripts/demo.sh
#
# On Debian/Ubuntu it first checks the packages it needs (cmake, g++,
# libboost-dev; ninja-build is used when present) and, when run as root,
# installs the missing ones with apt-get. Then it configures build/demo
# (Release, no tests), builds the target worked_example and runs it.
# Works from any directory.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT"

# --- Debian packages ---------------------------------------------------------
ATTNX_SCRIPT=demo
. "$ROOT/scripts/lib/packages.sh"

ensure_packages cmake g++ libboost-dev

# --- configure, build, run ---------------------------------------------------
BUILD_DIR=build/demo
if command -v ninja >/dev/null 2>&1; then
  GENERATOR=Ninja
else
  GENERATOR="Unix Makefiles"
fi
# A build directory made with another generator or for another checkout
# cannot be reconfigured: start it afresh.
if [ -f "$BUILD_DIR/CMakeCache.txt" ]; then
  if ! grep -qxF "CMAKE_GENERATOR:INTERNAL=$GENERATOR" "$BUILD_DIR/CMakeCache.txt" ||
     ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT" "$BUILD_DIR/CMakeCache.txt"; then
    rm -rf "$BUILD_DIR"
  fi
fi

JOBS="$(nproc 2>/dev/null || echo 2)"

echo "demo: configuring $BUILD_DIR ($GENERATOR, Release)"
cmake -S . -B "$BUILD_DIR" -G "$GENERATOR" \
  -DCMAKE_BUILD_TYPE=Release \
  -DATTNX_BUILD_TESTS=OFF \
  -DATTNX_BUILD_EXAMPLES=ON \
  -DATTNX_BUILD_BENCH=OFF
echo "demo: building worked_example"
cmake --build "$BUILD_DIR" --target worked_example -j "$JOBS"
echo "demo: running $BUILD_DIR/examples/worked_example"
echo
exec "$BUILD_DIR/examples/worked_example"
