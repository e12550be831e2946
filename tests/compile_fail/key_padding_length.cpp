// A valid length of 5 with only 3 keys.
// expect: attnx: mask: the key padding length exceeds the number of keys
// expect: key_length<5>.*keys<3>
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 2, 3> s;
#ifdef ATTNX_CONTROL
  auto c = attnx::mask(s, attnx::key_padding<3>);
#else
  auto c = attnx::mask(s, attnx::key_padding<5>);
#endif
  (void)c;
}
