#pragma once
// The previous activation quantizers, for the old-against-new benchmark only (act_quant_legacy.cu).
#include "backends/cuda/act_quant.hpp"
#include "backends/cuda/int8_scaled_mm.hpp"

namespace qlinear::cuda {
Status launch_act_quant_legacy(const ActQuantArgs& args, Stream stream);
Status launch_int8_act_quant_legacy(const Int8QuantArgs& args, Stream stream);
}  // namespace qlinear::cuda
