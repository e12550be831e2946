#define MIXED_NAME run_avx2_flags
#define MIXED_FLAGS "-mavx2 -mfma"
#include "unit.inc"
