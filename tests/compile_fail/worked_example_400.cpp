// Seed 001 prints 400 for entry (1, 2) of Q K^T. It is 9*21 + 13*17 = 410: a pipeline checked at
// compile time rejects the article's value. (The control asserts 410 and compiles.)
// expect: seed 001 prints 400 for Q K\^T\[1\]\[2\]
#include "../../examples/seed001.hpp"
#ifdef ATTNX_CONTROL
static_assert(seed001::QKt(1, 2) == 410, "seed 001 prints 400 for Q K^T[1][2]; the true value is 410");
#else
static_assert(seed001::QKt(1, 2) == 400, "seed 001 prints 400 for Q K^T[1][2]; the true value is 410");
#endif
int main() {}
