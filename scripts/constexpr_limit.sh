#!/usr/bin/env bash
# The largest constant-evaluated attention that compiles under the compiler's default limits:
# softmax(scale(Q K^T, 1/sqrt(d))) V with Q, K, V of shape (L, d), double, evaluated in a constexpr
# initialiser and static_asserted. Bisects L for each compiler given (default: g++ clang++).
#
#   scripts/constexpr_limit.sh [D] [compiler...]      D: the feature size (default 16)
#
# Prints one line per compiler: "<compiler> d=<D>: largest L = <n>" and the first line of the error
# at n + 1. Extra flags (e.g. -fconstexpr-steps=...) can be passed in ATTNX_CONSTEXPR_FLAGS.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
D="${1:-16}"
shift || true
compilers=("$@")
[ ${#compilers[@]} -eq 0 ] && compilers=(g++ clang++)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/probe.cpp" <<CPP
#include <attnx/attnx.hpp>
using namespace attnx;
template <std::size_t L, std::size_t D>
constexpr double probe() {
  using M = tensor<double, seq<L>, d_k<D>>;
  const M q = M::generate([](std::size_t i, std::size_t j) { return double((i * 7 + j * 3) % 11) / 11.0 - 0.5; });
  const M k = M::generate([](std::size_t i, std::size_t j) { return double((i * 5 + j * 2) % 13) / 13.0 - 0.5; });
  const M v = M::generate([](std::size_t i, std::size_t j) { return double((i + j) % 7); });
  const M o = softmax(scale(q * transpose(k), 0.25)) * v;
  return o(L - 1, D - 1);
}
static_assert(probe<ATTNX_L, ${D}>() >= 0.0);
int main() {}
CPP
for cxx in "${compilers[@]}"; do
  ok() { "$cxx" -std=c++20 -fsyntax-only -I"$ROOT/include" ${ATTNX_CONSTEXPR_FLAGS:-} -DATTNX_L="$1" "$tmp/probe.cpp" > "$tmp/out.txt" 2>&1; }
  lo=1 hi=2
  while ok "$hi"; do lo=$hi; hi=$((hi * 2)); [ $hi -gt 8192 ] && break; done
  while [ $((hi - lo)) -gt 1 ]; do
    mid=$(((lo + hi) / 2))
    if ok "$mid"; then lo=$mid; else hi=$mid; fi
  done
  ok "$hi" >/dev/null
  echo "$cxx d=$D: largest L = $lo ($(grep -m1 -E 'error|note: (constexpr|constexpr evaluation)' "$tmp/out.txt" | sed 's/^.*\(error\|note\): //' | cut -c1-150))"
  grep -m2 -E 'note: .*(limit|steps|infinite)' "$tmp/out.txt" | sed 's/^.*note: /    note: /' | cut -c1-200
done
