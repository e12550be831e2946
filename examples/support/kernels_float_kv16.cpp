// The decode kernels over bf16 / f16 K and V (float queries), apart from the other float kernels (kernels_float.cpp)
// so that the two compile in parallel: theirs was about half the float kernels' compile. See
// include/attnx/kernels/instantiate.hpp.
#define ATTNX_INSTANTIATE_KV16
#include <attnx/kernels/instantiate.hpp>
