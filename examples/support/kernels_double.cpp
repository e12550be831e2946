// The run-time kernels of attnx for double, compiled once for every example (ATTNX_EXTERN_KERNELS is defined for
// the examples and for this file by examples/CMakeLists.txt; see include/attnx/kernels/instantiate.hpp).
#define ATTNX_INSTANTIATE_DOUBLE
#include <attnx/kernels/instantiate.hpp>
