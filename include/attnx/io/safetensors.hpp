// attnx: reading (and writing) safetensors files into static-shape attnx tensors.
//
// This header needs nlohmann/json (header-only; Debian: nlohmann-json3-dev). It is NOT included by
// attnx/attnx.hpp, and the attnx::attnx target does not require it: include it explicitly, and in
// CMake add `find_package(nlohmann_json 3 CONFIG REQUIRED)` and link `nlohmann_json::nlohmann_json`
// (where the json header is already on the default include path, as on Debian, nothing is needed).
//
// The format (https://github.com/huggingface/safetensors): 8 bytes, a little-endian unsigned header
// length N; N bytes of JSON, {"name": {"dtype": "F32", "shape": [8, 8], "data_offsets": [begin, end]},
// ..., "__metadata__": {"key": "value"}}; then the raw little-endian data, offsets relative to its start.
//
//   attnx::safetensors::file f("weights.safetensors");            // reads and checks the header
//   auto W = f.load<attnx::tensor<float, 512, 512>>("w_q");         // checks dtype and shape, reads
//   auto W2 = f.load_transposed<attnx::tensor<float, 512, 512>>("q_proj.weight");  // PyTorch (out, in)
//   auto mha = attnx::safetensors::load_mha<mha_t>(f, attnx::safetensors::mha_names::hugging_face("attn."),
//                                                  attnx::safetensors::weight_layout::out_in);
//   auto mha2 = attnx::safetensors::load_torch_multihead_attention<mha_t>(f, "self_attn.");  // nn.MultiheadAttention
//
// Every failure throws a subclass of attnx::safetensors::error (a std::runtime_error) whose message
// names the file and, where there is one, the tensor: file_error (missing or unreadable file),
// format_error (truncated file, corrupt header, bad offsets), missing_tensor, dtype_error (a dtype the
// target's elements do not hold exactly: float loads F32, BF16 and F16; double F64, F32, BF16 and F16;
// std::int32_t I32; std::int64_t I64 and I32; the widening is exact, narrowing is refused), shape_error
// (names the stored and the expected shape). Hugging Face checkpoints stored in BF16 or F16 load as they are.
//
// Writing: save(path, {make_entry("w_q", W), make_entry("q_proj.weight", W, /*transposed=*/true), ...}) stores each
// tensor in its own dtype; make_entry(...).to("BF16") (or "F16", "F32") stores it narrower, each value rounded once
// to nearest, and .to("I32") an I64 tensor, each value checked to fit (entry::to).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnx/eval/assign.hpp"
#include "attnx/expr/slice.hpp"
#include "attnx/modules/multi_head_attention.hpp"
#include "attnx/shape/shape.hpp"
#include "attnx/tensor/half.hpp"
#include "attnx/tensor/tensor.hpp"
#include "attnx/tensor/view.hpp"

namespace attnx::safetensors {

// ---- errors -----------------------------------------------------------------------------------------
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class file_error : public error {  // the file cannot be opened or read
 public:
  using error::error;
};
class format_error : public error {  // not a valid safetensors file: truncated, corrupt header, bad offsets
 public:
  using error::error;
};
class missing_tensor : public error {
 public:
  using error::error;
};
class dtype_error : public error {
 public:
  using error::error;
};
class shape_error : public error {
 public:
  using error::error;
};

// ---- dtypes -----------------------------------------------------------------------------------------
// Bytes per element of every dtype of the format (0: not a safetensors dtype).
inline std::size_t dtype_size(std::string_view d) noexcept {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

// The dtype that an attnx element type is stored as.
// (Integers: token ids and other indices.)
template <class T>
constexpr std::string_view dtype_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int32_t> ||
                    std::is_same_v<T, std::int64_t>,
                "attnx: safetensors: tensors of float (F32), double (F64), std::int32_t (I32) and std::int64_t (I64) can be "
                "loaded and saved");
  if constexpr (std::is_same_v<T, float>) return "F32";
  else if constexpr (std::is_same_v<T, double>) return "F64";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "I32";
  else return "I64";
}

// The dtypes that load into elements of T: T's own dtype first, then those T holds exactly (widened on loading, as
// PyTorch's load_state_dict would convert them): BF16 and F16 into float and double, F32 into double, I32 into
// std::int64_t. Narrowing (F64 into float, I64 into std::int32_t) is refused: it would lose digits.
template <class T>
inline constexpr std::array<std::string_view, 1> loadable_dtypes{dtype_of<T>()};
template <>
inline constexpr std::array<std::string_view, 3> loadable_dtypes<float>{"F32", "BF16", "F16"};
template <>
inline constexpr std::array<std::string_view, 4> loadable_dtypes<double>{"F64", "F32", "BF16", "F16"};
template <>
inline constexpr std::array<std::string_view, 2> loadable_dtypes<std::int64_t>{"I64", "I32"};

template <class T>
constexpr const char* element_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "std::int32_t";
  else return "std::int64_t";
}

struct tensor_info {
  std::string dtype;
  std::vector<std::size_t> shape;
  std::size_t begin = 0, end = 0;  // byte offsets into the data section
  // The element count (checked when the header was read: it times the dtype's size is end - begin, with
  // no overflow on the way).
  std::size_t elements() const {
    std::size_t n = 1;
    for (auto e : shape) n *= e;
    return n;
  }
};

inline std::string shape_text(const std::vector<std::size_t>& s) {
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
inline bool shape_bytes(const std::vector<std::size_t>& shape, std::size_t element_size, std::size_t& bytes) {
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
inline std::uint64_t read_le_u64(const unsigned char* p) noexcept {
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
template <class T>
void to_le_bytes(const T* src, unsigned char* dst, std::size_t n) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(dst, src, n * sizeof(T));
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      unsigned char b[sizeof(T)];
      std::memcpy(b, src + i, sizeof(T));
      for (std::size_t k = 0; k < sizeof(T); ++k) dst[i * sizeof(T) + k] = b[sizeof(T) - 1 - k];
    }
  }
}
// n elements stored as dtype (one of loadable_dtypes<T>) in little-endian bytes, into T: a copy when
// the dtype is T's own, else each element widened exactly (BF16: its 16 bits above 16 zero bits of a float;
// F16: subnormals, infinities and NaN payloads kept; F32 into double; I32 into std::int64_t).
template <class T>
void decode(std::string_view dtype, const unsigned char* src, T* dst, std::size_t n) {
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
template <std::size_t R>
std::vector<std::size_t> extents_of(const dims_t<R>& d) {
  return std::vector<std::size_t>(d.begin(), d.end());
}
}  // namespace detail

// ---- reading ------------------------------------------------------------------------------------------
class file {
 public:
  // A file already in memory (a buffer read or mapped by the caller, or a fuzzer's input): the same checks;
  // `name` stands for the path in messages.
  static file from_memory(std::vector<unsigned char> bytes, std::string name = "<memory>") {
    file f;
    f.path_ = std::move(name);
    f.memory_ = std::move(bytes);
    f.in_memory_ = true;
    const std::size_t size = f.memory_.size();
    if (size < 8)
      throw format_error("attnx: safetensors: '" + f.path_.string() + "' is " + std::to_string(size) +
                         " bytes long, too short for the 8-byte header length (truncated, or not a safetensors file)");
    const std::uint64_t n = detail::read_le_u64(f.memory_.data());
    f.check_header_length(n, size);
    f.data_offset_ = 8 + static_cast<std::size_t>(n);
    f.data_size_ = size - f.data_offset_;
    f.parse(std::string(reinterpret_cast<const char*>(f.memory_.data()) + 8, static_cast<std::size_t>(n)));
    return f;
  }

  // Reads and checks the header (the data is read by load()).
  explicit file(std::filesystem::path path) : path_(std::move(path)) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path_, ec);
    if (ec) throw file_error("attnx: safetensors: cannot open '" + path_.string() + "': " + ec.message());
    std::ifstream in(path_, std::ios::binary);
    if (!in) throw file_error("attnx: safetensors: cannot open '" + path_.string() + "' for reading");
    if (size < 8)
      throw format_error("attnx: safetensors: '" + path_.string() + "' is " + std::to_string(size) +
                         " bytes long, too short for the 8-byte header length (truncated, or not a safetensors file)");
    unsigned char len[8];
    read(in, reinterpret_cast<char*>(len), 8, "the header length");
    const std::uint64_t n = detail::read_le_u64(len);
    check_header_length(n, size);
    std::string header(static_cast<std::size_t>(n), '\0');
    read(in, header.data(), static_cast<std::size_t>(n), "the header");
    data_offset_ = 8 + static_cast<std::size_t>(n);
    data_size_ = static_cast<std::size_t>(size) - data_offset_;
    parse(header);
  }

  const std::filesystem::path& path() const noexcept { return path_; }
  // Every tensor, by name.
  const std::map<std::string, tensor_info, std::less<>>& tensors() const noexcept { return tensors_; }
  // The "__metadata__" entries (string to string).
  const std::map<std::string, std::string, std::less<>>& metadata() const noexcept { return metadata_; }
  bool contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }
  const tensor_info& info(std::string_view name) const {
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
      throw missing_tensor("attnx: safetensors: no tensor '" + std::string(name) + "' in '" + path_.string() + "' (it has " +
                           std::to_string(tensors_.size()) + (tensors_.size() == 1 ? " tensor" : " tensors") +
                           (have.empty() ? "" : ": " + have) + ")");
    }
    return it->second;
  }

  // The tensor `name` as an attnx tensor of type Tensor (basic_tensor<float or double, S>): the stored
  // dtype must be one its elements hold exactly (loadable_dtypes: F32, BF16, F16 into float; F64 too into double;
  // widened on loading) and the stored shape S's extents; a dyn axis of S takes the stored
  // extent (tensor<float, dyn, 64> loads any (L, 64) matrix; the rank and the static extents must match).
  template <class Tensor>
  Tensor load(std::string_view name) const {
    return load_as<Tensor>(name, false);
  }
  // A rank-2 tensor stored transposed, (cols, rows): PyTorch's nn.Linear keeps weight as (out, in),
  // where attnx multiplies x W with W of (in, out).
  template <class Tensor>
  Tensor load_transposed(std::string_view name) const {
    static_assert(Tensor::rank == 2, "attnx: safetensors: load_transposed reads a matrix");
    return load_as<Tensor>(name, true);
  }
  // Into memory the caller owns, through a writable view (its extents, dyn ones included, must be the
  // stored ones).
  template <class T, class S>
  void load_into(std::string_view name, const basic_view<T, S>& v) const {
    static_assert(!std::is_const_v<T>, "attnx: safetensors: load_into needs a writable view");
    read_tensor<T, S>(name, v.data(), false, v.dims());
  }

 private:
  file() = default;

  void check_header_length(std::uint64_t n, std::uint64_t size) const {
    if (n > size - 8)
      throw format_error("attnx: safetensors: '" + path_.string() + "': the header length " + std::to_string(n) +
                         " exceeds the " + std::to_string(size - 8) +
                         " bytes that follow it (truncated, or not a safetensors file)");
    if (n == 0) throw format_error("attnx: safetensors: '" + path_.string() + "': empty header");
  }

  void read(std::ifstream& in, char* dst, std::size_t n, const char* what) const {
    if (!in.read(dst, static_cast<std::streamsize>(n)))
      throw file_error("attnx: safetensors: '" + path_.string() + "': reading " + what + " failed");
  }
  [[noreturn]] void corrupt(const std::string& what) const {
    throw format_error("attnx: safetensors: '" + path_.string() + "': corrupt header: " + what);
  }

  void parse(const std::string& header) {
    nlohmann::json j;
    // JSON objects may repeat a key (the last one would win): a tensor named twice is refused instead.
    std::vector<std::string> top_keys;
    const nlohmann::json::parser_callback_t keys = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& k) {
      if (depth == 1 && event == nlohmann::json::parse_event_t::key && k.is_string()) top_keys.push_back(k.get<std::string>());
      return true;
    };
    try {
      j = nlohmann::json::parse(header, keys);
    } catch (const nlohmann::json::exception& e) {
      corrupt(std::string("the JSON does not parse (") + e.what() + ")");
    }
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
        throw format_error("attnx: safetensors: '" + path_.string() + "': " + where + " ends at byte " + std::to_string(t.end) +
                           " of the data, which has only " + std::to_string(data_size_) + " bytes (truncated file?)");
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

  template <class Tensor>
  Tensor load_as(std::string_view name, bool transposed) const {
    using S = typename Tensor::shape_type;
    if constexpr (S::is_static) {
      Tensor t(uninitialized);
      read_tensor<typename Tensor::value_type, S>(name, t.data(), transposed, S::extents);
      return t;
    } else {
      // The dyn axes take the stored extents (read_tensor then checks the rank and the static ones).
      std::vector<std::size_t> stored = info(name).shape;
      if (transposed && stored.size() == 2) std::swap(stored[0], stored[1]);
      dims_t<S::rank> d = S::extents;
      for (std::size_t k = 0; k < S::rank; ++k)
        if (d[k] == dyn) d[k] = k < stored.size() ? stored[k] : 0;
      Tensor t(d, uninitialized);
      read_tensor<typename Tensor::value_type, S>(name, t.data(), transposed, d);
      return t;
    }
  }

  template <class T, class S>
  void read_tensor(std::string_view name, T* dst, bool transposed, const dims_t<S::rank>& dims) const {
    const tensor_info& t = info(name);
    const std::string where = "attnx: safetensors: tensor '" + std::string(name) + "' in '" + path_.string() + "'";
    if (std::ranges::find(loadable_dtypes<T>, t.dtype) == loadable_dtypes<T>.end())
      throw dtype_error(where + " has dtype " + t.dtype + ", which the target's elements (" + element_name<T>() +
                        ") do not hold exactly: they load " + detail::joined(loadable_dtypes<T>));
    std::vector<std::size_t> expected = detail::extents_of<S::rank>(dims);
    if (transposed && S::rank == 2) std::swap(expected[0], expected[1]);
    if (t.shape != expected)
      throw shape_error(where + " has shape " + shape_text(t.shape) + ", but the target has shape " +
shape_string<S>() +
                        (transposed ? " and needs " + shape_text(expected) + " stored (transposed, as (out, in))" : ""));
    std::vector<unsigned char> bytes(t.end - t.begin);
    if (in_memory_) {
      std::memcpy(bytes.data(), memory_.data() + data_offset_ + t.begin, bytes.size());
    } else {
      std::ifstream in(path_, std::ios::binary);
      if (!in) throw file_error("attnx: safetensors: cannot open '" + path_.string() + "' for reading");
      in.seekg(static_cast<std::streamoff>(data_offset_ + t.begin));
      read(in, reinterpret_cast<char*>(bytes.data()), bytes.size(), ("the data of tensor '" + std::string(name) + "'").c_str());
    }
    const std::size_t size = dims_size<S::rank>(dims);
    if (!transposed) {
      detail::decode(t.dtype, bytes.data(), dst, size);
    } else if constexpr (S::rank == 2) {
      std::vector<T> tmp(size);
      detail::decode(t.dtype, bytes.data(), tmp.data(), size);
      const std::size_t R = dims[0], C = dims[1];  // target R x C, stored C x R
      for (std::size_t i = 0; i < R; ++i)
        for (std::size_t j = 0; j < C; ++j) dst[i * C + j] = tmp[j * R + i];
    }
  }

  std::filesystem::path path_;
  std::vector<unsigned char> memory_;  // from_memory: the whole file
  bool in_memory_ = false;
  std::size_t data_offset_ = 0, data_size_ = 0;
  std::map<std::string, tensor_info, std::less<>> tensors_;
  std::map<std::string, std::string, std::less<>> metadata_;
};

// ---- writing ------------------------------------------------------------------------------------------
namespace detail {
// x rounded to a float toward zero with the last bit set when inexact ("round to odd"): rounding that float once
// more to nearest, into a format with at least 2 fewer significand bits at every magnitude (BF16: 16 fewer, F16:
// 13; where BF16 is subnormal, float's step is still 2^-149), gives x rounded to nearest once. (Through a float
// rounded to nearest, a double just above a BF16 midpoint would become the midpoint, then round to even.)
inline float round_to_odd(double x) {
  const float f = static_cast<float>(x);
  if (!std::isfinite(x) || static_cast<double>(f) == x) return f;
  const float t = std::fabs(static_cast<double>(f)) > std::fabs(x) ? std::nextafter(f, 0.0f) : f;  // (f = +-inf too)
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(t) | 1u);
}
// n values (each exact in double) as dtype's little-endian bytes (F64, F32, BF16, F16), each rounded once to
// nearest, ties to even: NaN stays NaN, +-inf stays +-inf, beyond the range +-inf.
inline void encode(std::string_view dtype, const double* v, unsigned char* out, std::size_t n) {
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
inline void encode(std::string_view dtype, const std::int64_t* v, unsigned char* out, std::size_t n, const std::string& name,
                   std::size_t first) {
  if (dtype == "I64") return to_le_bytes(v, out, n);
  for (std::size_t i = 0; i < n; ++i) {
    if (v[i] < std::numeric_limits<std::int32_t>::min() || v[i] > std::numeric_limits<std::int32_t>::max())
      throw dtype_error("attnx: safetensors: entry '" + name + "' (I64) cannot be stored as I32: element " +
                        std::to_string(first + i) + " (in stored order) is " + std::to_string(v[i]) +
                        ", outside I32's range [-2147483648, 2147483647]");
    const auto w = static_cast<std::int32_t>(v[i]);
    to_le_bytes(&w, out + 4 * i, 1);
  }
}
}  // namespace detail

struct entry {
  std::string name;
  std::string dtype;
  std::vector<std::size_t> shape;
  std::vector<unsigned char> bytes;  // little-endian

  // The entry stored as another dtype, as torch's Tensor.to(dtype) before saving: a floating-point entry (F64,
  // F32, BF16, F16) as any of these, an integer one (I64, I32) as either; to its own dtype, a copy. Widening is
  // exact; narrowing rounds each value once to nearest, ties to even (NaN stays NaN, +-inf stays +-inf, a value
  // beyond F16's or BF16's range becomes +-inf; F64 to BF16 or F16 through a round-to-odd float, so rounded once);
  // I64 to I32 throws dtype_error naming the first element (in stored order) that does not fit. Across kinds, or a
  // dtype outside these: dtype_error; bytes that do not match the shape: format_error. Converted a chunk at a time.
  //   st::save("model_bf16.safetensors", {st::make_entry("w_q", W).to("BF16"), ...});
  entry to(std::string_view target) const {
    if (target == dtype) return *this;  // (the bytes as they are: NaN payloads kept)
    const auto in = [](std::string_view d, const auto& list) { return std::ranges::find(list, d) != list.end(); };
    const auto& floats = loadable_dtypes<double>;      // F64, F32, BF16, F16
    const auto& ints = loadable_dtypes<std::int64_t>;  // I64, I32
    const bool fl = in(dtype, floats) && in(target, floats);
    if (!fl && !(in(dtype, ints) && in(target, ints)))
      throw dtype_error("attnx: safetensors: entry '" + name + "' (" + dtype + ") cannot be stored as " + std::string(target) +
                        ": floating-point entries are stored as " + detail::joined(floats) + ", integer ones as " +
                        detail::joined(ints));
    const std::size_t sin = dtype_size(dtype), sout = dtype_size(target);
    std::size_t need = 0;
    const bool counted = detail::shape_bytes(shape, sin, need);
    if (!counted || bytes.size() != need)
      throw format_error("attnx: safetensors: entry '" + name + "' has " + std::to_string(bytes.size()) + " bytes, but shape " +
                         shape_text(shape) + " of " + dtype + " needs " +
                         (counted ? std::to_string(need) : "more than a size_t can count"));
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
};

// An attnx tensor (or view) as an entry; transposed stores a matrix as (cols, rows) (PyTorch's layout
// for nn.Linear weights).
template <class E>
  requires dense_terminal<E>
entry make_entry(std::string name, const E& t, bool transposed = false) {
  using T = value_t<E>;
  using S = shape_of_t<E>;
  const auto dims = dims_of(t);
  const std::size_t size = dims_size<S::rank>(dims);
  entry e{std::move(name), std::string(dtype_of<T>()), detail::extents_of<S::rank>(dims), std::vector<unsigned char>(size * sizeof(T))};
  if (!transposed) {
    detail::to_le_bytes(t.data(), e.bytes.data(), size);
  } else if constexpr (S::rank == 2) {
    std::swap(e.shape[0], e.shape[1]);
    std::vector<T> tmp(size);
    const std::size_t R = dims[0], C = dims[1];
    for (std::size_t i = 0; i < R; ++i)
      for (std::size_t j = 0; j < C; ++j) tmp[j * R + i] = t.data()[i * C + j];
    detail::to_le_bytes(tmp.data(), e.bytes.data(), size);
  } else {
    throw std::invalid_argument("attnx: safetensors: only a matrix can be stored transposed ('" + e.name + "' has shape " +
                                shape_string<S>() + ")");
  }
  return e;
}

// Writes a safetensors file (the header padded with spaces to a multiple of 8 bytes, as the format
// recommends). Throws file_error if the file cannot be written.
inline void save(const std::filesystem::path& path, const std::vector<entry>& entries,
                 const std::map<std::string, std::string>& metadata = {}) {
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
  if (!out) throw file_error("attnx: safetensors: cannot open '" + path.string() + "' for writing");
  unsigned char len[8];
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) len[i] = static_cast<unsigned char>(n & 0xFF);
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& e : entries) out.write(reinterpret_cast<const char*>(e.bytes.data()), static_cast<std::streamsize>(e.bytes.size()));
  if (!out) throw file_error("attnx: safetensors: writing '" + path.string() + "' failed");
}

// ---- a multi_head_attention module from a file -------------------------------------------------------------
// The names of the eight parameters (the biases are not read by a module without biases).
struct mha_names {
  std::string w_q = "w_q", w_k = "w_k", w_v = "w_v", w_o = "w_o";
  std::string b_q = "b_q", b_k = "b_k", b_v = "b_v", b_o = "b_o";
  // Hugging Face style (BART, T5-like, LLaMA attention blocks): <prefix>q_proj.weight, ..., <prefix>out_proj.bias,
  // stored (out, in): load with weight_layout::out_in. (PyTorch's own nn.MultiheadAttention packs q, k and v into
  // one in_proj_weight: load_torch_multihead_attention reads that.)
  static mha_names hugging_face(const std::string& prefix = "") {
    return {prefix + "q_proj.weight", prefix + "k_proj.weight", prefix + "v_proj.weight", prefix + "out_proj.weight",
            prefix + "q_proj.bias",   prefix + "k_proj.bias",   prefix + "v_proj.bias",   prefix + "out_proj.bias"};
  }
  [[deprecated("these are Hugging Face's names, not nn.MultiheadAttention's: use mha_names::hugging_face, or "
               "load_torch_multihead_attention for nn.MultiheadAttention's packed in_proj_weight")]]
  static mha_names torch(const std::string& prefix = "") {
    return hugging_face(prefix);
  }
};
enum class weight_layout {
  in_out,  // stored as attnx multiplies them: (d_in, d_out), y = x W (GPT-2's Conv1D, attnx's own files)
  out_in   // stored as PyTorch's nn.Linear.weight: (d_out, d_in), y = x W^T
};

// The module's eight parameters from the file. The layout has no default: a square (d, d) weight fits both
// layouts, and the wrong one gives wrong outputs without any error.
template <class M>
M load_mha(const file& f, const mha_names& names, weight_layout layout) {
  static_assert(M::storage == weights_storage::owned,
                "attnx: safetensors: load_mha fills a module that owns its weights (weights_storage::owned)");
  auto w = [&](auto type_tag, const std::string& name) {
    using W = typename decltype(type_tag)::type;
    return layout == weight_layout::out_in ? f.load_transposed<W>(name) : f.load<W>(name);
  };
  M m;
  m.w_q = w(std::type_identity<typename M::w_q_type>{}, names.w_q);
  m.w_k = w(std::type_identity<typename M::w_k_type>{}, names.w_k);
  m.w_v = w(std::type_identity<typename M::w_v_type>{}, names.w_v);
  m.w_o = w(std::type_identity<typename M::w_o_type>{}, names.w_o);
  if constexpr (M::has_bias) {
    m.b_q = f.load<typename M::b_q_type>(names.b_q);
    m.b_k = f.load<typename M::b_k_type>(names.b_k);
    m.b_v = f.load<typename M::b_v_type>(names.b_v);
    m.b_o = f.load<typename M::b_o_type>(names.b_o);
  }
  return m;
}

// torch.nn.MultiheadAttention's state dict: <prefix>in_proj_weight (3 d_model, d_model) holding W_q, W_k, W_v
// stacked, each (out, in); <prefix>in_proj_bias (3 d_model); <prefix>out_proj.weight (d_model, d_model) (out, in);
// <prefix>out_proj.bias. (Its kdim / vdim variant with separate q_proj_weight, ... is not read.) The module must
// have heads * d_k = heads * d_v = d_model and no grouped-query heads, as nn.MultiheadAttention.
template <class M>
M load_torch_multihead_attention(const file& f, const std::string& prefix = "") {
  static_assert(M::storage == weights_storage::owned,
                "attnx: safetensors: load_torch_multihead_attention fills a module that owns its weights");
  constexpr std::size_t D = M::d_model;
  static_assert(M::heads * M::d_k == D && M::heads * M::d_v == D && M::kv_heads == M::heads,
                "attnx: safetensors: nn.MultiheadAttention has heads * d_k = heads * d_v = d_model and no grouped-query "
                "heads");
  using T = typename M::value_type;
  M m;
  if constexpr (M::heads * M::d_k == D && M::heads * M::d_v == D && M::kv_heads == M::heads) {  // (else reported above)
  const auto packed = f.load<tensor<T, 3 * D, D>>(prefix + "in_proj_weight");  // (out, in), q | k | v stacked
  m.w_q = transpose(slice<0, 0, D>(packed));
  m.w_k = transpose(slice<0, D, D>(packed));
  m.w_v = transpose(slice<0, 2 * D, D>(packed));
  m.w_o = f.load_transposed<typename M::w_o_type>(prefix + "out_proj.weight");
  if constexpr (M::has_bias) {
    const auto bias = f.load<tensor<T, 3 * D>>(prefix + "in_proj_bias");
    m.b_q = slice<0, 0, D>(bias);
    m.b_k = slice<0, D, D>(bias);
    m.b_v = slice<0, 2 * D, D>(bias);
    m.b_o = f.load<typename M::b_o_type>(prefix + "out_proj.bias");
  }
  }
  return m;
}

}  // namespace attnx::safetensors
