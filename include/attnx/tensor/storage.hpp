// attnx: element storage of owning tensors and evaluator buffers.
//
// Small buffers live inside the object (a std::array), so a tensor of them is a literal type and
// can be a constexpr variable. Large buffers go to the heap, 64-byte aligned; C++20 allows that
// inside a constant evaluation too (a new-expression), as long as the memory is freed before the
// evaluation ends.
#pragma once

#include <array>
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

#include "attnx/util/algorithm.hpp"
#include "attnx/config.hpp"
#include "attnx/exec/memory.hpp"
#include "attnx/shape/axis.hpp"

namespace attnx {

// Requests storage whose elements will all be written before being read.
struct uninitialized_t {
  explicit uninitialized_t() = default;
};
inline constexpr uninitialized_t uninitialized{};

// storage<T, N>: N elements (N known at compile time); storage<T, dyn>: a run-time count, on the heap.
// Every storage also takes the count at run time (ignored when N is static), so that code written for
// both kinds can say storage<T, N> buf(uninitialized, n).
template <class T, std::size_t N, bool Inline = (N != dyn && N * sizeof(T) <= inline_bytes)>
class storage;

template <class T, std::size_t N>
class storage<T, N, true> {
 public:
  constexpr storage() = default;
  constexpr explicit storage(uninitialized_t) {}
  constexpr storage(uninitialized_t, std::size_t) {}
  constexpr explicit storage(std::size_t) {}
  static constexpr std::size_t size() noexcept { return N; }
  constexpr T* data() noexcept { return a_.data(); }
  constexpr const T* data() const noexcept { return a_.data(); }
  constexpr T& operator[](std::size_t i) noexcept { return a_[i]; }
  constexpr const T& operator[](std::size_t i) const noexcept { return a_[i]; }
  static constexpr bool on_heap = false;

 private:
  std::array<T, N> a_{};
};

// A run-time count of elements on the heap (zero elements: no allocation).
template <class T>
class storage<T, dyn, false> {
 public:
  constexpr storage() noexcept = default;
  constexpr storage(uninitialized_t, std::size_t n) : p_(allocate(n)), n_(n) {}
  constexpr explicit storage(std::size_t n) : storage(uninitialized, n) {
    if (std::is_constant_evaluated()) return;  // allocate() value-initialised already
    alg::fill_n(p_, n_, T{});
  }
  constexpr storage(const storage& o) : p_(allocate(o.n_)), n_(o.n_) { alg::copy_n(o.p_, n_, p_); }
  constexpr storage(storage&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  constexpr storage& operator=(const storage& o) {
    if (this != &o) {
      if (n_ != o.n_) {
        release();
        p_ = allocate(o.n_);
        n_ = o.n_;
      }
      alg::copy_n(o.p_, n_, p_);
    }
    return *this;
  }
  constexpr storage& operator=(storage&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  constexpr ~storage() { release(); }
  constexpr T* data() noexcept { return p_; }
  constexpr const T* data() const noexcept { return p_; }
  constexpr T& operator[](std::size_t i) noexcept { return p_[i]; }
  constexpr const T& operator[](std::size_t i) const noexcept { return p_[i]; }
  constexpr std::size_t size() const noexcept { return n_; }
  static constexpr bool on_heap = true;

 private:
  static constexpr T* allocate(std::size_t n) {
    if (n == 0) return nullptr;
    if (std::is_constant_evaluated()) {
      return new T[n]();  // (a constexpr new-expression: std::allocator would need <memory>, which is heavy)
    }
    static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);
    static_assert(heap_alignment <= exec::memory_alignment);
    return static_cast<T*>(exec::allocate_bytes(n * sizeof(T)));  // large blocks reused (exec/memory.hpp)
  }
  constexpr void release() {
    if (!p_) return;
    if (std::is_constant_evaluated()) {
      delete[] p_;
    } else {
      exec::release_bytes(p_, n_ * sizeof(T));
    }
    p_ = nullptr;
  }
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

// N elements on the heap (beyond inline_bytes): the run-time-count storage with its count fixed.
template <class T, std::size_t N>
class storage<T, N, false> : public storage<T, dyn, false> {
  using base = storage<T, dyn, false>;

 public:
  constexpr storage() : base(N) {}
  constexpr explicit storage(uninitialized_t) : base(uninitialized, N) {}
  constexpr storage(uninitialized_t, std::size_t) : base(uninitialized, N) {}
  constexpr explicit storage(std::size_t) : base(N) {}
  static constexpr std::size_t size() noexcept { return N; }
};

}  // namespace attnx
