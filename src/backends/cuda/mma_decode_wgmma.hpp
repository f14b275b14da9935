#pragma once
// The swap-AB wgmma route of the tensor-core decode kernels (device code in mma_decode_wgmma.cuh): the same
// packed weights and exact decode as the mma.sync kernel (mma_decode.hpp, layout/mma_layout.hpp), decoded
// into wgmma's register A operand (64 weight rows per warpgroup, 128 per block), the tokens as the wgmma N
// dimension (token tiles of 32, 64, 128 or 256), the activations brought into shared memory by TMA, the weights
// by bulk copies, through a multi-stage ring fed by a producer warp; split-K over blocks where the N blocks
// alone leave SMs idle (the mma.sync kernel's fixed-order reduction adds the splits).
// E4M3 (per-channel FP8, MXFP8) and E2M1 (MXFP4, NVFP4) weights; MX layers whose scales do not fold keep
// the mma.sync kernel's promoted path.
#include <string>

#include "backends/cuda/mma_decode.hpp"

namespace qlinear::cuda {

// Whether this layer's weights can run here at all (codes E4M3 / E2M1, MX scales folded), with the reason.
bool mma_wgmma_supports(const MmaDecodeArgs& a, std::string* why_not = nullptr);
// Whether launch_mma_decode runs the wgmma kernel for these arguments (M included; MmaDecodeForce::wgmma
// overrides the default M range).
bool mma_takes_wgmma_route(const MmaDecodeArgs& a);
// The token tile (wgmma N) and split-K count a launch uses.
int mma_wgmma_tokens(const MmaDecodeArgs& a);
int mma_wgmma_splits(const MmaDecodeArgs& a);
std::string mma_wgmma_description(const MmaDecodeArgs& a);
Status launch_mma_wgmma(const MmaDecodeArgs& a, Stream stream);

namespace mma_wgmma {
Status launch_e4m3(const MmaDecodeArgs& a, int tokens, int splits, float* partial, Stream stream);
Status launch_e2m1(const MmaDecodeArgs& a, int tokens, int splits, float* partial, Stream stream);
}  // namespace mma_wgmma

}  // namespace qlinear::cuda
