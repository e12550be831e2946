// attnx: safetensors reading and writing, the library's part (the header's templates call these). Needs
// nlohmann/json.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <system_error>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "attnx/io/safetensors.hpp"
#include "attnx/math/half.hpp"

namespace attnx::safetensors {

ATTNX_LIB_INLINE std::size_t dtype_size(std::string_view d) noexcept {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

ATTNX_LIB_INLINE std::string shape_text(const std::vector<std::size_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

namespace detail {
// "A, B, C" from a list of dtypes (the messages' lists).
template <class List>
std::string joined(const List& list) {
  std::string out;
  for (std::string_view d : list) out += (out.empty() ? "" : ", ") + std::string(d);
  return out;
}
// The bytes of a tensor of this shape and element size, every product checked: false (and bytes untouched) when
// they do not fit in a size_t, unless an extent is 0 (then bytes = 0, whatever the others).
ATTNX_LIB_INLINE bool shape_bytes(const std::vector<std::size_t>& shape, std::size_t element_size, std::size_t& bytes) {
  if (std::ranges::find(shape, std::size_t{0}) != shape.end()) {
    bytes = 0;
    return true;
  }
  std::size_t b = element_size;
  for (std::size_t x : shape) {
    if (b > std::numeric_limits<std::size_t>::max() / x) return false;
    b *= x;
  }
  bytes = b;
  return true;
}
ATTNX_LIB_INLINE std::uint64_t read_le_u64(const unsigned char* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
// Little-endian bytes to T (and back): a copy on little-endian hosts, a byte swap per element elsewhere.
template <class T>
void from_le_bytes(const unsigned char* src, T* dst, std::size_t n) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(dst, src, n * sizeof(T));
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      unsigned char b[sizeof(T)];
      for (std::size_t k = 0; k < sizeof(T); ++k) b[k] = src[i * sizeof(T) + sizeof(T) - 1 - k];
      std::memcpy(dst + i, b, sizeof(T));
    }
  }
}
// n elements stored as dtype (one of loadable_dtypes<T>) in little-endian bytes, into T: a copy when
// the dtype is T's own, else each element widened exactly (BF16: its 16 bits above 16 zero bits of a float;
// F16: subnormals, infinities and NaN payloads kept; F32 into double; I32 into std::int64_t).
template <class T>
void decode(std::string_view dtype, const unsigned char* src, T* dst, std::size_t n) {
  if constexpr (std::is_same_v<T, bool>) {  // BOOL or U8, every byte checked to be 0 or 1 (first_non_binary)
    for (std::size_t i = 0; i < n; ++i) dst[i] = src[i] != 0;
    return;
  }
  if (dtype == dtype_of<T>()) {
    from_le_bytes(src, dst, n);
    return;
  }
  const auto u16 = [&](std::size_t i) {
    return static_cast<std::uint16_t>(src[2 * i] | static_cast<unsigned>(src[2 * i + 1]) << 8);
  };
  const auto u32 = [&](std::size_t i) {
    std::uint32_t v = 0;
    for (int k = 3; k >= 0; --k) v = (v << 8) | src[4 * i + static_cast<std::size_t>(k)];
    return v;
  };
  if constexpr (std::is_floating_point_v<T>) {
    if (dtype == "BF16") {
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(static_cast<float>(bf16::from_bits(u16(i))));
    } else if (dtype == "F16") {
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(f16::to_float(u16(i)));
    } else {  // F32 into double
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(std::bit_cast<float>(u32(i)));
    }
  } else {  // I32 into std::int64_t
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(static_cast<std::int32_t>(u32(i)));
  }
}
// The index of the first byte that is neither 0 nor 1 (n if there is none): a BOOL or U8 tensor loads into bool only
// without one.
ATTNX_LIB_INLINE std::size_t first_non_binary(const unsigned char* b, std::size_t n) noexcept {
  std::size_t i = 0;
  while (i < n && b[i] <= 1) ++i;
  return i;
}
ATTNX_LIB_INLINE bool is_floating_dtype(std::string_view d) noexcept {
  return d == "F64" || d == "F32" || d == "BF16" || d == "F16";
}
// Why dtype d (not in `loadable`) does not load into elements `want` (named `target`): the message's tail, after
// "tensor 'x' in 'f'". Each reason is the rule that refuses it, and what to do instead.
ATTNX_LIB_INLINE std::string refusal(std::string_view d, element want, const char* target,
                                     std::span<const std::string_view> loadable) {
  const std::string dt(d);
  if (d == "BOOL") return " is a BOOL mask: load it into a bool tensor";
  if (want == element::b8)
    return " has dtype " + dt + ": a bool tensor loads BOOL, and U8 holding only 0 and 1 (a comparison makes a mask of "
           "other values, e.g. x > 0.5f)";
  if (d == "U8") return " has dtype U8, which attnx loads into bool tensors only (a mask, every element 0 or 1)";
  const bool floating = is_floating_dtype(d);
  if (!floating && d != "I64" && d != "I32")
    return " has dtype " + dt + ", which attnx does not load (it loads F64, F32, BF16, F16, I64, I32, BOOL, and U8 into "
           "bool)";
  const bool float_target = want == element::f32 || want == element::f64;
  if (floating == float_target)  // the same kind, narrower: F64 into float, I64 into std::int32_t
    return " has dtype " + dt + ": " + target + " elements could lose digits (narrowing is refused; they load " +
           joined(loadable) + "): load it into a " + (floating ? "double" : "std::int64_t") + " tensor";
  const char* own = d == "F64" ? "double" : floating ? "float" : d == "I64" ? "std::int64_t" : "std::int32_t";
  return " has dtype " + dt + ", " + (floating ? "a floating-point" : "an integer") + " dtype, and " + target +
         " elements load " + joined(loadable) + " (nothing converts silently: load it into a " + own +
         " tensor, then cast<" + target + ">)";
}
}  // namespace detail

namespace detail {
ATTNX_LIB_INLINE void read_bytes(std::ifstream& in, char* dst, std::size_t n, const std::string& path, const char* what) {
  if (!in.read(dst, static_cast<std::streamsize>(n)))
    ATTNX_THROW(file_error("attnx: safetensors: '" + path + "': reading " + what + " failed"));
}
}  // namespace detail

ATTNX_LIB_INLINE file file::from_memory(std::vector<unsigned char> bytes, std::string name) {
  file f;
  f.path_ = std::move(name);
  f.memory_ = std::move(bytes);
  f.in_memory_ = true;
  const std::size_t size = f.memory_.size();
  if (size < 8)
    ATTNX_THROW(format_error("attnx: safetensors: '" + f.path_ + "' is " + std::to_string(size) +
                       " bytes long, too short for the 8-byte header length (truncated, or not a safetensors file)"));
  const std::uint64_t n = detail::read_le_u64(f.memory_.data());
  f.check_header_length(n, size);
  f.data_offset_ = 8 + static_cast<std::size_t>(n);
  f.data_size_ = size - f.data_offset_;
  f.parse(std::string(reinterpret_cast<const char*>(f.memory_.data()) + 8, static_cast<std::size_t>(n)));
  return f;
}

ATTNX_LIB_INLINE file::file(const std::string& path) : path_(path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path_, ec);
  if (ec) ATTNX_THROW(file_error("attnx: safetensors: cannot open '" + path_ + "': " + ec.message()));
  std::ifstream in(path_, std::ios::binary);
  if (!in) ATTNX_THROW(file_error("attnx: safetensors: cannot open '" + path_ + "' for reading"));
  if (size < 8)
    ATTNX_THROW(format_error("attnx: safetensors: '" + path_ + "' is " + std::to_string(size) +
                       " bytes long, too short for the 8-byte header length (truncated, or not a safetensors file)"));
  unsigned char len[8];
  detail::read_bytes(in, reinterpret_cast<char*>(len), 8, path_, "the header length");
  const std::uint64_t n = detail::read_le_u64(len);
  check_header_length(n, size);
  std::string header(static_cast<std::size_t>(n), '\0');
  detail::read_bytes(in, header.data(), static_cast<std::size_t>(n), path_, "the header");
  data_offset_ = 8 + static_cast<std::size_t>(n);
  data_size_ = static_cast<std::size_t>(size) - data_offset_;
  parse(header);
}

ATTNX_LIB_INLINE const tensor_info& file::info(std::string_view name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::string have;
    std::size_t shown = 0;
    for (const auto& [k, v] : tensors_) {
      if (shown++ == 12) {
        have += ", ...";
        break;
      }
      have += (have.empty() ? "" : ", ") + k;
    }
    ATTNX_THROW(missing_tensor("attnx: safetensors: no tensor '" + std::string(name) + "' in '" + path_ + "' (it has " +
                         std::to_string(tensors_.size()) + (tensors_.size() == 1 ? " tensor" : " tensors") +
                         (have.empty() ? "" : ": " + have) + ")"));
  }
  return it->second;
}

ATTNX_LIB_INLINE void file::check_header_length(std::uint64_t n, std::uint64_t size) const {
  if (n > size - 8)
    ATTNX_THROW(format_error("attnx: safetensors: '" + path_ + "': the header length " + std::to_string(n) +
                       " exceeds the " + std::to_string(size - 8) +
                       " bytes that follow it (truncated, or not a safetensors file)"));
  if (n == 0) ATTNX_THROW(format_error("attnx: safetensors: '" + path_ + "': empty header"));
}

ATTNX_LIB_INLINE void file::corrupt(const std::string& what) const {
  ATTNX_THROW(format_error("attnx: safetensors: '" + path_ + "': corrupt header: " + what));
}

ATTNX_LIB_INLINE void file::parse(const std::string& header) {
  nlohmann::json j;
  // JSON objects may repeat a key (the last one would win): a tensor named twice is refused instead.
  std::vector<std::string> top_keys;
  const nlohmann::json::parser_callback_t keys = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& k) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && k.is_string()) top_keys.push_back(k.get<std::string>());
    return true;
  };
#if ATTNX_EXCEPTIONS
  try {
    j = nlohmann::json::parse(header, keys);
  } catch (const nlohmann::json::exception& e) {
    corrupt(std::string("the JSON does not parse (") + e.what() + ")");
  }
#else
  j = nlohmann::json::parse(header, keys, /*allow_exceptions=*/false);
  if (j.is_discarded()) corrupt("the JSON does not parse");
#endif
  if (!j.is_object()) corrupt("the JSON is not an object");
  std::sort(top_keys.begin(), top_keys.end());
  for (std::size_t i = 1; i < top_keys.size(); ++i)
    if (top_keys[i] == top_keys[i - 1]) corrupt("the entry '" + top_keys[i] + "' appears twice");
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) corrupt("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) corrupt("__metadata__['" + k + "'] is not a string");
        metadata_.emplace(k, v.get<std::string>());
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object()) corrupt(where + " is not an object");
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) corrupt(where + " has no dtype string");
    if (!entry.contains("shape") || !entry["shape"].is_array()) corrupt(where + " has no shape array");
    if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2)
      corrupt(where + " has no data_offsets [begin, end]");
    tensor_info t;
    t.dtype = entry["dtype"].get<std::string>();
    const std::size_t es = dtype_size(t.dtype);
    if (es == 0) corrupt(where + " has the unknown dtype '" + t.dtype + "'");
    // The byte count, shape x dtype size, with every product checked (a shape of [2^62] F32 must not wrap
    // around to a small number that the offsets happen to match).
    for (const auto& e : entry["shape"]) {
      if (!e.is_number_unsigned()) corrupt(where + " has a shape entry that is not a non-negative integer");
      t.shape.push_back(e.get<std::size_t>());
    }
    std::size_t bytes = 0;
    if (!detail::shape_bytes(t.shape, es, bytes))
      corrupt(where + ": shape " + shape_text(t.shape) + " of " + t.dtype + " has more bytes than a size_t can count");
    for (const auto& e : entry["data_offsets"])
      if (!e.is_number_unsigned()) corrupt(where + " has data_offsets that are not non-negative integers");
    t.begin = entry["data_offsets"][0].get<std::size_t>();
    t.end = entry["data_offsets"][1].get<std::size_t>();
    if (t.begin > t.end) corrupt(where + " has data_offsets with begin > end");
    if (t.end > data_size_)
      ATTNX_THROW(format_error("attnx: safetensors: '" + path_ + "': " + where + " ends at byte " + std::to_string(t.end) +
                         " of the data, which has only " + std::to_string(data_size_) + " bytes (truncated file?)"));
    if (t.end - t.begin != bytes)
      corrupt(where + ": shape " + shape_text(t.shape) + " of " + t.dtype + " needs " + std::to_string(bytes) +
              " bytes, its data_offsets span " + std::to_string(t.end - t.begin));
    tensors_.emplace(name, std::move(t));
  }
  // No two tensors may share bytes (empty tensors take none).
  std::vector<std::pair<std::size_t, const std::string*>> spans;
  for (const auto& [name, t] : tensors_)
    if (t.end > t.begin) spans.emplace_back(t.begin, &name);
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) {
    const tensor_info& prev = tensors_.at(*spans[i - 1].second);
    if (spans[i].first < prev.end)
      corrupt("tensors '" + *spans[i - 1].second + "' and '" + *spans[i].second + "' overlap (bytes " +
              std::to_string(prev.begin) + ".." + std::to_string(prev.end) + " and " + std::to_string(spans[i].first) +
              ".." + std::to_string(tensors_.at(*spans[i].second).end) + ")");
  }
}

ATTNX_LIB_INLINE void file::read_into(std::string_view name, detail::element want, void* dst, const std::size_t* dims,
                                      std::size_t rank, bool transposed, const std::string& target) const {
  const tensor_info& t = info(name);
  const std::string where = "attnx: safetensors: tensor '" + std::string(name) + "' in '" + path_ + "'";
  const auto loadable = [&]() -> std::span<const std::string_view> {
    switch (want) {
      case detail::element::f32: return loadable_dtypes<float>;
      case detail::element::f64: return loadable_dtypes<double>;
      case detail::element::i32: return loadable_dtypes<std::int32_t>;
      case detail::element::b8: return loadable_dtypes<bool>;
      default: return loadable_dtypes<std::int64_t>;
    }
  }();
  const char* const names[] = {"float", "double", "std::int32_t", "std::int64_t", "bool"};
  if (std::ranges::find(loadable, t.dtype) == loadable.end())
    ATTNX_THROW(dtype_error(where + detail::refusal(t.dtype, want, names[static_cast<std::size_t>(want)], loadable)));
  std::vector<std::size_t> expected(dims, dims + rank);
  if (transposed && rank == 2) std::swap(expected[0], expected[1]);
  if (t.shape != expected)
    ATTNX_THROW(shape_error(where + " has shape " + shape_text(t.shape) + ", but the target has shape " + target +
                      (transposed ? " and needs " + shape_text(expected) + " stored (transposed, as (out, in))" : "")));
  std::vector<unsigned char> bytes(t.end - t.begin);
  if (in_memory_) {
    std::memcpy(bytes.data(), memory_.data() + data_offset_ + t.begin, bytes.size());
  } else {
    std::ifstream in(path_, std::ios::binary);
    if (!in) ATTNX_THROW(file_error("attnx: safetensors: cannot open '" + path_ + "' for reading"));
    in.seekg(static_cast<std::streamoff>(data_offset_ + t.begin));
    detail::read_bytes(in, reinterpret_cast<char*>(bytes.data()), bytes.size(), path_,
                       ("the data of tensor '" + std::string(name) + "'").c_str());
  }
  if (want == detail::element::b8) {  // (checked before anything is written)
    const std::size_t bad = detail::first_non_binary(bytes.data(), bytes.size());
    if (bad < bytes.size() && t.dtype == "BOOL")
      ATTNX_THROW(format_error(where + ": element " + std::to_string(bad) + " (in stored order) of the BOOL tensor is the byte " +
                               std::to_string(bytes[bad]) + ", and a BOOL element is 0 or 1"));
    if (bad < bytes.size())
      ATTNX_THROW(dtype_error(where + " has dtype U8 and element " + std::to_string(bad) + " (in stored order) is " +
                              std::to_string(bytes[bad]) + ": a U8 tensor loads into bool only when every element is 0 or 1"));
  }
  std::size_t size = 1;
  for (std::size_t k = 0; k < rank; ++k) size *= dims[k];
  const auto put = [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    if (!transposed || rank != 2) {
      detail::decode(t.dtype, bytes.data(), out, size);
      return;
    }
    const auto tmp = std::make_unique_for_overwrite<T[]>(size);  // (not std::vector<T>: T may be bool)
    detail::decode(t.dtype, bytes.data(), tmp.get(), size);
    const std::size_t R = dims[0], C = dims[1];  // target R x C, stored C x R
    for (std::size_t i = 0; i < R; ++i)
      for (std::size_t j = 0; j < C; ++j) out[i * C + j] = tmp[j * R + i];
  };
  switch (want) {
    case detail::element::f32: return put(static_cast<float*>(dst));
    case detail::element::f64: return put(static_cast<double*>(dst));
    case detail::element::i32: return put(static_cast<std::int32_t*>(dst));
    case detail::element::b8: return put(static_cast<bool*>(dst));
    default: return put(static_cast<std::int64_t*>(dst));
  }
}

namespace detail {
// A head count stated in the metadata: a positive decimal number (digits only), or format_error.
ATTNX_LIB_INLINE std::size_t stated_count(const file& f, std::string_view key, const std::string& text) {
  std::size_t n = 0;
  bool ok = !text.empty() && text.size() <= 9;  // (no head count has 10 digits: no overflow below)
  for (char c : text) {
    if (c < '0' || c > '9') ok = false;
    else n = n * 10 + static_cast<std::size_t>(c - '0');
  }
  if (!ok || n == 0)
    ATTNX_THROW(format_error("attnx: safetensors: '" + f.path() + "': __metadata__ \"" + std::string(key) + "\" is \"" + text +
                             "\", not a positive head count"));
  return n;
}
}  // namespace detail

ATTNX_LIB_INLINE void check_heads(const file& f, std::size_t heads, std::size_t kv_heads) {
  const auto check = [&](std::string_view key, std::size_t have, const char* what) {
    const auto it = f.metadata().find(key);
    if (it == f.metadata().end()) return;
    const std::size_t stated = detail::stated_count(f, key, it->second);
    if (stated != have)
      ATTNX_THROW(shape_error("attnx: safetensors: '" + f.path() + "' holds a module with " + std::to_string(stated) + " " +
                              what + (stated == 1 ? "" : "s") + " (__metadata__ \"" + std::string(key) + "\"), but the module has " +
                              std::to_string(have) + ": the head count is not in the weights' shapes (they hold heads x "
                              "d_k), and another count computes another attention"));
  };
  check(heads_key, heads, "head");
  check(kv_heads_key, kv_heads, "key/value head");
}

namespace detail {
// x rounded to a float toward zero with the last bit set when inexact ("round to odd"): rounding that float once
// more to nearest, into a format with at least 2 fewer significand bits at every magnitude (BF16: 16 fewer, F16:
// 13; where BF16 is subnormal, float's step is still 2^-149), gives x rounded to nearest once. (Through a float
// rounded to nearest, a double just above a BF16 midpoint would become the midpoint, then round to even.)
ATTNX_LIB_INLINE float round_to_odd(double x) {
  const float f = static_cast<float>(x);
  if (!std::isfinite(x) || static_cast<double>(f) == x) return f;
  const float t = std::fabs(static_cast<double>(f)) > std::fabs(x) ? std::nextafter(f, 0.0f) : f;  // (f = +-inf too)
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(t) | 1u);
}
// n values (each exact in double) as dtype's little-endian bytes (F64, F32, BF16, F16), each rounded once to
// nearest, ties to even: NaN stays NaN, +-inf stays +-inf, beyond the range +-inf.
ATTNX_LIB_INLINE void encode(std::string_view dtype, const double* v, unsigned char* out, std::size_t n) {
  if (dtype == "F64") return to_le_bytes(v, out, n);
  if (dtype == "F32") {
    for (std::size_t i = 0; i < n; ++i) {
      const float f = static_cast<float>(v[i]);  // (to nearest, ties to even)
      to_le_bytes(&f, out + 4 * i, 1);
    }
    return;
  }
  const bool brain = dtype == "BF16";
  for (std::size_t i = 0; i < n; ++i) {
    const float f = round_to_odd(v[i]);
    const std::uint16_t h = brain ? bf16::from_float(f) : f16::from_float(f);
    to_le_bytes(&h, out + 2 * i, 1);
  }
}
// n integers as dtype's little-endian bytes (I64, I32); into I32 each checked to fit (the message counts from
// first, the chunk's place in the entry).
ATTNX_LIB_INLINE void encode(std::string_view dtype, const std::int64_t* v, unsigned char* out, std::size_t n, const std::string& name,
                   std::size_t first) {
  if (dtype == "I64") return to_le_bytes(v, out, n);
  for (std::size_t i = 0; i < n; ++i) {
    if (v[i] < std::numeric_limits<std::int32_t>::min() || v[i] > std::numeric_limits<std::int32_t>::max())
      ATTNX_THROW(dtype_error("attnx: safetensors: entry '" + name + "' (I64) cannot be stored as I32: element " +
                        std::to_string(first + i) + " (in stored order) is " + std::to_string(v[i]) +
                        ", outside I32's range [-2147483648, 2147483647]"));
    const auto w = static_cast<std::int32_t>(v[i]);
    to_le_bytes(&w, out + 4 * i, 1);
  }
}
}  // namespace detail

ATTNX_LIB_INLINE entry entry::to(std::string_view target) const {
  if (target == dtype) return *this;  // (the bytes as they are: NaN payloads kept)
  const auto in = [](std::string_view d, const auto& list) { return std::ranges::find(list, d) != list.end(); };
  const auto& floats = loadable_dtypes<double>;      // F64, F32, BF16, F16
  const auto& ints = loadable_dtypes<std::int64_t>;  // I64, I32
  const bool fl = in(dtype, floats) && in(target, floats);
  if (!fl && !(in(dtype, ints) && in(target, ints)))
    ATTNX_THROW(dtype_error("attnx: safetensors: entry '" + name + "' (" + dtype + ") cannot be stored as " + std::string(target) +
                      ": floating-point entries are stored as " + detail::joined(floats) + ", integer ones as " +
                      detail::joined(ints) + ", BOOL ones as BOOL only"));
  const std::size_t sin = dtype_size(dtype), sout = dtype_size(target);
  std::size_t need = 0;
  const bool counted = detail::shape_bytes(shape, sin, need);
  if (!counted || bytes.size() != need)
    ATTNX_THROW(format_error("attnx: safetensors: entry '" + name + "' has " + std::to_string(bytes.size()) + " bytes, but shape " +
                       shape_text(shape) + " of " + dtype + " needs " +
                       (counted ? std::to_string(need) : "more than a size_t can count")));
  const std::size_t n = need / sin;
  entry e{name, std::string(target), shape, std::vector<unsigned char>(n * sout)};
  constexpr std::size_t chunk = 4096;  // (no copy of the whole tensor in double)
  for (std::size_t i = 0; i < n; i += chunk) {
    const std::size_t m = std::min(chunk, n - i);
    if (fl) {
      double v[chunk];  // (every value of these four dtypes is a double)
      detail::decode(dtype, bytes.data() + i * sin, v, m);
      detail::encode(target, v, e.bytes.data() + i * sout, m);
    } else {
      std::int64_t v[chunk];
      detail::decode(dtype, bytes.data() + i * sin, v, m);
      detail::encode(target, v, e.bytes.data() + i * sout, m, name, i);
    }
  }
  return e;
}

ATTNX_LIB_INLINE void save(const std::string& path, const std::vector<entry>& entries,
                           const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::size_t offset = 0;
  for (const auto& e : entries) {
    h[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) ATTNX_THROW(file_error("attnx: safetensors: cannot open '" + path + "' for writing"));
  unsigned char len[8];
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) len[i] = static_cast<unsigned char>(n & 0xFF);
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& e : entries) out.write(reinterpret_cast<const char*>(e.bytes.data()), static_cast<std::streamsize>(e.bytes.size()));
  if (!out) ATTNX_THROW(file_error("attnx: safetensors: writing '" + path + "' failed"));
}

}  // namespace attnx::safetensors
