// The attnx library: reading and writing .npy files.
#include "attnx/io/impl/npy.hpp"
