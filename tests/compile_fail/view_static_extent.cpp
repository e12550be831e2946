// A static span of 10 floats viewed as 3x4.
// expect: attnx: view: the span's static extent differs from the shape's element count
#include <array>
#include <span>
#include <attnx/attnx.hpp>
int main() {
#ifdef ATTNX_CONTROL
  std::array<float, 12> mem{};
#else
  std::array<float, 10> mem{};
#endif
  attnx::view<float, 3, 4> v{std::span<float, mem.size()>(mem)};
  return v(0, 0) == 0 ? 0 : 1;
}
