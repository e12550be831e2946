// A tensor of an element type .npy files are not read into here (std::uint8_t), loaded, loaded into a view and saved:
// one error naming the types that load and save, none after it (the functions go on with a placeholder dtype). The
// control does the same with bool tensors (masks, '|b1').
// expect: attnx: npy: tensors of float \('<f4'\), double \('<f8'\), std::int32_t \('<i4'\), std::int64_t \('<i8'\) and bool \('\|b1'\) can be loaded and saved, not of this element type
// expect: is_same_v<unsigned char, float>
#include <attnx/io/npy.hpp>

#include <cstdint>

#ifdef ATTNX_CONTROL
using element = bool;
#else
using element = std::uint8_t;
#endif

int main() {
  auto m = attnx::npy::load<attnx::tensor<element, 3, 3>>("mask.npy");
  auto d = attnx::npy::load<attnx::tensor<element, attnx::dyn, 3>>("mask.npy");
  element mem[9] = {};
  attnx::npy::load_into("mask.npy", attnx::view<element, 3, 3>(mem));
  attnx::npy::save("out.npy", m);
  attnx::npy::save("out_dyn.npy", d);
  return 0;
}
