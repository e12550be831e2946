#define MIXED_NAME run_default_flags
#define MIXED_FLAGS "(no -m flags)"
#include "unit.inc"
