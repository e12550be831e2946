// The run-time kernels of attnx for float, compiled once for every example (ATTNX_EXTERN_KERNELS is defined for
// the examples and for this file by examples/CMakeLists.txt; see include/attnx/kernels/instantiate.hpp).
#define ATTNX_INSTANTIATE_FLOAT
#include <attnx/kernels/instantiate.hpp>
