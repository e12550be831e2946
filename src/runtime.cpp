// The attnx library: its non-template run-time functions (CPU detection, the thread pool, the execution context,
// the tensors' memory, messages).
#include "attnx/exec/impl/context.hpp"
#include "attnx/exec/impl/memory.hpp"
#include "attnx/exec/impl/thread_pool.hpp"
#include "attnx/shape/impl/format.hpp"
#include "attnx/simd/impl/isa.hpp"
