// index_select(table, position) with a table of two axes: a position reads one entry of a rank-1 table.
// expect: attnx: index_select\(table, position\): the table must have one axis
#include <attnx/attnx.hpp>
int main() {
  attnx::tensor<float, 4, 4> q, k, v;
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 7> rel{};
#else
  attnx::tensor<float, 7, 2> rel{};
#endif
  attnx::tensor<float, 4, 4> o = attnx::softmax(q * attnx::transpose(k) + attnx::index_select(rel, attnx::k_pos - attnx::q_pos + 3)) * v;
  return o(0, 0) > 0 ? 0 : 1;
}
