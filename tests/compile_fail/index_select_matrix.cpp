// index_select from a rank-3 table.
// expect: attnx: index_select: the table must be a matrix \(rows, cols\)
#include <attnx/attnx.hpp>
#include <vector>
int main() {
  const std::vector<int> ids{0, 1};
#ifdef ATTNX_CONTROL
  attnx::tensor<float, 4, 8> table;
#else
  attnx::tensor<float, 2, 4, 8> table;
#endif
  attnx::tensor<float, attnx::dyn, 8> y = attnx::index_select(table, ids);
  return y(0, 0) > 0 ? 0 : 1;
}
