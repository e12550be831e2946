// A header against the layer order, for the test headers.layer_order_detects: tensor/ includes eval/.
#pragma once
#include <attnx/eval/fused.hpp>
