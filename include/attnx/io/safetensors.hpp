// attnx: reading (and writing) safetensors files into static-shape attnx tensors.
//
// Not included by attnx/attnx.hpp: include it explicitly. The reading and writing are in the attnx library (built with
// it where nlohmann/json was found, as the Debian package nlohmann-json3-dev provides it: ATTNX_HAS_SAFETENSORS);
// with ATTNX_HEADER_ONLY this header includes them, and then needs nlohmann/json on the include path.
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
// format_error (truncated file, corrupt header, bad offsets, a BOOL byte other than 0 or 1), missing_tensor,
// dtype_error (a dtype the target's elements do not load, with the reason: float loads F32, BF16 and F16; double F64,
// F32, BF16 and F16; std::int32_t I32; std::int64_t I64 and I32; bool BOOL, and U8 holding only 0 and 1; the
// widening is exact, narrowing is refused), shape_error (names the stored and the expected shape, or the head counts
// of the file and of the module). Hugging Face checkpoints stored in BF16 or F16 load as they are, and so do PyTorch's
// boolean masks.
//
// Writing: save(path, {make_entry("w_q", W), make_entry("q_proj.weight", W, /*transposed=*/true), ...}) stores each
// tensor in its own dtype (a bool tensor as BOOL); make_entry(...).to("BF16") (or "F16", "F32") stores it narrower,
// each value rounded once to nearest, and .to("I32") an I64 tensor, each value checked to fit (entry::to).
// save_mha(path, module, names, layout) stores a multi_head_attention with its head counts in "__metadata__".
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "attnx/config.hpp"
#include "attnx/eval/assign.hpp"
#include "attnx/expr/slice.hpp"
#include "attnx/modules/multi_head_attention.hpp"
#include "attnx/shape/shape.hpp"
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
std::size_t dtype_size(std::string_view d) noexcept;

// The dtype that an attnx element type is stored as.
// (Integers: token ids and other indices; bool: masks.) Every function that loads or saves checks its element type
// here, once: any other type is this one error (and "I64" after it, so that nothing else fails).
template <class T>
constexpr std::string_view dtype_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int32_t> ||
                    std::is_same_v<T, std::int64_t> || std::is_same_v<T, bool>,
                "attnx: safetensors: tensors of float (F32), double (F64), std::int32_t (I32), std::int64_t (I64) and "
                "bool (BOOL) can be loaded and saved, not of this element type");
  if constexpr (std::is_same_v<T, float>) return "F32";
  else if constexpr (std::is_same_v<T, double>) return "F64";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "I32";
  else if constexpr (std::is_same_v<T, bool>) return "BOOL";
  else return "I64";
}

// The dtypes that load into elements of T: T's own dtype first, then those T holds exactly (widened on loading, as
// PyTorch's load_state_dict would convert them): BF16 and F16 into float and double, F32 into double, I32 into
// std::int64_t; U8 into bool when every element is 0 or 1 (older PyTorch saved masks as uint8). Narrowing (F64 into
// float, I64 into std::int32_t) is refused: it could lose digits.
template <class T>
inline constexpr std::array<std::string_view, 1> loadable_dtypes{dtype_of<T>()};
template <>
inline constexpr std::array<std::string_view, 3> loadable_dtypes<float>{"F32", "BF16", "F16"};
template <>
inline constexpr std::array<std::string_view, 4> loadable_dtypes<double>{"F64", "F32", "BF16", "F16"};
template <>
inline constexpr std::array<std::string_view, 2> loadable_dtypes<std::int64_t>{"I64", "I32"};
template <>
inline constexpr std::array<std::string_view, 2> loadable_dtypes<bool>{"BOOL", "U8"};

// One entry of a safetensors file's header: name, dtype, shape, byte offsets.
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

// "[2, 3]" (messages).
std::string shape_text(const std::vector<std::size_t>& s);

namespace detail {
// The element types a tensor loads into and saves from, as the library's functions take them.
enum class element : unsigned char { f32, f64, i32, i64, b8 };
template <class T>
constexpr element element_of() {
  (void)dtype_of<T>();  // (the rule on T)
  if constexpr (std::is_same_v<T, float>) return element::f32;
  else if constexpr (std::is_same_v<T, double>) return element::f64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return element::i32;
  else if constexpr (std::is_same_v<T, bool>) return element::b8;
  else return element::i64;
}
template <class T>
void to_le_bytes(const T* src, unsigned char* dst, std::size_t n) {
  if constexpr (std::is_same_v<T, bool>) {  // BOOL: one byte, 0 or 1, whatever the host's bool looks like
    for (std::size_t i = 0; i < n; ++i) dst[i] = src[i] ? 1 : 0;
  } else if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(dst, src, n * sizeof(T));
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      unsigned char b[sizeof(T)];
      std::memcpy(b, src + i, sizeof(T));
      for (std::size_t k = 0; k < sizeof(T); ++k) dst[i * sizeof(T) + k] = b[sizeof(T) - 1 - k];
    }
  }
}
}  // namespace detail

// ---- reading ------------------------------------------------------------------------------------------
class file {
 public:
  // A file already in memory (a buffer read or mapped by the caller, or a fuzzer's input): the same checks;
  // `name` stands for the path in messages.
  static file from_memory(std::vector<unsigned char> bytes, std::string name = "<memory>");

  // Reads and checks the header (the data is read by load()). (A std::filesystem::path converts.)
  explicit file(const std::string& path);

  const std::string& path() const noexcept { return path_; }
  // Every tensor, by name.
  const std::map<std::string, tensor_info, std::less<>>& tensors() const noexcept { return tensors_; }
  // The "__metadata__" entries (string to string).
  const std::map<std::string, std::string, std::less<>>& metadata() const noexcept { return metadata_; }
  bool contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }
  // The entry `name`; missing_tensor (naming the file and some of its tensors) if there is none.
  const tensor_info& info(std::string_view name) const;

  // The tensor `name` as an attnx tensor of type Tensor (basic_tensor<T, S>): the stored dtype must be one its
  // elements hold exactly (loadable_dtypes: F32, BF16, F16 into float; F64 too into double; BOOL and U8 of 0 and 1
  // into bool; widened on loading) and the stored shape S's extents; a dyn axis of S takes the stored
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
    const auto d = v.dims();
    read_into(name, detail::element_of<T>(), v.data(), d.data(), S::rank, false, shape_string<S>(d));
  }

 private:
  file() = default;

  void check_header_length(std::uint64_t n, std::uint64_t size) const;
  [[noreturn]] void corrupt(const std::string& what) const;
  void parse(const std::string& header);
  // The entry `name` into dst: elements of `want`, extents dims (rank of them: the target's, stored transposed for
  // a matrix when asked), after the dtype and shape rules (target: the target's shape, for the message).
  void read_into(std::string_view name, detail::element want, void* dst, const std::size_t* dims, std::size_t rank,
                 bool transposed, const std::string& target) const;

  template <class Tensor>
  Tensor load_as(std::string_view name, bool transposed) const {
    using S = typename Tensor::shape_type;
    using T = typename Tensor::value_type;
    if constexpr (S::is_static) {
      Tensor t(uninitialized);
      read_into(name, detail::element_of<T>(), t.data(), S::extents.data(), S::rank, transposed, shape_string<S>());
      return t;
    } else {
      // The dyn axes take the stored extents (read_into then checks the rank and the static ones).
      const std::vector<std::size_t>& stored = info(name).shape;
      dims_t<S::rank> d = S::extents;
      for (std::size_t k = 0; k < S::rank; ++k) {
        const std::size_t from = transposed && stored.size() == 2 ? 1 - k : k;
        if (d[k] == dyn) d[k] = from < stored.size() ? stored[from] : 0;
      }
      Tensor t(d, uninitialized);
      read_into(name, detail::element_of<T>(), t.data(), d.data(), S::rank, transposed, shape_string<S>());
      return t;
    }
  }

  std::string path_;
  std::vector<unsigned char> memory_;  // from_memory: the whole file
  bool in_memory_ = false;
  std::size_t data_offset_ = 0, data_size_ = 0;
  std::map<std::string, tensor_info, std::less<>> tensors_;
  std::map<std::string, std::string, std::less<>> metadata_;
};

// ---- writing ------------------------------------------------------------------------------------------
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
  // dtype outside these (a BOOL entry is stored as BOOL only): dtype_error; bytes that do not match the shape:
  // format_error. Converted a chunk at a time.
  //   st::save("model_bf16.safetensors", {st::make_entry("w_q", W).to("BF16"), ...});
  entry to(std::string_view target) const;
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
  entry e{std::move(name), std::string(dtype_of<T>()), std::vector<std::size_t>(dims.begin(), dims.end()), std::vector<unsigned char>(size * sizeof(T))};
  if (!transposed) {
    detail::to_le_bytes(t.data(), e.bytes.data(), size);
  } else if constexpr (S::rank == 2) {
    std::swap(e.shape[0], e.shape[1]);
    const std::size_t R = dims[0], C = dims[1];  // (element by element: no std::vector<T>, which bool would not fit)
    for (std::size_t i = 0; i < R; ++i)
      for (std::size_t j = 0; j < C; ++j) detail::to_le_bytes(t.data() + i * C + j, e.bytes.data() + (j * R + i) * sizeof(T), 1);
  } else {
    ATTNX_THROW(std::invalid_argument("attnx: safetensors: only a matrix can be stored transposed ('" + e.name + "' has shape " +
                                shape_string<S>() + ")"));
  }
  return e;
}

// Writes a safetensors file (the header padded with spaces to a multiple of 8 bytes, as the format
// recommends). Throws file_error if the file cannot be written. (A std::filesystem::path converts.)
void save(const std::string& path, const std::vector<entry>& entries, const std::map<std::string, std::string>& metadata = {});

// ---- a multi_head_attention module from a file -------------------------------------------------------------
// The names of the eight parameters (the biases are not read by a module without biases) and of the sink logits
// (read by a module with mha_options::sinks only; gpt-oss: <prefix>sinks).
struct mha_names {
  std::string w_q = "w_q", w_k = "w_k", w_v = "w_v", w_o = "w_o";
  std::string b_q = "b_q", b_k = "b_k", b_v = "b_v", b_o = "b_o";
  std::string sinks = "sinks";
  // Hugging Face style (BART, T5-like, LLaMA attention blocks): <prefix>q_proj.weight, ..., <prefix>out_proj.bias,
  // stored (out, in): load with weight_layout::out_in. (PyTorch's own nn.MultiheadAttention packs q, k and v into
  // one in_proj_weight: load_torch_multihead_attention reads that.)
  static mha_names hugging_face(const std::string& prefix = "") {
    return {prefix + "q_proj.weight", prefix + "k_proj.weight", prefix + "v_proj.weight", prefix + "out_proj.weight",
            prefix + "q_proj.bias",   prefix + "k_proj.bias",   prefix + "v_proj.bias",   prefix + "out_proj.bias",
            prefix + "sinks"};
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

// The head counts in "__metadata__". The weights' shapes hold only heads * d_k, kv_heads * d_k, ...: a module with
// 8 heads of 2 reads a file made by one with 4 heads of 4 without any shape error and computes another attention
// (docs/mha.md, "The head count"). So attnx's writers store the counts (decimal strings) and its loaders check them.
inline constexpr std::string_view heads_key = "attnx.heads";
inline constexpr std::string_view kv_heads_key = "attnx.kv_heads";

// The metadata that says M's head counts ({"attnx.heads": "8", "attnx.kv_heads": "2"}), for files written by hand:
//   st::save(path, {...}, st::mha_metadata<mha_t>());
template <class M>
std::map<std::string, std::string> mha_metadata() {
  return {{std::string(heads_key), std::to_string(M::heads)}, {std::string(kv_heads_key), std::to_string(M::kv_heads)}};
}

// Checks the head counts the file states (when it states them: a file written by PyTorch does not) against a module's:
// shape_error naming the file, both counts and the key if they differ; format_error if a stated count is not a positive
// decimal number. load_mha and load_torch_multihead_attention call it before reading anything.
void check_heads(const file& f, std::size_t heads, std::size_t kv_heads);

// The module's eight parameters from the file (four without biases), after check_heads. The layout has no default: a
// square (d, d) weight fits both layouts, and the wrong one gives wrong outputs without any error.
template <class M>
M load_mha(const file& f, const mha_names& names, weight_layout layout) {
  static_assert(M::storage == weights_storage::owned,
                "attnx: safetensors: load_mha fills a module that owns its weights (weights_storage::owned)");
  check_heads(f, M::heads, M::kv_heads);
  auto w = [&](auto type_tag, const std::string& name) {
    using weight = typename decltype(type_tag)::type;  // (not W: a program's global W would be shadowed)
    return layout == weight_layout::out_in ? f.load_transposed<weight>(name) : f.load<weight>(name);
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
  if constexpr (M::options.sinks) m.sinks = f.load<typename M::sinks_type>(names.sinks);
  return m;
}

// torch.nn.MultiheadAttention's state dict: <prefix>in_proj_weight (3 d_model, d_model) holding W_q, W_k, W_v
// stacked, each (out, in); <prefix>in_proj_bias (3 d_model); <prefix>out_proj.weight (d_model, d_model) (out, in);
// <prefix>out_proj.bias. (Its kdim / vdim variant with separate q_proj_weight, ... is not read.) The module must
// have heads * d_k = heads * d_v = d_model and no grouped-query heads, as nn.MultiheadAttention. Every head count
// gives these shapes: check_heads reads the file's count if it states one (PyTorch's own files do not: then the count
// compiled into M must be the module's num_heads).
template <class M>
M load_torch_multihead_attention(const file& f, const std::string& prefix = "") {
  static_assert(M::storage == weights_storage::owned,
                "attnx: safetensors: load_torch_multihead_attention fills a module that owns its weights");
  constexpr std::size_t D = M::d_model;
  static_assert(M::heads * M::d_k == D && M::heads * M::d_v == D && M::kv_heads == M::heads,
                "attnx: safetensors: nn.MultiheadAttention has heads * d_k = heads * d_v = d_model and no grouped-query "
                "heads");
  using T = typename M::value_type;
  check_heads(f, M::heads, M::kv_heads);
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

// Writes the module's parameters under these names in this layout (out_in: each weight transposed, as nn.Linear
// stores it; biases as they are; a module without biases writes only the weights), with its head counts in
// "__metadata__" (mha_metadata<M>(), over any of the same keys in `metadata`), so that load_mha with the same names
// and layout reads it back and refuses a module with other head counts. Throws what save throws.
template <class M>
void save_mha(const std::string& path, const M& m, const mha_names& names, weight_layout layout,
              std::map<std::string, std::string> metadata = {}) {
  const bool t = layout == weight_layout::out_in;
  std::vector<entry> e;
  e.push_back(make_entry(names.w_q, m.w_q, t));
  e.push_back(make_entry(names.w_k, m.w_k, t));
  e.push_back(make_entry(names.w_v, m.w_v, t));
  e.push_back(make_entry(names.w_o, m.w_o, t));
  if constexpr (M::has_bias) {
    e.push_back(make_entry(names.b_q, m.b_q));
    e.push_back(make_entry(names.b_k, m.b_k));
    e.push_back(make_entry(names.b_v, m.b_v));
    e.push_back(make_entry(names.b_o, m.b_o));
  }
  if constexpr (M::options.sinks) e.push_back(make_entry(names.sinks, m.sinks));
  for (auto& [k, v] : mha_metadata<M>()) metadata[k] = v;
  save(path, e, metadata);
}

}  // namespace attnx::safetensors

#if ATTNX_HEADER_ONLY
#include "attnx/io/impl/safetensors.hpp"
#endif
