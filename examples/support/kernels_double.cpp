// The run-time kernels of attnx for double, compiled once for every test and example (ATTNX_EXTERN_KERNELS is defined for
// them and for this file by the top-level CMakeLists.txt, attnx_compiled_kernels; see include/attnx/kernels/instantiate.hpp).
#define ATTNX_INSTANTIATE_DOUBLE
#include <attnx/kernels/instantiate.hpp>
