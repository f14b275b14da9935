#pragma once
// The swap-AB wgmma route of the tensor-core decode kernels (device code in mma_decode_wgmma.cuh): the same
// packed weights and exact decode as the mma.sync kernel (mma_decode.hpp, layout/mma_layout.hpp), decoded
// into wgmma's register A operand (64 weight rows per warpgroup, 128 per block), the tokens as the wgmma N
// dimension (token tiles of 64, 128 or 256), the activations, weights and scales brought into shared memory
// by one TMA each per 64-K stage through a ring fed by a producer thread. A persistent grid (at most one
// block per SM) walks the work units (128 weight rows x one split of K x one token tile) in a fixed order;
// K is split where whole units leave SMs idle (the mma.sync kernel's fixed-order reduction adds the splits).
// Every code: E4M3 (per-channel FP8, MXFP8), FP6 E2M3 / E3M2 (MXFP6) and E2M1 (MXFP4, NVFP4); MX layers whose
// scales do not fold keep the mma.sync kernel's promoted path.
#include <string>

#include "backends/cuda/mma_decode.hpp"

namespace qlinear::cuda {

// Whether this layer's weights can run here at all (MX scales folded), with the reason.
bool mma_wgmma_supports(const MmaDecodeArgs& a, std::string* why_not = nullptr);
// Whether launch_mma_decode runs the wgmma kernel for these arguments (M included; MmaDecodeForce::wgmma
// overrides the default M range).
bool mma_takes_wgmma_route(const MmaDecodeArgs& a);

// How a launch covers the work: the token tile (wgmma N), the split of K, the units and the grid.
struct MmaWgmmaPlan {
  // The shared-memory variant (mma_decode_wgmma_ss.cuh): tokens as wgmma M (128 per block), the decoded
  // weights as its N from a B tile in shared memory (128 or 256 rows per block).
  bool smem_b = false;
  int tokens = 64;
  int rows = 128;  // weight rows per unit: 128, or 256 (token tiles 64 and 128; smem_b: any)
  int splits = 1;
  int stages_per_split = 0;  // 64-K stages, even (a split starts at a k128 slab)
  int n_blocks = 0, m_tiles = 0, units = 0;
  int grid = 0;    // blocks launched: min(units, SMs) when persistent, else units
  int stages = 0;  // ring depth (0: as many as shared memory holds)
  int cluster = 1;  // 2 or 4: block clusters (units: row-block groups) share each activation box by multicast
  // Stream-K schedule (splits = 1): the first dp_units tiles whole, then sk_slabs k128 slabs (of the other
  // tiles) in `grid` equal ranges; the tiles covered in part add up in a fixup launch.
  bool stream_k = false;
  int dp_units = 0;
  int64_t sk_slabs = 0;
};
MmaWgmmaPlan mma_wgmma_plan(const MmaDecodeArgs& a);
int mma_wgmma_splits(const MmaDecodeArgs& a);
std::string mma_wgmma_description(const MmaDecodeArgs& a);
Status launch_mma_wgmma(const MmaDecodeArgs& a, Stream stream);

namespace mma_wgmma {
// Benchmark probes (MmaDecodeForce::wgmma_probe; wrong results, timing only): what a stage costs without a
// part of its work.
inline constexpr int kProbeNoDecode = 1;   // fragments not decoded (constant A operand)
inline constexpr int kProbeNoWeights = 2;  // weight and scale copies not issued (stale shared memory decoded)
Status launch_e4m3(const MmaDecodeArgs& a, const MmaWgmmaPlan& p, float* partial, Stream stream);
Status launch_fp6(const MmaDecodeArgs& a, const MmaWgmmaPlan& p, float* partial, Stream stream);
Status launch_e2m1(const MmaDecodeArgs& a, const MmaWgmmaPlan& p, float* partial, Stream stream);
// The shared-memory variant's launches (mma_decode_wgmma_ss_<code>.cu).
inline constexpr int kSmemBTokens = 128;
Status launch_ss_e4m3(const MmaDecodeArgs& a, const MmaWgmmaPlan& p, float* partial, Stream stream);
Status launch_ss_fp6(const MmaDecodeArgs& a, const MmaWgmmaPlan& p, float* partial, Stream stream);
Status launch_ss_e2m1(const MmaDecodeArgs& a, const MmaWgmmaPlan& p, float* partial, Stream stream);
}  // namespace mma_wgmma

}  // namespace qlinear::cuda
