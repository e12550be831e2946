// attnx: reading and writing NumPy .npy files as static-shape attnx tensors (numpy.save / numpy.load's format).
//
// Not included by attnx/attnx.hpp: include it explicitly. It needs nothing beyond attnx (the header is a Python dict
// literal, parsed here); the reading and writing are in the attnx library (with ATTNX_HEADER_ONLY this header
// includes them).
//
// The format (numpy.lib.format): the magic "\x93NUMPY", a version byte pair (1.0: a 2-byte little-endian header
// length; 2.0 and 3.0: 4 bytes; 3.0's header is UTF-8, not latin-1), the header, a dict literal such as
// "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" padded with spaces and ended by '\n', then the raw
// data.
//
//   auto x = attnx::npy::load<attnx::tensor<float, 2, 3>>("x.npy");      // checks dtype and shape, reads
//   auto y = attnx::npy::load<attnx::tensor<double, attnx::dyn, 64>>("y.npy");   // a dyn axis takes the stored extent
//   attnx::npy::save("out.npy", x);                                        // numpy.load reads it as float32 (2, 3)
//
// What loads into what (the same rules as attnx/io/safetensors.hpp: a dtype loads into the element type that is its
// own, and exactly widened into a wider one; nothing narrows, nothing changes kind):
//   float         '<f4'
//   double        '<f8', '<f4' (widened exactly)
//   std::int32_t  '<i4'
//   std::int64_t  '<i8', '<i4' (widened exactly)
//   bool          '|b1', and '|u1' holding only 0 and 1 (a mask saved as uint8)
// (A one-byte dtype's byte-order character may also be '<'.) Only C order (fortran_order False) and little-endian
// data are read; the header's keys are exactly 'descr', 'fortran_order' and 'shape', each once. The rank and the
// static extents must be the stored ones; a dyn axis takes the stored extent. The data must be exactly
// shape x item size bytes, to the end of the file.
//
// Every failure throws a subclass of attnx::npy::error (a std::runtime_error) whose message names the file, the rule
// and the values: file_error (missing or unreadable file), format_error (not a .npy file, an unknown version, a header
// that does not parse, Fortran order, data cut short or followed by more bytes, a '|b1' byte other than 0 or 1),
// dtype_error (a dtype attnx does not read, big-endian data, or one the target's elements do not load, with the
// reason), shape_error (the stored shape against the target's). A load that throws leaves its target as it was.
//
// Writing: save(path, t) writes a tensor or view in its own dtype ('<f4', '<f8', '<i4', '<i8', '|b1'), C order,
// format version 1.0 (2.0 if the header needs more than 65535 bytes), the header padded to a multiple of 64 bytes as
// numpy pads it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "attnx/config.hpp"
#include "attnx/core/expression.hpp"
#include "attnx/shape/shape.hpp"
#include "attnx/tensor/tensor.hpp"
#include "attnx/tensor/view.hpp"

namespace attnx::npy {

// ---- errors -----------------------------------------------------------------------------------------
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class file_error : public error {  // the file cannot be opened, read or written
 public:
  using error::error;
};
class format_error : public error {  // not a .npy file attnx reads: magic, version, header, Fortran order, data size
 public:
  using error::error;
};
class dtype_error : public error {  // a dtype attnx does not read, or one the target's elements do not load
 public:
  using error::error;
};
class shape_error : public error {  // the stored shape is not the target's
 public:
  using error::error;
};

// ---- dtypes -----------------------------------------------------------------------------------------
// The dtype (numpy's descr) an attnx element type is saved as. Every function that loads or saves checks its
// element type here, once: any other type is this one error (and '<i8' after it, so that nothing else fails).
template <class T>
constexpr std::string_view descr_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int32_t> ||
                    std::is_same_v<T, std::int64_t> || std::is_same_v<T, bool>,
                "attnx: npy: tensors of float ('<f4'), double ('<f8'), std::int32_t ('<i4'), std::int64_t ('<i8') and "
                "bool ('|b1') can be loaded and saved, not of this element type");
  if constexpr (std::is_same_v<T, float>) return "<f4";
  else if constexpr (std::is_same_v<T, double>) return "<f8";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "<i4";
  else if constexpr (std::is_same_v<T, bool>) return "|b1";
  else return "<i8";
}

// What a file's header says (inspect).
struct array_info {
  unsigned major = 1, minor = 0;  // the format version: 1.0, 2.0 or 3.0
  std::string descr;              // as written: '<f4', '|b1', '>i8', ... (a structured dtype's list as its text)
  bool fortran_order = false;
  std::vector<std::size_t> shape;  // () for a scalar: rank 0, one element
  std::size_t data_offset = 0;     // where the data starts (the magic, version, length and header before it)
  // The element count (checked when the header was read: it times the item size fits in a size_t).
  std::size_t elements() const {
    std::size_t n = 1;
    for (auto e : shape) n *= e;
    return n;
  }
};

// Reads and checks the header: file_error, format_error (magic, version, the dict's syntax and keys, a shape whose
// byte count overflows, and, for the dtypes attnx reads in either byte order, the data size). The dtype and the
// order are checked by load, so that a file attnx does not load can still be inspected.
array_info inspect(const std::string& path);

namespace detail {
enum class element : unsigned char { f32, f64, i32, i64, b8 };
template <class T>
constexpr element element_of() {
  (void)descr_of<T>();  // (the rule on T)
  if constexpr (std::is_same_v<T, float>) return element::f32;
  else if constexpr (std::is_same_v<T, double>) return element::f64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return element::i32;
  else if constexpr (std::is_same_v<T, bool>) return element::b8;
  else return element::i64;
}
// Every rule of loading the array of `path` (whose header is `a`) into elements of `want` with extents dims (rank of
// them; target: the target's shape, for the messages): order, dtype, shape. Throws, or returns.
void check(const std::string& path, const array_info& a, element want, const std::size_t* dims, std::size_t rank,
           const std::string& target);
// The data into dst, after check; dst is written only once every rule has passed and the data has been read.
void read_into(const std::string& path, const array_info& a, element want, void* dst, const std::size_t* dims,
               std::size_t rank, const std::string& target);
// Writes a .npy file of n elements of `e` at src, of this shape.
void write(const std::string& path, element e, const void* src, const std::size_t* dims, std::size_t rank);
}  // namespace detail

// ---- reading ------------------------------------------------------------------------------------------
// The array in `path` as a Tensor (basic_tensor<T, S>): the dtype must be T's own or one T holds exactly (above), the
// order C, and the stored shape S's extents (a dyn axis of S takes the stored extent). (A std::filesystem::path
// converts.)
template <class Tensor>
Tensor load(const std::string& path) {
  using S = typename Tensor::shape_type;
  using T = typename Tensor::value_type;
  const array_info a = inspect(path);
  if constexpr (S::is_static) {
    Tensor t(uninitialized);
    detail::read_into(path, a, detail::element_of<T>(), t.data(), S::extents.data(), S::rank, shape_string<S>());
    return t;
  } else {
    // The dyn axes take the stored extents, the rules checked before the tensor is allocated (a file's shape says
    // what it likes; inspect has matched it with the file's size only for the dtypes attnx reads).
    dims_t<S::rank> d = S::extents;
    for (std::size_t k = 0; k < S::rank; ++k)
      if (d[k] == dyn) d[k] = k < a.shape.size() ? a.shape[k] : 0;
    detail::check(path, a, detail::element_of<T>(), d.data(), S::rank, shape_string<S>());
    Tensor t(d, uninitialized);
    detail::read_into(path, a, detail::element_of<T>(), t.data(), d.data(), S::rank, shape_string<S>());
    return t;
  }
}

// Into memory the caller owns, through a writable view (its extents, dyn ones included, must be the stored ones);
// nothing is written if the load fails.
template <class T, class S>
void load_into(const std::string& path, const basic_view<T, S>& v) {
  static_assert(!std::is_const_v<T>, "attnx: npy: load_into needs a writable view");
  const auto d = v.dims();
  detail::read_into(path, inspect(path), detail::element_of<std::remove_const_t<T>>(), v.data(), d.data(), S::rank,
                    shape_string<S>(d));
}

// ---- writing ------------------------------------------------------------------------------------------
// An attnx tensor (or view) as a .npy file in its own dtype, C order. Throws file_error if it cannot be written.
template <class E>
requires dense_terminal<E>
void save(const std::string& path, const E& t) {
  using T = std::remove_const_t<value_t<E>>;
  const auto dims = dims_of(t);
  detail::write(path, detail::element_of<T>(), t.data(), dims.data(), shape_of_t<E>::rank);
}

}  // namespace attnx::npy

#if ATTNX_HEADER_ONLY
#include "attnx/io/impl/npy.hpp"
#endif
