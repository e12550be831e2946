// attnx: the execution context's definitions (the library's, or inline with ATTNX_HEADER_ONLY).
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "attnx/exec/context.hpp"

namespace attnx {

ATTNX_LIB_INLINE context context::from_environment() {
  context c;
  if (const char* s = std::getenv("ATTNX_ISA"); s && *s) c.set_isa(parse_isa(s, "ATTNX_ISA"));
  if (const char* s = std::getenv("ATTNX_THREADS"); s && *s) {
    char* end = nullptr;
    const unsigned long n = std::strtoul(s, &end, 10);
    if (end == s || *end != '\0' || s[0] == '-')
      ATTNX_THROW(std::invalid_argument(std::string("attnx: ATTNX_THREADS=") + s + " is not a thread count"));
    c.set_threads(static_cast<unsigned>(alg::min<unsigned long>(n, exec::max_threads_limit)));
  }
  return c;
}

ATTNX_LIB_INLINE simd::isa context::parse_isa(std::string_view s, std::string_view what) {
  const auto i = simd::parse(s);
  if (!i)
    ATTNX_THROW(std::invalid_argument("attnx: " + std::string(what) + "=" + std::string(s) +
                                " is not an instruction set (scalar, avx2 or avx512)"));
  check_isa(*i, what);
  return *i;
}

ATTNX_LIB_INLINE void context::check_isa(simd::isa i, std::string_view what) {
  if (!simd::cpu_supports(i))
    ATTNX_THROW(std::invalid_argument("attnx: " + std::string(what) + ": this CPU cannot run the " +
                                std::string(simd::name(i)) + " path (it has: " + simd::supported_list() + ")"));
}

// The process-wide default, read from the environment on first use (an invalid ATTNX_ISA or
// ATTNX_THREADS throws std::invalid_argument from here, i.e. from the first evaluation, every time).
ATTNX_LIB_INLINE context& default_context() {
  static context ctx = context::from_environment();
  return ctx;
}

ATTNX_LIB_INLINE void set_threads(unsigned n) { default_context().set_threads(n); }

namespace detail {
ATTNX_LIB_INLINE const context*& scoped_context() noexcept {
  thread_local const context* c = nullptr;
  return c;
}
}  // namespace detail

ATTNX_LIB_INLINE const context& current_context() {
  const context* c = detail::scoped_context();
  return c ? *c : default_context();
}

ATTNX_LIB_INLINE context_scope::context_scope(const context& ctx) noexcept : previous_(detail::scoped_context()) {
  detail::scoped_context() = &ctx;
}
ATTNX_LIB_INLINE context_scope::~context_scope() { detail::scoped_context() = previous_; }

}  // namespace attnx
