#pragma once
// The simple activation quantizers (act_quant_simple.cu), bit-identical to the reference. Measured on the
// H200 against the vector kernels of act_quant.cu / int8_scaled_mm.cu in one process
// (CudaPrefillBench.DISABLED_ActQuant), they are faster for 1x128 groups (1.36-1.62 TB/s against
// 1.03-1.19 at M >= 1024, K = 4096 and 14336) and for INT8 per-token rows longer than 8192 at M >= 256
// (0.89-1.26 against 0.83-1.02 TB/s at K = 14336; where the BF16 row kernel fits one pass, it runs those rows
// instead), so those modes run here; everything else runs the vector kernels. At decode sizes (M <= kActQuantSimpleMaxM) the simple kernels run every mode: one launch of
// few threads per row beats the vector kernels' deeper blocks there (M = 16: 4.2-5.9 against 7.6-9.5 us).
#include "backends/cuda/act_quant.hpp"
#include "backends/cuda/int8_scaled_mm.hpp"

namespace qlinear::cuda {
inline constexpr int64_t kActQuantSimpleMaxM = 64;
Status launch_act_quant_simple(const ActQuantArgs& args, Stream stream);
Status launch_int8_act_quant_simple(const Int8QuantArgs& args, Stream stream);
}  // namespace qlinear::cuda
