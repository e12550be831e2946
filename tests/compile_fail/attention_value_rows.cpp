// V with 3 rows for 5 keys: the value rule of attention, naming V, L_k and both sizes.
// expect: attnx: attention: V must have one row per key
// expect: value_rows<3>.*L_k<5>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  tensor<float, 4, 8> Q;
  tensor<float, 5, 8> K;
#ifdef ATTNX_CONTROL
  tensor<float, 5, 2> V;
#else
  tensor<float, 3, 2> V;
#endif
  tensor<float, 4, 2> out = attention(Q, K, V);
  return out(0, 0) == 0 ? 0 : 1;
}
