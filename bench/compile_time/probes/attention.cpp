// Probe (a): one float causal attention, what a first program looks like.
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  tensor<float, seq<dyn>, d_k<64>> q(128), k(128);
  tensor<float, seq<dyn>, d_v<64>> v(128);
  tensor<float, seq<dyn>, d_v<64>> o = attention(q, k, v, causal);
  return o(0, 0) == o(0, 0) ? 0 : 1;
}
