#define MIXED_NAME run_native_flags
#define MIXED_FLAGS "-march=native"
#include "unit.inc"
