// attnx kernels: the attention tiles (prefill and decode), once per instruction set.
#pragma once

#include "attnx/kernels/impl/score_plan.hpp"
#include "attnx/kernels/tuning.hpp"

#define ATTNX_PER_ISA_FRAGMENT "attnx/kernels/tiles/attention_tiles.hpp"
#include "attnx/kernels/impl/per_isa.hpp"
