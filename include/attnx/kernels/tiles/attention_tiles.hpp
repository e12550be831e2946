// attnx kernels: the attention tiles of one instruction set (a fragment: impl/tiles.hpp includes it once per
// instruction set, inside namespace attnx::kernels::detail::<isa>, which defines isa_tag).
#include "attnx/kernels/tiles/flash_tile.hpp"
#include "attnx/kernels/tiles/decode_ops.hpp"
#include "attnx/kernels/tiles/decode_general.hpp"
#include "attnx/kernels/tiles/decode_one_row.hpp"
#include "attnx/kernels/tiles/decode_four_rows.hpp"
#include "attnx/kernels/tiles/decode_few_rows.hpp"
#include "attnx/kernels/tiles/decode_kernel.hpp"
