// attnx: the handful of <algorithm> functions the headers use (min, max, clamp, fill, fill_n, copy_n,
// equal, all_of, stable_sort, gcd), with the standard's semantics.
//
// Why not <algorithm>: in C++20 it brings the ranges algorithms and the parallel ones' declarations, a few
// percent of what every program that includes <attnx/attnx.hpp> parses, for functions of a line or two. min and max compare
// exactly as std::min and std::max do (which operand a NaN gives back is the same).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <type_traits>
#include <utility>

namespace attnx::alg {

template <class T>
constexpr const T& min(const T& a, const T& b) {
  return b < a ? b : a;
}
template <class T>
constexpr const T& max(const T& a, const T& b) {
  return a < b ? b : a;
}
// The smallest / largest of a list (the first of equals, as std::min / std::max); the list is not empty.
template <class T>
constexpr T min(std::initializer_list<T> list) {
  const T* best = list.begin();
  for (const T* p = list.begin() + 1; p < list.end(); ++p)
    if (*p < *best) best = p;
  return *best;
}
template <class T>
constexpr T max(std::initializer_list<T> list) {
  const T* best = list.begin();
  for (const T* p = list.begin() + 1; p < list.end(); ++p)
    if (*best < *p) best = p;
  return *best;
}
template <class T>
constexpr const T& clamp(const T& v, const T& lo, const T& hi) {
  return v < lo ? lo : hi < v ? hi : v;
}

// constexpr versions of the <algorithm> functions the headers use (without including <algorithm>).
template <class It, class T>
constexpr void fill(It first, It last, const T& value) {
  for (; first != last; ++first) *first = value;
}
template <class It, class Size, class T>
constexpr It fill_n(It first, Size n, const T& value) {
  for (Size i = 0; i < n; ++i, ++first) *first = value;
  return first;
}

// Pointers to a trivially copyable type copy with memmove at run time (as std::copy_n does).
template <class In, class Size, class Out>
constexpr Out copy_n(In first, Size n, Out out) {
  if constexpr (std::is_pointer_v<In> && std::is_pointer_v<Out>) {
    using S = std::remove_cv_t<std::remove_pointer_t<In>>;
    using D = std::remove_pointer_t<Out>;
    if constexpr (std::is_same_v<S, std::remove_cv_t<D>> && std::is_trivially_copyable_v<S>) {
      if (!std::is_constant_evaluated()) {
        if (n <= 0) return out;
        __builtin_memmove(out, first, static_cast<std::size_t>(n) * sizeof(S));
        return out + n;
      }
    }
  }
  for (Size i = 0; i < n; ++i, ++first, ++out) *out = *first;
  return out;
}

// Whether [first, last) equals the range that starts at other.
template <class It1, class It2>
constexpr bool equal(It1 first, It1 last, It2 other) {
  for (; first != last; ++first, ++other)
    if (!(*first == *other)) return false;
  return true;
}

// Whether pred holds for every element of [first, last).
template <class It, class Pred>
constexpr bool all_of(It first, It last, Pred pred) {
  for (; first != last; ++first)
    if (!pred(*first)) return false;
  return true;
}

// The greatest common divisor of two unsigned integers (gcd(0, b) = b), as std::gcd.
template <class U>
  requires std::is_unsigned_v<U>
constexpr U gcd(U a, U b) noexcept {
  while (b != 0) {
    const U r = static_cast<U>(a % b);
    a = b;
    b = r;
  }
  return a;
}

// Sorts [first, last) (random access) by less, keeping the order of equal elements: merges runs of
// doubling width through a buffer (n log n comparisons, 2n elements of memory).
template <class It, class Less>
void stable_sort(It first, It last, Less less) {
  using V = std::remove_cvref_t<decltype(*first)>;
  const auto n = static_cast<std::size_t>(last - first);
  if (n < 2) return;
  struct buffer {  // 2n elements: the runs and their merge
    V* p;
    ~buffer() { delete[] p; }
  } buf{new V[2 * n]};
  V* a = buf.p;
  V* b = buf.p + n;
  for (std::size_t i = 0; i < n; ++i) a[i] = first[static_cast<std::ptrdiff_t>(i)];
  for (std::size_t width = 1; width < n; width *= 2) {
    for (std::size_t lo = 0; lo < n; lo += 2 * width) {
      const std::size_t mid = min(lo + width, n), hi = min(lo + 2 * width, n);
      std::size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) b[k++] = less(a[j], a[i]) ? a[j++] : a[i++];  // the left one on ties
      while (i < mid) b[k++] = a[i++];
      while (j < hi) b[k++] = a[j++];
    }
    std::swap(a, b);
  }
  for (std::size_t i = 0; i < n; ++i, ++first) *first = std::move(a[i]);
}

}  // namespace attnx::alg
