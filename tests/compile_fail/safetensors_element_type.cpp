// A tensor of an element type safetensors has no dtype for here (std::int16_t), loaded, loaded into a view and
// saved: one error naming the types that load and save, none after it (the functions go on with a placeholder dtype).
// The control loads and saves bool tensors (PyTorch's masks, BOOL), a bool matrix stored transposed included (no
// std::vector<bool> on the way).
// expect: attnx: safetensors: tensors of float \(F32\), double \(F64\), std::int32_t \(I32\), std::int64_t \(I64\) and bool \(BOOL\) can be loaded and saved, not of this element type
// expect: is_same_v<short( int)?, float>
#include <attnx/io/safetensors.hpp>

#include <cstdint>

#ifdef ATTNX_CONTROL
using element = bool;
#else
using element = std::int16_t;
#endif

int main() {
  const attnx::safetensors::file f("masks.safetensors");
  auto m = f.load<attnx::tensor<element, 4, 4>>("m");
  auto t = f.load_transposed<attnx::tensor<element, 4, 4>>("m");
  element mem[16] = {};
  f.load_into("m", attnx::view<element, 4, 4>(mem));
  attnx::safetensors::save("out.safetensors", {attnx::safetensors::make_entry("m", m, /*transposed=*/true),
                                               attnx::safetensors::make_entry("t", t)});
  return 0;
}
