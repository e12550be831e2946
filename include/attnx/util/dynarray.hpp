// attnx: a growable array for the headers' own bookkeeping (work lists, per-item lengths, a KV cache's
// storage), in place of std::vector.
//
// Why not std::vector: <vector> was 193 M of the 3535 M instructions g++ 12 spent on an empty program that
// includes <attnx/attnx.hpp> (5%; `perf stat -e instructions:u`, -O2), for a handful of uses that need
// only a sized buffer and push_back. The elements are default-constructible and copy-assignable (integers,
// pointers, plain structs, bf16/f16): storage is a new-expression of the capacity, growing copies element by
// element (a memmove for trivial types, as the compiler sees it). Not a public type.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

namespace attnx::detail {

template <class T>
class dynarray {
  static_assert(std::is_default_constructible_v<T> && std::is_copy_assignable_v<T>,
                "attnx: dynarray holds default-constructible, copy-assignable elements");

 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;

  dynarray() noexcept = default;
  // n value-initialised elements (zeros for arithmetic types and pointers).
  explicit dynarray(std::size_t n) : p_(n ? new T[n]() : nullptr), n_(n), cap_(n) {}
  dynarray(std::size_t n, const T& value) : dynarray(n) {
    for (std::size_t i = 0; i < n; ++i) p_[i] = value;
  }
  // A copy of [first, last) (forward iterators).
  template <class It>
    requires(!std::is_integral_v<It>)
  dynarray(It first, It last) {
    std::size_t n = 0;
    for (It i = first; i != last; ++i) ++n;
    reserve(n);
    for (; first != last; ++first) p_[n_++] = *first;
  }
  dynarray(const dynarray& o) : dynarray() {
    reserve(o.n_);
    copy(o.p_, o.n_, p_);
    n_ = o.n_;
  }
  dynarray(dynarray&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), cap_(std::exchange(o.cap_, 0)) {}
  dynarray& operator=(dynarray o) noexcept {  // copy (or move) and swap
    swap(o);
    return *this;
  }
  ~dynarray() { delete[] p_; }

  void swap(dynarray& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    std::swap(cap_, o.cap_);
  }

  std::size_t size() const noexcept { return n_; }
  std::size_t capacity() const noexcept { return cap_; }
  bool empty() const noexcept { return n_ == 0; }
  T* data() noexcept { return p_; }
  const T* data() const noexcept { return p_; }
  T& operator[](std::size_t i) noexcept { return p_[i]; }
  const T& operator[](std::size_t i) const noexcept { return p_[i]; }
  T* begin() noexcept { return p_; }
  T* end() noexcept { return p_ + n_; }
  const T* begin() const noexcept { return p_; }
  const T* end() const noexcept { return p_ + n_; }
  T& back() noexcept { return p_[n_ - 1]; }

  // Room for n elements without reallocating (the elements keep their values and addresses when n is
  // at most the capacity).
  void reserve(std::size_t n) {
    if (n <= cap_) return;
    T* q = new T[n];
    copy(p_, n_, q);
    delete[] p_;
    p_ = q;
    cap_ = n;
  }
  // n elements: the first min(n, size()) keep their values, new ones are value-initialised.
  void resize(std::size_t n) {
    reserve(n);
    for (std::size_t i = n_; i < n; ++i) p_[i] = T();
    n_ = n;
  }
  void push_back(const T& x) {
    if (n_ == cap_) {
      const T keep = x;  // x may be one of the elements
      reserve(cap_ ? 2 * cap_ : 8);
      p_[n_++] = keep;
    } else {
      p_[n_++] = x;
    }
  }
  void clear() noexcept { n_ = 0; }

 private:
  static void copy(const T* from, std::size_t n, T* to) {
    for (std::size_t i = 0; i < n; ++i) to[i] = from[i];
  }

  T* p_ = nullptr;
  std::size_t n_ = 0, cap_ = 0;
};

}  // namespace attnx::detail
