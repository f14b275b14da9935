#pragma once
// Device code of the swap-AB wgmma decode GEMM (mma_decode_wgmma.hpp says where it runs): y^T = W x^T with
// the weights decoded in registers as wgmma's A operand (64 weight rows per warpgroup) and the tokens as its
// N dimension (BN = 64, 128 or 256 per block), B = the activation tile in shared memory.
//
// Block: two math warpgroups (warps 0..7) and a producer warpgroup (warps 8..11: one thread issues the
// copies; the warpgroup exists to hand its registers to the math warps). A unit is 128 weight rows (SUB = 1:
// warpgroup g owns rows 64 g .. 64 g + 63, warp w of it the n16 tile 4 g + w % 4) or 256 (SUB = 2, 64-token
// tiles only: each warp decodes two tiles, each warpgroup keeps two accumulator sets; half the activation
// traffic per weight byte) by one token tile. The grid is persistent (at most one block per SM); producer
// and math warps walk the same segments (segment_at: a unit's K range, or a part of it) in the same order,
// so the producer fills the ring across a segment's end while the math warps write its outputs. Segments
// come from the split-K schedule (units b, b + grid, ...; splits add up in mma_decode_reduce_kernel) or the
// stream-K one (Walk). Each segment's K range is walked in stages of 64 K through a ring in shared memory,
// each stage
//
//   [ x: BN token rows x 64 BF16 (128 bytes), 128B-swizzled by TMA ]
//   [ w: the unit's tiles x the stage's bytes of each tile's k128 unit ][ s: their scale records ]
//
// brought by three TMA copies completing on the stage's `full` barrier: the x box from a 2-D map of x (rows
// >= M and columns >= K read as zeros), the weights from a 3-D map over [n16 tile][unit chunk][chunk bytes]
// (half a unit for E4M3 and E2M1; for FP6, whose halves span 1.5 of a unit's three 512-byte pieces, pieces
// h and h + 1), the scale records from a 3-D map over [n16 tile][slab][records] (tiles past N read as
// zeros; their rows are discarded). Math warps read their lane's words, decode them exactly as
// mma_decode.cuh does (decode_group: bit placement and one mul.rn.bf16x2 by the power of two or NVFP4
// factor) into four 64x16 A fragments per tile, and issue four wgmma m64nBNk16 per row group on the stage's
// x tile as one commit group. The fragments of stage i are read by the tensor cores until that group
// completes, so stages alternate between two fragment sets: while group i runs, the warps decode stage
// i + 1 into the other set; `wgmma.wait_group 1` after issuing it retires group i - 1 and frees its ring
// slot (each math warp arrives on `empty`). The FP32 accumulators stay in registers across the segment;
// its epilogue applies the row and activation factors and bias in f64 (epilogue_factor / epilogue_value, as
// the mma.sync kernel) or writes FP32 sums for the split-K reduction or the stream-K fixup.
//
// Numerics are the mma.sync kernel's (mma_decode.cuh): exact BF16 weights (MX scales folded; layers whose
// scales do not fold never come here), exact products, FP32 accumulation.
#include <cuda.h>

#include <type_traits>

#include "backends/cuda/mma_decode.cuh"
#include "backends/cuda/mma_decode_wgmma.hpp"
#include "backends/cuda/wgmma_bf16_rs.cuh"
#include "backends/cuda/wgmma_pipeline.cuh"

namespace qlinear::cuda::mma_wgmma {

using mma_detail::CodeTraits;

constexpr int kMathWarpgroups = 2;
constexpr int kProducerWarp = 4 * kMathWarpgroups;  // the first warp of the producer warpgroup
constexpr int kThreads = 128 * kMathWarpgroups + 128;
// Registers per thread after setmaxnreg: ptxas caps a 384-thread block at 168 at entry, too few for the
// 128 accumulators of a 256-token tile with two fragment sets (the wgmmas would be serialized, C7511); the
// producer warpgroup gives its registers to the math warpgroups (128 x 40 + 256 x 232 <= 64 K).
constexpr int kProducerRegs = 40, kMathRegs = 232;
constexpr int kStageK = 64;  // half a k128 slab: one 128-byte row of BF16 per token
constexpr int kSmemBudget = 200 * 1024;
constexpr int kMaxStages = 16;

template <MmaCode C>
inline constexpr bool kIsFp6 = C == MmaCode::kE2M3 || C == MmaCode::kE3M2;

// SUB: m64 row groups per math warpgroup (1: 128 weight rows per unit, 2: 256, each warp decoding two tiles
// and each warpgroup keeping two accumulator sets).
template <MmaCode C, MmaScale S, int BN, int SUB>
struct Shape {
  static_assert(BN % 8 == 0 && BN >= 8 && BN <= 256, "wgmma N");
  static_assert(SUB == 1 || SUB == 2, "one or two m64 row groups per warpgroup");
  static constexpr int kTiles = 4 * kMathWarpgroups * SUB;  // n16 tiles per unit
  static constexpr int kUnitBytes = 32 * 4 * CodeTraits<C>::kWords;  // a k128 unit of one n16 tile
  static constexpr int kChunk = kIsFp6<C> ? 512 : kUnitBytes / 2;    // the weight map's rows
  static constexpr int kChunksPerUnit = kUnitBytes / kChunk;          // 2 (E4M3, E2M1) or 3 (FP6)
  static constexpr int kChunksPerStage = kIsFp6<C> ? 2 : 1;
  static constexpr int kTileBytes = kChunk * kChunksPerStage;  // one tile's weight bytes in a stage
  static constexpr int kLaneWords = kTileBytes / 128;          // a lane's words of them (8 or 4)
  static constexpr int kRec = static_cast<int>(mma_scale_record_bytes(S));
  static constexpr int kXBytes = BN * 128;
  static constexpr int kWBytes = kTiles * kTileBytes;
  static constexpr int kUnitRecBytes = static_cast<int>(kMmaScaleRecords) * kRec;  // a unit's scale records
  static constexpr int kSBytes = kTiles * kUnitRecBytes;
  static constexpr int kLoadBytes = kXBytes + kWBytes + kSBytes;   // what a stage's copies bring (tx count)
  static constexpr int kStageBytes = (kLoadBytes + 1023) / 1024 * 1024;  // padded: x tiles 1024-aligned
  static constexpr int kStagesFit = kSmemBudget / kStageBytes < kMaxStages ? kSmemBudget / kStageBytes : kMaxStages;
  static constexpr int kSmem = kStagesFit * kStageBytes + 2 * kMaxStages * 8 + 1024;  // + barriers, alignment
  static_assert(kStageBytes % 1024 == 0, "every stage's x tile 1024-byte aligned (128B swizzle)");
  static_assert(kStagesFit >= 2, "shared memory for two stages");
};

// What a launch walks (mma_decode_wgmma.hpp, MmaWgmmaPlan). Split-K schedule (stream_k = 0): unit u is row
// block u % n_blocks, split (u / n_blocks) % splits, token tile u / (n_blocks splits), block b takes units
// b, b + grid, ..., so the blocks running at once share a token tile and a K range (their x boxes hit the
// same L2 lines). Stream-K schedule: the first dp_units tiles (row block, token tile) whole, block b taking
// b, b + grid, ...; then the k128 slabs of the remaining tiles, laid end to end, in `grid` equal contiguous
// ranges, one per block: a block's range covers the end of one tile, whole tiles, and the start of another;
// a tile it covers in part goes to a piece buffer (its first such segment at slot 2 b, its last at 2 b + 1)
// and mma_wgmma_streamk_fixup adds the pieces of each tile in block order.
struct Walk {
  int units, n_blocks, splits, stages_per_split, total_stages, stages, probe, hint, drain;
  int cluster;  // 2 or 4: block groups share each activation box (split-K schedule; units count row-block groups)
  int stream_k, dp_units;
  int64_t sk_slabs;  // slabs of the stream-K tiles
};

// The first slab of block c's stream-K range (32-bit: the plan keeps sk_slabs x grid below 2^31).
__host__ __device__ inline int sk_range_start(int64_t sk_slabs, int grid, int c) {
  return static_cast<int>(static_cast<uint32_t>(sk_slabs) * static_cast<uint32_t>(c) / static_cast<uint32_t>(grid));
}

// One contiguous piece of a block's work: `steps` stages from stage kst0 of tile (row block b, token tile
// z); piece < 0: the whole K of the tile (the epilogue writes the output), else the split (split-K) or the
// piece slot (stream-K) its FP32 sums go to.
struct Segment {
  int b, z, split, kst0, steps, piece;
};

// Segment i of this block's walk (false past its end): producer and math warps walk the same segments in
// the same order.
__device__ __forceinline__ bool segment_at(const Walk& wk, int i, Segment& sg) {
  const int c = blockIdx.x, grid = gridDim.x;
  if (!wk.stream_k) {
    // With block groups (clusters of 2 or 4), unit u is a group of row blocks: block c takes row block
    // cluster (u % groups) + c % cluster of the group units c / cluster, c / cluster + grid / cluster, ...
    // (a last group short of row blocks takes some past N: zeros, discarded).
    const int pairs = (wk.n_blocks + wk.cluster - 1) / wk.cluster;
    const int u = c / wk.cluster + i * (grid / wk.cluster);
    if (u >= wk.units) return false;
    sg.b = wk.cluster * (u % pairs) + c % wk.cluster;
    sg.split = (u / pairs) % wk.splits;
    sg.z = u / (pairs * wk.splits);
    sg.kst0 = sg.split * wk.stages_per_split;
    sg.steps = min(wk.stages_per_split, wk.total_stages - sg.kst0);
    sg.piece = wk.splits > 1 ? sg.split : -1;
    return true;
  }
  const int dp = c < wk.dp_units ? (wk.dp_units - c + grid - 1) / grid : 0;  // this block's whole tiles
  const int k_slabs = wk.total_stages / 2;
  int unit, s0 = 0, s1 = k_slabs, piece = -1;
  if (i < dp) {
    unit = c + i * grid;
  } else {
    // Slab counts fit 32 bits (a 2^31-slab layer would hold 2^38 weights per row block).
    const int lo = sk_range_start(wk.sk_slabs, grid, c), hi = sk_range_start(wk.sk_slabs, grid, c + 1);
    const int j = i - dp, tile = lo / k_slabs + j;
    const int start = j == 0 ? lo : tile * k_slabs, end = min(hi, (tile + 1) * k_slabs);
    if (start >= end) return false;
    unit = wk.dp_units + tile;
    s0 = start - tile * k_slabs;
    s1 = end - tile * k_slabs;
    if (s0 != 0 || s1 != k_slabs) piece = 2 * c + (j == 0 ? 0 : 1);
  }
  sg.b = unit % wk.n_blocks;
  sg.z = unit / wk.n_blocks;
  sg.split = 0;
  sg.kst0 = 2 * s0;
  sg.steps = 2 * (s1 - s0);
  sg.piece = piece;
  return true;
}

// L2 eviction priorities of TMA loads (the cache-policy encodings CUTLASS passes for sm_90): the weights are
// read once, the activation boxes by every block (measured on the H200: 0-4% faster than no hints at M = 64
// and 256 on the 70B layers, never slower).
constexpr uint64_t kEvictFirst = 0x12F0000000000000ull, kEvictLast = 0x14F0000000000000ull;

// The producer's copies and barrier operations on 32-bit shared-window addresses.
namespace sa {
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra.uni WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// A box of a 2-D tensor map at (c0, c1) (out of range: zeros), completing on `bar`; with `hint`, the L2
// eviction priority `policy`.
__device__ __forceinline__ void tma_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, bool hint,
                                       uint64_t policy) {
  if (hint) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%3, "
        "%4}], [%2], %5;" ::"r"(dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1), "l"(policy)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
            dst),
        "l"(map), "r"(bar), "r"(c0), "r"(c1)
        : "memory");
  }
}
// A box of a 3-D tensor map at (0, c1, c2).
__device__ __forceinline__ void tma_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c1, int c2, bool hint,
                                       uint64_t policy) {
  if (hint) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%3, "
        "%4, %5}], [%2], %6;" ::"r"(dst),
        "l"(map), "r"(bar), "r"(0), "r"(c1), "r"(c2), "l"(policy)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
        "[%2];" ::"r"(dst),
        "l"(map), "r"(bar), "r"(0), "r"(c1), "r"(c2)
        : "memory");
  }
}
// This block's share of the x box (clusters): into every block of the cluster (`mask`) at the same offsets.
__device__ __forceinline__ void tma_2d_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                                 uint16_t mask, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster.L2::cache_hint "
      "[%0], [%1, {%3, %4}], [%2], %5, %6;" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "h"(mask), "l"(policy)
      : "memory");
}
// Arrive on the barrier at the same offset in block `rank` of the cluster.
__device__ __forceinline__ void arrive_remote(uint32_t bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
}  // namespace sa

// The producer thread (lane 0 of the first producer warp): for every segment of this block's walk, each
// 64-K stage's copies into the next ring slot once the math warps released it -- the x box (kTokens rows
// from the segment's token tile; in clusters a share of its rows each, multicast), the weights and the scale
// records of the unit's kTiles tiles -- completing on the slot's `full` barrier. Sh: the kernel's stage
// layout (kXBytes, kWBytes, kLoadBytes, kStageBytes, kTiles, kChunksPerUnit, kRec).
template <class Sh, int kTokens>
__device__ __forceinline__ void produce(const Walk& wk, uint8_t* smem, uint64_t* full, uint64_t* empty,
                                        const CUtensorMap& map_x, const CUtensorMap& map_w,
                                        const CUtensorMap& map_s) {
  const bool weights = (wk.probe & kProbeNoWeights) == 0;
  const uint32_t bytes = weights ? Sh::kLoadBytes : Sh::kXBytes;
  // 32-bit shared-window addresses: the producer runs on 40 registers.
  const uint32_t ring = wgmma::smem_addr(smem), full0 = wgmma::smem_addr(full), empty0 = wgmma::smem_addr(empty);
  int slot = 0;
  uint32_t phase = 0;
  Segment sg;
  for (int seg = 0; segment_at(wk, seg, sg); ++seg) {
    const int row0 = sg.z * kTokens, tile0 = sg.b * Sh::kTiles;
    for (int kst = sg.kst0; kst < sg.kst0 + sg.steps; ++kst) {
      const int slab = kst / 2, half = kst & 1;
      const uint32_t st = ring + slot * Sh::kStageBytes, bar = full0 + 8 * slot;
      sa::wait(empty0 + 8 * slot, phase ^ 1);  // a fresh barrier counts as released
      sa::expect_tx(bar, bytes);
      if (wk.cluster > 1) {  // a share of the box rows each, multicast to every block of the cluster
        const int r = static_cast<int>(blockIdx.x) % wk.cluster, rows = kTokens / wk.cluster;
        sa::tma_2d_multicast(st + r * rows * 128, &map_x, bar, kst * kStageK, row0 + r * rows,
                             static_cast<uint16_t>((1u << wk.cluster) - 1), kEvictLast);
      } else {
        sa::tma_2d(st, &map_x, bar, kst * kStageK, row0, wk.hint, kEvictLast);
      }
      if (weights) {
        sa::tma_3d(st + Sh::kXBytes, &map_w, bar, slab * Sh::kChunksPerUnit + half, tile0, wk.hint, kEvictFirst);
        if constexpr (Sh::kRec > 0) {
          sa::tma_3d(st + Sh::kXBytes + Sh::kWBytes, &map_s, bar, slab, tile0, wk.hint, kEvictFirst);
        }
      }
      if (++slot == wk.stages) {
        slot = 0;
        phase ^= 1;
      }
    }
  }
}

// The decode factors f[h][row half] of K group 2 half + ql of the lane's k128 unit (mma_decode.cuh,
// decode_group; kMx32: folding layers only). rec[0] / rec[1]: the scale-record word of rows g / g + 8 that
// holds this half's groups, shifted so that they start at byte 0.
template <MmaCode C, MmaScale S>
__device__ __forceinline__ void group_factors(const uint32_t (&rec)[2], int ql, uint32_t (&f)[2][2]) {
  constexpr int kBias = CodeTraits<C>::kBias;
  if constexpr (S == MmaScale::kRow) {
    f[0][0] = f[0][1] = f[1][0] = f[1][1] = mma_detail::bf16_pow2_pair(kBias + 127);
  } else if constexpr (S == MmaScale::kMx32) {  // E8M0 byte ql of each row's word
    f[0][0] = f[1][0] = mma_detail::bf16_pow2_pair(kBias + static_cast<int>((rec[0] >> (8 * ql)) & 0xFF));
    f[0][1] = f[1][1] = mma_detail::bf16_pow2_pair(kBias + static_cast<int>((rec[1] >> (8 * ql)) & 0xFF));
  } else {  // kNv16: the E4M3 byte of 16-wide group 2 ql + h
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int rh = 0; rh < 2; ++rh) {
        const uint32_t code = (rec[rh] >> (8 * (2 * ql + h))) & 0xFF;
        const float v = codec::decode_e4m3(code) * 0x1p118f;
        f[h][rh] = static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(v))) * 0x00010001u;
      }
    }
  }
}

// One tile's share of a stage (half HALF of a k128 slab) decoded into the four k16 A fragments af[kk]: the
// tile's kLaneWords words per lane at `words` ([piece][lane][16 bytes]), its unit's scale records at `recs`
// (kRec bytes per row pair). Both kernels (this one and the shared-memory B kernel, mma_decode_wgmma_ss.cuh).
template <MmaCode C, MmaScale S, int HALF, int kLaneWords, int kRec>
__device__ __forceinline__ void decode_tile_words(const uint8_t* words, const uint8_t* recs, int lane,
                                                  uint32_t e2m1_lo, uint32_t (&af)[4][4]) {
  uint32_t w[kLaneWords];
#pragma unroll
  for (int p = 0; p < kLaneWords / 4; ++p) {  // [piece][lane][16 bytes]
    const uint4 v = *reinterpret_cast<const uint4*>(words + p * 512 + lane * 16);
    w[4 * p] = v.x;
    w[4 * p + 1] = v.y;
    w[4 * p + 2] = v.z;
    w[4 * p + 3] = v.w;
  }
  // The row pair's scale record (mma_layout.hpp; the 4 lanes of a pair read the same one): kMx32 8 bytes,
  // rows g then g + 8, one byte per 32-group; kNv16 16 bytes, rows g then g + 8, one byte per 16-group. This
  // half's groups: the upper half of each MX word, or the second NVFP4 word of each row.
  uint32_t rec[2] = {0, 0};
  const uint8_t* rp = recs + (lane / 4) * kRec;
  if constexpr (S == MmaScale::kMx32) {
    const uint2 v = *reinterpret_cast<const uint2*>(rp);
    rec[0] = v.x >> (16 * HALF);
    rec[1] = v.y >> (16 * HALF);
  } else if constexpr (S == MmaScale::kNv16) {
    const uint4 v = *reinterpret_cast<const uint4*>(rp);
    rec[0] = HALF ? v.y : v.x;
    rec[1] = HALF ? v.w : v.z;
  }
  // The half's groups 2 HALF, 2 HALF + 1 start at local word 0 (E4M3, E2M1: the half unit), or at word 2 HALF
  // of pieces HALF, HALF + 1 (FP6: unit words 6 HALF .. 6 HALF + 5).
  constexpr int kFirstWord = kIsFp6<C> ? 2 * HALF : 0;
#pragma unroll
  for (int ql = 0; ql < 2; ++ql) {
    uint32_t f[2][2];
    group_factors<C, S>(rec, ql, f);
    uint32_t a2[2][4];
    mma_detail::decode_group<C>(w + kFirstWord, ql, f, a2, e2m1_lo);
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int r = 0; r < 4; ++r) af[2 * ql + h][r] = a2[h][r];
  }
}

// One stage of a math warp: its tile's words and scale record from the ring slot `st`.
template <MmaCode C, MmaScale S, int BN, int SUB, int HALF>
__device__ __forceinline__ void decode_stage(const uint8_t* st, int tile, int lane, uint32_t e2m1_lo,
                                             uint32_t (&af)[4][4]) {
  using Sh = Shape<C, S, BN, SUB>;
  decode_tile_words<C, S, HALF, Sh::kLaneWords, Sh::kRec>(st + Sh::kXBytes + tile * Sh::kTileBytes,
                                                          st + Sh::kXBytes + Sh::kWBytes + tile * Sh::kUnitRecBytes,
                                                          lane, e2m1_lo, af);
}

__device__ __forceinline__ void fence_frags(uint32_t (&af)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(af[i][r])::"memory");
}

// partial: null -> the epilogue writes out; else [splits][M][N] f32 sums (mma_decode_reduce_kernel adds them).
template <MmaCode C, MmaScale S, int BN, int SUB>
__global__ void __launch_bounds__(kThreads, 1)
    mma_wgmma_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                     const __grid_constant__ CUtensorMap map_s, const MmaDecodeArgs a, const Walk wk,
                     float* __restrict__ partial) {
  using Sh = Shape<C, S, BN, SUB>;
  extern __shared__ uint8_t smem_raw[];
  // Aligned by an offset from the shared base, so the compiler keeps shared-memory loads (LDS), not generic.
  uint8_t* smem = smem_raw + ((1024 - (wgmma::smem_addr(smem_raw) & 1023)) & 1023);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Sh::kStagesFit * Sh::kStageBytes);
  uint64_t* empty = full + kMaxStages;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == 0) {
    for (int s = 0; s < wk.stages; ++s) {
      wgmma::mbar_init(&full[s], 1);
      wgmma::mbar_init(&empty[s], 4 * kMathWarpgroups * wk.cluster);  // one arrive per math warp of the pair
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (wk.cluster > 1) {
    sa::cluster_sync();  // the partner's barriers exist before any copy or arrive reaches them
  } else {
    __syncthreads();
  }

  if (warp >= kProducerWarp) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    // Lane 0 of the first producer warp waits for a slot, arms its barrier and issues the TMA copies.
    if (warp != kProducerWarp || lane != 0) return;
    produce<Sh, BN>(wk, smem, full, empty, map_x, map_w, map_s);
    if (wk.cluster > 1) sa::cluster_sync();  // neither block leaves while the other may still arrive on it
  } else {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kMathRegs));
  // Warp w of warpgroup g decodes tile 4 SUB g + 4 sub + w % 4 for row group `sub` of the warpgroup.
  const int tile = 4 * SUB * (warp / 4) + warp % 4;
  float acc[SUB][BN / 2];
  uint32_t af0[SUB][4][4] = {}, af1[SUB][4][4] = {};
  const uint32_t e2m1_lo = C == MmaCode::kE2M1 ? mma_detail::e2m1_table_lo() : 0u;  // decode_group's prmt table
  const bool decode = (wk.probe & kProbeNoDecode) == 0;
  int slot = 0, prev = -1;
  uint32_t phase = 0;
  // A ring slot is free once every math warp of the cluster is done with it (each block writes its share of
  // the x box into all of them).
  auto release = [&](int s) {
    wgmma::mbar_arrive(&empty[s]);
    if (wk.cluster > 1) {
      uint32_t own;  // read here, not kept in a register across the K loop
      asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(own));
      for (int r = 1; r < wk.cluster; ++r) {
        sa::arrive_remote(wgmma::smem_addr(&empty[s]), (own + r) & static_cast<uint32_t>(wk.cluster - 1));
      }
    }
  };

  // One stage (half HALF of its slab): decode into `af` (the set whose group retired at the previous
  // step), issue its four wgmmas, then retire the previous stage's group and release that ring slot.
  auto step = [&](auto half_c, uint32_t(&af)[SUB][4][4]) {
    constexpr int kHalf = decltype(half_c)::value;
    const uint8_t* st = smem + slot * Sh::kStageBytes;
    wgmma::mbar_wait(&full[slot], phase);
#pragma unroll
    for (int sub = 0; sub < SUB; ++sub) {
      if (decode) {
        decode_stage<C, S, BN, SUB, kHalf>(st, tile + 4 * sub, lane, e2m1_lo, af[sub]);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int r = 0; r < 4; ++r) af[sub][i][r] = 0x3F803F80u;
      }
    }
    // Every input of the group (fragments, the four descriptors: +32 bytes per k16) defined before the
    // fence, none between its wgmmas.
    uint64_t db[4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      db[kk] = wgmma::smem_desc(st) + 2 * kk;
      asm volatile("" : "+l"(db[kk])::"memory");
    }
#pragma unroll
    for (int sub = 0; sub < SUB; ++sub) fence_frags(af[sub]);
    wgmma::wgmma_fence();
#pragma unroll
    for (int sub = 0; sub < SUB; ++sub)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma::wgmma_bf16_rs(acc[sub], af[sub][kk], db[kk], 1);
    wgmma::wgmma_commit();
    wgmma::wgmma_wait<1>();
    if (prev >= 0 && lane == 0) release(prev);
    prev = slot;
    if (++slot == wk.stages) {
      slot = 0;
      phase ^= 1;
    }
  };
  using H0 = std::integral_constant<int, 0>;
  using H1 = std::integral_constant<int, 1>;

  Segment sg;
  for (int seg = 0; segment_at(wk, seg, sg); ++seg) {
    const int b = sg.b, z = sg.z, steps = sg.steps;  // sg.kst0 is even: a segment starts at half 0 of a slab
#pragma unroll
    for (int sub = 0; sub < SUB; ++sub) {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[sub][i] = 0.0f;
      // The accumulators are pinned only outside the K loop: an instruction touching them while a group is
      // in flight would serialize the wgmmas (ptxas C7513).
      wgmma::fence_regs(acc[sub]);
    }
    // Four stages per trip (a unit's stage count is even: every trip ends on set af1, whose group may still
    // run when the next trip redefines af0, retired by then); `drain` (a benchmark variant) retires every
    // group at the end of each trip instead.
    for (int it = 0; it < steps; it += 4) {
      step(H0{}, af0);
      if (it + 1 < steps) step(H1{}, af1);
      if (it + 2 < steps) step(H0{}, af0);
      if (it + 3 < steps) step(H1{}, af1);
      if (wk.drain) wgmma::wgmma_wait<0>();
    }
    wgmma::wgmma_wait<0>();
    if (prev >= 0 && lane == 0) release(prev);
    prev = -1;
#pragma unroll
    for (int sub = 0; sub < SUB; ++sub) wgmma::fence_regs(acc[sub]);

    // acc[sub][4 j + 2 i + c]: weight row 16 (tile + 4 sub) + g + 8 i of the unit, token 8 j + 2 t + c of the
    // token tile.
    const int g = lane / 4, t = lane % 4;
    const int64_t n = a.layout.n, m0 = static_cast<int64_t>(z) * BN;
#pragma unroll
    for (int q = 0; q < 2 * SUB; ++q) {
      const int sub = q / 2, i = q % 2;
      const int64_t row = (static_cast<int64_t>(b) * Sh::kTiles + tile + 4 * sub) * kMmaTileN + g + 8 * i;
      if (row >= n) continue;
      const double bias = (sg.piece < 0 && a.bias != nullptr) ? mma_detail::load_bias(a.bias, a.bias_dtype, row) : 0.0;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int64_t m = m0 + 8 * j + 2 * t + c;
          if (m >= a.m) continue;
          const float v = acc[sub][4 * j + 2 * i + c];
          if (sg.piece >= 0 && wk.stream_k) {  // piece slot [tokens BN][rows of the unit]
            partial[(static_cast<int64_t>(sg.piece) * BN + (m - m0)) * (16 * Sh::kTiles) + (row - b * 16 * Sh::kTiles)] = v;
          } else if (sg.piece >= 0) {
            partial[(static_cast<int64_t>(sg.piece) * a.m + m) * n + row] = v;
          } else {
            mma_detail::store_out(a.out, a.out_dtype, m * n + row,
                                  mma_detail::epilogue_value<S>(v, mma_detail::epilogue_factor<S>(a, row, m), bias));
          }
        }
      }
    }
  }
  if (wk.cluster > 1) sa::cluster_sync();  // neither block leaves while the other may still arrive on it
  }  // math warpgroups
}

// A 2-D tensor map of x (BF16 [M, ld_x], K columns used): boxes of BN rows x 64 elements, 128B swizzle.
inline Result<CUtensorMap> x_map(const MmaDecodeArgs& a, int box_rows) {
  QL_ASSIGN_OR_RETURN(wgmma::EncodeTiled encode, wgmma::encode_tiled());
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(a.layout.k), static_cast<cuuint64_t>(a.m)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(a.ld_x) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kStageK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(a.x), dims, strides, box,
                            elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return Status::error("mma_decode wgmma: cuTensorMapEncodeTiled failed (" + std::to_string(static_cast<int>(r)) +
                         ") for activations " + std::to_string(a.m) + " x " + std::to_string(a.layout.k) +
                         ", row stride " + std::to_string(a.ld_x) + " elements");
  }
  return map;
}

// A 3-D map of packed bytes as 8-byte elements: [outer][mid][row_bytes], boxes of [box_outer][box_mid][row_bytes].
inline Result<CUtensorMap> packed_map(const void* base, int64_t row_bytes, int64_t mid, int64_t mid_stride,
                                      int64_t outer, int64_t outer_stride, int box_mid, int box_outer,
                                      const char* what) {
  QL_ASSIGN_OR_RETURN(wgmma::EncodeTiled encode, wgmma::encode_tiled());
  CUtensorMap map{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(row_bytes / 8), static_cast<cuuint64_t>(mid),
                              static_cast<cuuint64_t>(outer)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(mid_stride), static_cast<cuuint64_t>(outer_stride)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(row_bytes / 8), static_cast<cuuint32_t>(box_mid),
                             static_cast<cuuint32_t>(box_outer)};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT64, 3, const_cast<void*>(base), dims, strides, box, elem,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return Status::error(std::string("mma_decode wgmma: cuTensorMapEncodeTiled failed (") +
                         std::to_string(static_cast<int>(r)) + ") for the packed " + what + " (" +
                         std::to_string(outer) + " tiles x " + std::to_string(mid) + " x " +
                         std::to_string(row_bytes) + " bytes)");
  }
  return map;
}

// The TMA maps of a stage layout Sh's weight chunks and scale records (map_s: a copy of map_w where the
// layout has no records). The packed buffers are device allocations (256-byte aligned): every chunk and
// record row is 16-byte aligned, as TMA needs.
template <class Sh>
Status weight_maps(const MmaDecodeArgs& a, CUtensorMap& map_w, CUtensorMap& map_s) {
  const int64_t n_tiles = a.layout.n_tiles(), k_slabs = a.layout.k_slabs();
  QL_ASSIGN_OR_RETURN(map_w, packed_map(a.w, Sh::kChunk, k_slabs * Sh::kChunksPerUnit, Sh::kChunk, n_tiles,
                                        k_slabs * Sh::kUnitBytes, Sh::kChunksPerStage, Sh::kTiles, "weights"));
  map_s = map_w;
  if constexpr (Sh::kRec > 0) {
    QL_ASSIGN_OR_RETURN(map_s, packed_map(a.w_scale, Sh::kUnitRecBytes, k_slabs, Sh::kUnitRecBytes, n_tiles,
                                          k_slabs * Sh::kUnitRecBytes, 1, Sh::kTiles, "scales"));
  }
  return Status::ok();
}

template <MmaCode C, MmaScale S, int BN, int SUB>
Status launch_tile(const MmaDecodeArgs& a, const MmaWgmmaPlan& p, float* partial, Stream stream) {
  using Sh = Shape<C, S, BN, SUB>;
  auto kernel = mma_wgmma_kernel<C, S, BN, SUB>;
  QL_RETURN_IF_ERROR(wgmma::allow_smem(kernel, Sh::kSmem));
  QL_ASSIGN_OR_RETURN(CUtensorMap map_x, x_map(a, BN / p.cluster));
  const int64_t k_slabs = a.layout.k_slabs();
  CUtensorMap map_w, map_s;
  QL_RETURN_IF_ERROR(weight_maps<Sh>(a, map_w, map_s));
  const int forced_stages = p.stages > 0 ? p.stages : Sh::kStagesFit;
  const Walk wk{p.units,
                p.n_blocks,
                p.splits,
                p.stages_per_split,
                static_cast<int>(2 * k_slabs),
                forced_stages < Sh::kStagesFit ? (forced_stages < 2 ? 2 : forced_stages) : Sh::kStagesFit,
                mma_decode_forced().wgmma_probe,
                mma_decode_forced().wgmma_no_hint ? 0 : 1,
                mma_decode_forced().wgmma_drain ? 1 : 0,
                p.cluster,
                p.stream_k ? 1 : 0,
                p.dp_units,
                p.sk_slabs};
  if (p.cluster == 1) {
    kernel<<<p.grid, kThreads, Sh::kSmem, stream>>>(map_x, map_w, map_s, a, wk, partial);
    QL_CUDA_CHECK_LAUNCH("mma_wgmma_kernel");
    return Status::ok();
  }
  cudaLaunchConfig_t cfg = {};
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = Sh::kSmem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(p.cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cfg.gridDim = dim3(static_cast<unsigned>(p.cluster));
  int clusters = 0;  // clusters resident at once: the persistent grid must not exceed them
  QL_RETURN_IF_ERROR(cuda::check(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg),
                                       "cudaOccupancyMaxActiveClusters(mma_wgmma_kernel)"));
  cfg.gridDim = dim3(static_cast<unsigned>(p.cluster * std::max(1, std::min(p.grid / p.cluster, clusters))));
  return cuda::check(cudaLaunchKernelEx(&cfg, kernel, map_x, map_w, map_s, a, wk, partial),
                     "cudaLaunchKernelEx(mma_wgmma_kernel, block clusters)");
}

// The token tiles of one (code, scale) pair.
template <MmaCode C, MmaScale S>
Status launch_tokens(const MmaDecodeArgs& a, const MmaWgmmaPlan& p, float* partial, Stream stream) {
  // 256 rows with 128 tokens: two accumulator sets of 64 and four fragment sets leave too few registers for
  // an asynchronous wgmma pipeline (ptxas C7511), so only 64-token tiles have it.
  if (p.rows == 256) {
    if (p.tokens == 64) return launch_tile<C, S, 64, 2>(a, p, partial, stream);
  } else {
    switch (p.tokens) {
      case 64: return launch_tile<C, S, 64, 1>(a, p, partial, stream);
      case 128: return launch_tile<C, S, 128, 1>(a, p, partial, stream);
      case 256: return launch_tile<C, S, 256, 1>(a, p, partial, stream);
      default: break;
    }
  }
  return Status::error("mma_decode wgmma: token tile " + std::to_string(p.tokens) + " x " + std::to_string(p.rows) +
                       " rows is not instantiated (64, 128, 256 x 128; 64 x 256)");
}

}  // namespace qlinear::cuda::mma_wgmma
