// softmax over the query axis of (seq_q, seq_k) scores: softmax runs along the last axis only.
// expect: attnx: softmax: the requested axis is not the last axis
// expect: requested_axis<attnx::names::seq_q>.*last_axis<attnx::names::seq_k>
#include <attnx/attnx.hpp>
using namespace attnx;
int main() {
  tensor<float, seq_q<3>, seq_k<5>> s;
#ifdef ATTNX_CONTROL
  auto p = softmax<names::seq_k>(s);
#else
  auto p = softmax<names::seq_q>(s);
#endif
  (void)p;
}
