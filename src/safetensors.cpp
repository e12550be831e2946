// The attnx library: reading and writing safetensors files (built where nlohmann/json is found).
#include "attnx/io/impl/safetensors.hpp"
