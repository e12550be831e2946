// The kernels of the extern_kernels test program, instantiated once (see main.cpp).
#include <attnx/kernels/instantiate.hpp>
