#pragma once
// The tensor-core decode GEMM for small M (sm_90a): y[M, N] = x[M, K] W^T with the weights decoded in
// registers to BF16 right before mma.sync m16n8k16 (FP32 accumulation); x is BF16.
//
// Operands (made by process_weights_after_loading, layouts in layout/mma_layout.hpp):
//   w          packed codes, MmaLayout
//   w_scale    packed E8M0 (kMx32) or E4M3 (kNv16) block scales; null for kRow
//   row_factor MmaFactor [N] (mma_epilogue_math.hpp) applied to the FP32 sum in the epilogue: kRow the
//              per-channel (or per-tensor) f32 scale as a multiplier, kNv16 the reciprocal of g / 2^8;
//              null for kMx32
//   x          BF16 [M, ld_x], K % 8 == 0, ld_x % 8 == 0, 16-byte aligned
//   x_factor   MmaFactor of the activations (quantized activations whose scale does not fold into their
//              BF16 values: act_quant_bf16.hpp; device memory the activation pass writes), token m's at
//              x_factor[m * x_factor_stride] (stride 0: one for the call); null: none
// Numerics (exactness argument in mma_decode.cuh): every weight value (code times block scale) is exact in
// BF16 when `fold` holds, else the block scale multiplies the FP32 partial sum of its 32-wide group; the
// products in the tensor core are exact and summed in FP32. The epilogue is f64 (mma_epilogue_math.hpp): the
// sum times the row and activation factors (NVFP4: divided by the exact global scales, correctly rounded),
// plus bias, then one rounding to the output dtype, so an output whose FP32 sum is exact (one product per
// output, as through an identity layer) equals the reference's.
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_util.hpp"
#include "backends/cuda/layout/mma_layout.hpp"
#include "backends/cuda/mma_epilogue_math.hpp"
#include "backends/cuda/tuning/mma_decode_table.hpp"
#include "qlinear/formats.hpp"

namespace qlinear::cuda {

struct MmaDecodeArgs {
  MmaLayout layout;
  bool fold = true;  // kMx32: every block scale folds exactly into the BF16 weights (mma_fold_range)
  const uint8_t* w = nullptr;
  const uint8_t* w_scale = nullptr;
  const MmaFactor* row_factor = nullptr;
  const void* x = nullptr;
  int64_t ld_x = 0;
  const MmaFactor* x_factor = nullptr;
  int64_t x_factor_stride = 0;
  int64_t m = 0;
  const void* bias = nullptr;
  DType bias_dtype = DType::kF32;
  void* out = nullptr;
  DType out_dtype = DType::kBF16;
  int sm_count = 132;
  // Launched right after the kernel that writes x (the activation pass): a programmatic dependent launch,
  // whose first weight loads overlap that kernel (mma_decode.cuh waits for it before it reads x).
  bool programmatic = false;
  // The GPU's name (cudaDeviceProp::name, from the layer state): the key of the tuned table
  // (tuning/mma_decode_table.hpp); null: the built-in rules only.
  const char* device_name = nullptr;
};

// A tile configuration: the block covers 64 * n16_per_warp weight rows and 8 * token_tiles tokens, with
// `stages` cp.async stages of 256 K.
struct MmaTileConfig {
  int max_m;         // the M bucket's upper end
  int token_tiles;   // 8-token MMA columns per block (1, 2 or 8)
  int n16_per_warp;  // 16-row A tiles per warp (1 or 2)
  int stages;
};

// The tile configuration of each M bucket (mma_decode.cpp; the last bucket also runs larger M, in 64-token
// tiles).
const MmaTileConfig& mma_tile_config(int64_t m);
inline constexpr int64_t kMmaDecodeMaxM = 64;  // the M range the kernel is built for
// Above this M a layer whose weights widen exactly (every scale kind but promoted MX) is widened to BF16 per
// call and multiplied by cuBLASLt (mma_widen.cu): the MMA kernel's 64-token tiles re-decode the weights per
// tile and lose to it there (H200, M = 256: 70B down_proj W8 522 us in 64-token tiles, 361 us widened).
inline constexpr int64_t kMmaWidenAboveM = 128;

// Range of E8M0 scale bytes for which the folded BF16 weight (code * 2^(s - 127)) is a normal BF16 number
// and the decode constant is one: lo..hi inclusive.
void mma_fold_range(MmaCode code, int& lo, int& hi);

// The split of K over blocks launch_mma_decode would use for (args, M): exposed for the explain output.
int mma_decode_splits(const MmaDecodeArgs& a);
// The configuration a launch uses: the table's bucket for M, or the 64-token one for MX layers whose scales
// are promoted (the only configuration instantiated for them).
MmaTileConfig mma_config_for(const MmaDecodeArgs& a);
// Benchmark and test overrides of the choices launch_mma_decode makes (not thread-safe against running
// applies; every field 0 = the table / heuristic). One process times the variants side by side with them.
enum class MmaSmallMKernel : uint8_t { kTable, kPipelined, kRegisters };
enum class MmaWidenKind : uint8_t { kTable, kFragments, kGather };
// How the pipelined kernel's K splits add up: in a thread-block cluster (one launch) or through FP32
// partial sums and a second launch (mma_decode_reduce_kernel); both in split order, the same result.
enum class MmaSplitReduce : uint8_t { kTable, kCluster, kPartials };
struct MmaDecodeForce {
  int splits = 0;                                         // split-K count
  int stages = 0;                                         // pipelined kernel, M <= 16: 4, or 3 (64-row blocks)
  int n16_per_warp = 0;                                   // pipelined kernel, M <= 16: 1 or 2
  MmaSmallMKernel small_m = MmaSmallMKernel::kTable;      // M <= 16: cp.async pipeline or registers
  int register_depth = 0;                                 // registers kernel: slabs in flight per warp (2, 4)
  bool no_cluster_reduce = false;                         // registers kernel: split-K through partial sums
  int64_t widen_above_m = 0;                              // the M above which the widen route runs; -1: never
  MmaWidenKind widen = MmaWidenKind::kTable;              // how the widen route makes BF16
  int64_t widen_block_mib = 0;                            // BF16 row-block size in MiB; -1: the whole weight
  int large_m_config = 0;                                 // M > 16: 1 = 64 tokens x 64 rows, 2 = 64 x 128
  int wgmma = 0;                                          // M > 16: 1 = the swap-AB wgmma kernel, -1 = never
  int wgmma_tokens = 0;                                   // its token tile (64, 128, 256; 0 = by M)
  int wgmma_rows = 0;                                     // its weight rows per unit (128, or 256 at 64 tokens)
  int wgmma_smem_b = 0;                                   // 1: its shared-memory variant (tokens as wgmma M)
  int wgmma_stages = 0;                                   // its ring depth (0: what shared memory holds)
  int wgmma_cluster = 0;                                  // its blocks sharing x by multicast (2 or 4; else 1)
  int wgmma_stream_k = 0;                                 // its schedule: 1 = stream-K, else split-K
  int wgmma_persist = 0;                                  // its grid: -1 = a block per unit, N > 0 = at most N
  bool wgmma_no_hint = false;                             // its TMA loads without L2 hints (weights evict first)
  bool wgmma_drain = false;                               // its wgmma groups all retired every 4 stages
  int wgmma_probe = 0;                                    // benchmark probes (mma_wgmma::kProbe*: wrong results)
  int small_m_probe = 0;                                  // the pipelined kernel's probes, M <= 16 (MXFP4 only;
                                                          // mma_detail::kProbe*: wrong results)
  MmaSplitReduce split_reduce = MmaSplitReduce::kTable;   // pipelined kernel, M <= 16
  bool no_programmatic = false;                           // quantized activations: plain launch after the pass
  bool no_l2_streaming = false;                           // M <= 16: weights without the L2 streaming window
  bool no_tuned_table = false;                            // M > 16: the built-in rules, not the tuned table
  int mx_fp8_block = 0;                                   // MX activations: 1 = the FP8 block route at every M
                                                          // (layers whose plan fits), -1 = never
  int mx_fp8_probe = 0;                                   // its benchmark probes: stages skipped (wrong results;
                                                          // mx_fp8_block.hpp kProbe*)
  bool operator==(const MmaDecodeForce&) const = default;
};
void mma_decode_force(const MmaDecodeForce& f);
const MmaDecodeForce& mma_decode_forced();

// The tuned table's choice for these arguments (M > 16): the entry for a.device_name, the layer's code and
// shape and M's bucket, when nothing is forced (every MmaDecodeForce field at its default) and the entry
// names a route (not the built-in rule); else null, and the built-in rules decide.
const MmaDecodeTunedEntry* mma_tuned_choice(const MmaDecodeArgs& a);
// The forced variant that runs exactly what an entry says (kRule: the built-in rules, the table skipped):
// `qlinear tune --decode` times each candidate through it.
MmaDecodeForce mma_decode_force_of(const MmaDecodeTunedEntry& e);

// What launch_mma_decode runs for these arguments (M included), in words, for explain: the kernel, its tile,
// the split of K and how the splits add up, or the widen route.
std::string mma_route_description(const MmaDecodeArgs& a);
// The upper ends of the M buckets where that description can change for this layer (the last bucket is
// open): the built-in rules' and the tuned table's for a.device_name.
std::vector<int64_t> mma_route_bucket_ends(const MmaDecodeArgs& a);

// Whether launch_mma_decode takes the widening route for these arguments.
bool mma_takes_widen_route(const MmaDecodeArgs& a);
Status launch_mma_widen_gemm(const MmaDecodeArgs& a, Stream stream);
// Whether M <= 16 runs the registers kernel (weights loaded straight into registers, mma_decode_regs.cuh).
bool mma_takes_registers_kernel(const MmaDecodeArgs& a);
// Whether the pipelined kernel's K splits for these arguments add up in a thread-block cluster (M <= 16).
bool mma_split_in_cluster(const MmaDecodeArgs& a);

// Runs the GEMM on `stream`: no synchronization; split-K partial sums go to stream-ordered scratch
// (cudaMallocAsync, which a CUDA graph captures as an allocation node) and are summed in a fixed order.
Status launch_mma_decode(const MmaDecodeArgs& a, Stream stream);

inline constexpr int kMmaMaxClusterSplits = 8;

namespace mma_detail {
// One instantiation family per weight code (one .cu file each).
Status launch_e4m3(const MmaDecodeArgs& a, const MmaTileConfig& t, int splits, float* partial, Stream stream);
Status launch_fp6(const MmaDecodeArgs& a, const MmaTileConfig& t, int splits, float* partial, Stream stream);
Status launch_e2m1(const MmaDecodeArgs& a, const MmaTileConfig& t, int splits, float* partial, Stream stream);
// The registers kernel: token tiles 1 or 2, `depth` slabs in flight; partial null with splits > 1: the
// splits add up inside a thread-block cluster (splits <= kMmaMaxClusterSplits).
Status launch_regs_e4m3(const MmaDecodeArgs& a, int token_tiles, int depth, int splits, float* partial, Stream stream);
Status launch_regs_fp6(const MmaDecodeArgs& a, int token_tiles, int depth, int splits, float* partial, Stream stream);
Status launch_regs_e2m1(const MmaDecodeArgs& a, int token_tiles, int depth, int splits, float* partial, Stream stream);
// Adds the [splits][M][N] FP32 partial sums in split order and writes the output through the epilogue (row
// factor, activation factor, bias): a programmatic dependent launch after the GEMM that writes them.
Status launch_mma_decode_reduce(const MmaDecodeArgs& a, int splits, const float* partial, Stream stream);
// MX E2M1 / E2M3 / E3M2 weights widened to row-major E4M3 [N, K] (K % 128 == 0), each 128 x 128 block
// divided by 2^blk_exp[block] (mx_fp8_block_math.hpp: exact for a layer whose plan is ok) (mma_widen.cu).
Status widen_fp8(const MmaDecodeArgs& a, const int32_t* blk_exp, uint8_t* out, Stream stream);
}  // namespace mma_detail

}  // namespace qlinear::cuda
