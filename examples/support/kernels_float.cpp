// The run-time kernels of attnx for float, compiled once for every test and example (ATTNX_EXTERN_KERNELS is defined for
// them and for this file by the top-level CMakeLists.txt, attnx_compiled_kernels; see include/attnx/kernels/instantiate.hpp).
#define ATTNX_INSTANTIATE_FLOAT
#include <attnx/kernels/instantiate.hpp>
