// The run-time kernels of attnx for float, compiled once for every test and example (ATTNX_EXTERN_KERNELS is defined for
// them and for this file by the top-level CMakeLists.txt, attnx_compiled_kernels; see include/attnx/kernels/instantiate.hpp).
#define ATTNX_INSTANTIATE_FLOAT
#define ATTNX_INSTANTIATE_KV16_APART  // (kernels_float_kv16.cpp)
#include <attnx/kernels/instantiate.hpp>
