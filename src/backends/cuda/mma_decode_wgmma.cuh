#pragma once
// Device code of the swap-AB wgmma decode GEMM (mma_decode_wgmma.hpp says where it runs): y^T = W x^T with
// the weights decoded in registers as wgmma's A operand (64 weight rows per warpgroup) and the tokens as its
// N dimension (BN = 32, 64, 128 or 256 per block), B = the activation tile in shared memory.
//
// Block: two math warpgroups (warps 0..7; warpgroup g owns weight rows 64 g .. 64 g + 63 of the block's
// 128, warp w of it the n16 tile 4 g + w of the packed layout) and a producer warpgroup (warps 8..11: 8
// lanes issue the copies; the warpgroup exists to hand its registers to the math warps). The block
// walks its K range (one split when split-K is on) in stages of 64 K through a kStages-deep ring in shared
// memory, each stage
//
//   [ x: BN token rows x 64 BF16 (128 bytes), 128B-swizzled by TMA ]
//   [ w: 8 tiles x half a unit ][ s: the 8 units' scale records ]   (padded to 1024 bytes)
//
// loaded by 8 producer lanes: the x box by TMA from a tensor map of x (rows >= M and columns
// >= K read as zeros), each tile's half unit (layout/mma_layout.hpp: the first or second half of a k128
// unit holds its K groups 0, 1 or 2, 3, contiguous for E4M3 and E2M1) and its unit's scale records by bulk
// copies, all completing on the stage's `full` barrier. Math warps read their lane's words of the half
// unit, decode them exactly as mma_decode.cuh does (decode_group: bit placement and one mul.rn.bf16x2 by
// the power of two or NVFP4 factor) into four 64x16 A fragments, and issue four wgmma m64nBNk16 on the
// stage's x tile as one commit group. The fragments of stage i are read by the tensor cores until that
// group completes, so stages alternate between two fragment sets: while group i runs, the warps decode
// stage i + 1 into the other set; `wgmma.wait_group 1` after issuing it retires group i - 1 and frees its
// ring slot (each math warp arrives on `empty`). The FP32 accumulators stay in registers across K; the
// epilogue applies the row and activation factors and bias (epilogue_factor, as the mma.sync kernel)
// or writes FP32 partial sums for the split-K reduction.
//
// Numerics are the mma.sync kernel's (mma_decode.cuh): exact BF16 weights (MX scales folded; layers whose
// scales do not fold never come here), exact products, FP32 accumulation.
#include <cuda.h>

#include "backends/cuda/mma_decode.cuh"
#include "backends/cuda/wgmma_bf16_rs.cuh"
#include "backends/cuda/wgmma_pipeline.cuh"

namespace qlinear::cuda::mma_wgmma {

using mma_detail::CodeTraits;

constexpr int kMathWarpgroups = 2;
constexpr int kTilesPerBlock = 4 * kMathWarpgroups;  // n16 tiles: 128 weight rows
constexpr int kProducerWarp = 4 * kMathWarpgroups;  // the first warp of the producer warpgroup
constexpr int kThreads = 128 * kMathWarpgroups + 128;
// Registers per thread after setmaxnreg: ptxas caps a 384-thread block at 168 at entry, too few for the
// 128 accumulators of a 256-token tile with two fragment sets (the wgmmas would be serialized, C7511); the
// producer warpgroup gives its registers to the math warpgroups (128 x 40 + 256 x 232 <= 64 K).
constexpr int kProducerRegs = 40, kMathRegs = 232;
constexpr int kStageK = 64;  // half a k128 slab: one 128-byte row of BF16 per token
constexpr int kSmemBudget = 200 * 1024;

template <MmaCode C, MmaScale S, int BN>
struct Shape {
  static_assert(C == MmaCode::kE4M3 || C == MmaCode::kE2M1, "half units are contiguous for E4M3 and E2M1 only");
  static_assert(BN % 8 == 0 && BN >= 8 && BN <= 256, "wgmma N");
  static constexpr int kHalfWords = CodeTraits<C>::kWords / 2;  // a lane's words of half a unit
  static constexpr int kHalfUnit = 32 * 4 * kHalfWords;         // bytes
  static constexpr int kRec = static_cast<int>(mma_scale_record_bytes(S));
  static constexpr int kXBytes = BN * 128;
  static constexpr int kWBytes = kTilesPerBlock * kHalfUnit;
  static constexpr int kUnitRecBytes = static_cast<int>(kMmaScaleRecords) * kRec;  // a unit's scale records
  static constexpr int kSBytes = kTilesPerBlock * kUnitRecBytes;
  static constexpr int kLoadBytes = kXBytes + kWBytes + kSBytes;   // what a stage's copies bring (tx count)
  static constexpr int kStageBytes = (kLoadBytes + 1023) / 1024 * 1024;  // padded: x tiles 1024-aligned
  static constexpr int kStages = kSmemBudget / kStageBytes < 8 ? kSmemBudget / kStageBytes : 8;
  static constexpr int kSmem = kStages * kStageBytes + 2 * kStages * 8 + 1024;  // + barriers, alignment
  static_assert(kStageBytes % 1024 == 0, "every stage's x tile 1024-byte aligned (128B swizzle)");
  static_assert(kStages >= 2, "shared memory for two stages");
};

// 1-D bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) completing on `bar`.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          wgmma::smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(wgmma::smem_addr(bar))
      : "memory");
}

// The decode factors f[h][row half] of K group 2 half + ql of the lane's k128 unit (mma_decode.cuh,
// decode_group; kMx32: folding layers only). rec[0] / rec[1]: the scale-record word of rows g / g + 8 that
// holds this half's groups, shifted so that they start at byte 0 (ql is a compile-time index after unrolling:
// no register array is indexed at run time).
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

// One stage of a math warp: its tile's half unit and scale record from the ring slot `st` (stage `kst` of
// the layer's K: half kst % 2 of slab kst / 2) decoded into the four k16 A fragments af[kk].
template <MmaCode C, MmaScale S, int BN>
__device__ __forceinline__ void decode_stage(const uint8_t* st, int tile, int lane, int kst, uint32_t e2m1_lo,
                                             uint32_t (&af)[4][4]) {
  using Sh = Shape<C, S, BN>;
  uint32_t w[Sh::kHalfWords];
  const uint8_t* unit = st + Sh::kXBytes + tile * Sh::kHalfUnit;
#pragma unroll
  for (int p = 0; p < Sh::kHalfWords / 4; ++p) {
    const uint4 v = *reinterpret_cast<const uint4*>(unit + p * 512 + lane * 16);
    w[4 * p] = v.x;
    w[4 * p + 1] = v.y;
    w[4 * p + 2] = v.z;
    w[4 * p + 3] = v.w;
  }
  // The row pair's scale record (mma_layout.hpp; the 4 lanes of a pair read the same one): kMx32 8 bytes,
  // rows g then g + 8, one byte per 32-group; kNv16 16 bytes, rows g then g + 8, one byte per 16-group. This
  // half's groups: the upper half of each MX word, or the second NVFP4 word of each row.
  const int half = kst & 1;
  uint32_t rec[2] = {0, 0};
  const uint8_t* rp = st + Sh::kXBytes + Sh::kWBytes + tile * Sh::kUnitRecBytes + (lane / 4) * Sh::kRec;
  if constexpr (S == MmaScale::kMx32) {
    const uint2 v = *reinterpret_cast<const uint2*>(rp);
    rec[0] = v.x >> (16 * half);
    rec[1] = v.y >> (16 * half);
  } else if constexpr (S == MmaScale::kNv16) {
    const uint4 v = *reinterpret_cast<const uint4*>(rp);
    rec[0] = half ? v.y : v.x;
    rec[1] = half ? v.w : v.z;
  }
#pragma unroll
  for (int ql = 0; ql < 2; ++ql) {
    uint32_t f[2][2];
    group_factors<C, S>(rec, ql, f);
    uint32_t a2[2][4];
    mma_detail::decode_group<C>(w, ql, f, a2, e2m1_lo);  // the half's words: its groups are 0, 1 locally
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int r = 0; r < 4; ++r) af[2 * ql + h][r] = a2[h][r];
  }
}

__device__ __forceinline__ void fence_frags(uint32_t (&af)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(af[i][r])::"memory");
}

// grid (N blocks of 128 rows, splits, M tiles of BN tokens); stages_per_split counts 64-K stages.
// partial: null -> the epilogue writes out; else [splits][M][N] f32 sums (mma_decode_reduce_kernel adds them).
template <MmaCode C, MmaScale S, int BN>
__global__ void __launch_bounds__(kThreads, 1)
    mma_wgmma_kernel(const __grid_constant__ CUtensorMap map_x, const MmaDecodeArgs a, int stages_per_split,
                     float* __restrict__ partial) {
  using Sh = Shape<C, S, BN>;
  constexpr int kStages = Sh::kStages;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * Sh::kStageBytes);
  uint64_t* empty = full + kStages;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n_tiles = a.layout.n_tiles(), k_slabs = a.layout.k_slabs();
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kTilesPerBlock;
  const int64_t m0 = static_cast<int64_t>(blockIdx.z) * BN;
  const int total = static_cast<int>(k_slabs * 2);
  const int kst0 = static_cast<int>(blockIdx.y) * stages_per_split;
  const int steps = max(0, min(stages_per_split, total - kst0));

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      wgmma::mbar_init(&full[s], 1);
      wgmma::mbar_init(&empty[s], 4 * kMathWarpgroups);  // one arrive per math warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp >= kProducerWarp) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    // Lanes 0..7 of the first producer warp: lane t copies tile t's half unit and scale records, lane 0
    // also waits for the slot, arms the barrier (before any copy is issued) and loads the x box.
    if (warp != kProducerWarp || lane >= kTilesPerBlock) return;
    constexpr unsigned kLanes = (1u << kTilesPerBlock) - 1;
    const int64_t tile = min(tile0 + lane, n_tiles - 1);  // past the last tile: valid bytes, rows discarded
    const uint8_t* wsrc = a.w + tile * k_slabs * a.layout.unit_bytes();
    const uint8_t* ssrc = Sh::kRec > 0 ? a.w_scale + tile * k_slabs * Sh::kUnitRecBytes : nullptr;
    for (int it = 0; it < steps; ++it) {
      const int s = it % kStages, kst = kst0 + it;
      uint8_t* st = smem + s * Sh::kStageBytes;
      if (lane == 0) {
        wgmma::mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);  // a fresh barrier counts as released
        wgmma::mbar_arrive_expect_tx(&full[s], Sh::kLoadBytes);
        wgmma::tma_load(st, &map_x, &full[s], kst * kStageK, static_cast<int>(m0));
      }
      __syncwarp(kLanes);
      const int64_t slab = kst / 2;
      bulk_copy(st + Sh::kXBytes + lane * Sh::kHalfUnit,
                wsrc + slab * a.layout.unit_bytes() + (kst & 1) * Sh::kHalfUnit, Sh::kHalfUnit, &full[s]);
      if constexpr (Sh::kRec > 0) {
        bulk_copy(st + Sh::kXBytes + Sh::kWBytes + lane * Sh::kUnitRecBytes, ssrc + slab * Sh::kUnitRecBytes,
                  Sh::kUnitRecBytes, &full[s]);
      }
    }
  } else {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kMathRegs));
  const int tile = warp;  // warp w of warpgroup g decodes tile 4 g + w
  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
  uint32_t af0[4][4] = {}, af1[4][4] = {};
  const uint32_t e2m1_lo = C == MmaCode::kE2M1 ? mma_detail::e2m1_table_lo() : 0u;  // decode_group's prmt table

  // Stage `it`: decode into `af` (the set whose group retired at the previous step), issue its four
  // wgmmas, then retire the previous stage's group and release that ring slot.
  auto step = [&](uint32_t (&af)[4][4], int it) {
    const int s = it % kStages;
    const uint8_t* st = smem + s * Sh::kStageBytes;
    wgmma::mbar_wait(&full[s], (it / kStages) & 1);
    decode_stage<C, S, BN>(st, tile, lane, kst0 + it, e2m1_lo, af);
    // Every input of the group (fragments, the four descriptors: +32 bytes per k16) defined before the
    // fence, none between its wgmmas.
    uint64_t db[4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      db[kk] = wgmma::smem_desc(st) + 2 * kk;
      asm volatile("" : "+l"(db[kk])::"memory");
    }
    fence_frags(af);
    wgmma::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma::wgmma_bf16_rs(acc, af[kk], db[kk], 1);
    wgmma::wgmma_commit();
    wgmma::wgmma_wait<1>();
    if (it > 0 && lane == 0) wgmma::mbar_arrive(&empty[(it - 1) % kStages]);
  };
  // The accumulators are pinned only outside the loop: an instruction touching them while a group is in
  // flight would serialize the wgmmas (ptxas C7513).
  wgmma::fence_regs(acc);
  // Four stages per trip, then every group retired: ptxas follows the two fragment sets through straight
  // code but not around the loop's back edge (a set redefined there while a group may read it: C7513).
  for (int it = 0; it < steps; it += 4) {
    step(af0, it);
    if (it + 1 < steps) step(af1, it + 1);
    if (it + 2 < steps) step(af0, it + 2);
    if (it + 3 < steps) step(af1, it + 3);
    wgmma::wgmma_wait<0>();
  }
  wgmma::wgmma_wait<0>();
  wgmma::fence_regs(acc);

  // acc[4 j + 2 i + c]: weight row 16 tile + g + 8 i of the block, token 8 j + 2 t + c of the tile.
  const int g = lane / 4, t = lane % 4;
  const int64_t n = a.layout.n;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t row = (tile0 + tile) * kMmaTileN + g + 8 * i;
    if (row >= n) continue;
    const double bias =
        (partial == nullptr && a.bias != nullptr) ? mma_detail::load_bias(a.bias, a.bias_dtype, row) : 0.0;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int64_t m = m0 + 8 * j + 2 * t + c;
        if (m >= a.m) continue;
        const float v = acc[4 * j + 2 * i + c];
        if (partial != nullptr) {
          partial[(static_cast<int64_t>(blockIdx.y) * a.m + m) * n + row] = v;
        } else {
          mma_detail::store_out(a.out, a.out_dtype, m * n + row,
                                mma_detail::epilogue_value<S>(v, mma_detail::epilogue_factor<S>(a, row, m), bias));
        }
      }
    }
  }
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

template <MmaCode C, MmaScale S, int BN>
Status launch_tile(const MmaDecodeArgs& a, int splits, float* partial, Stream stream) {
  using Sh = Shape<C, S, BN>;
  auto kernel = mma_wgmma_kernel<C, S, BN>;
  QL_RETURN_IF_ERROR(wgmma::allow_smem(kernel, Sh::kSmem));
  QL_ASSIGN_OR_RETURN(CUtensorMap map, x_map(a, BN));
  const int64_t n_blocks = (a.layout.n_tiles() + kTilesPerBlock - 1) / kTilesPerBlock;
  const int64_t m_tiles = (a.m + BN - 1) / BN;
  const int total = static_cast<int>(a.layout.k_slabs() * 2);
  const int per_split = (total + splits - 1) / splits;
  const dim3 grid(static_cast<unsigned>(n_blocks), static_cast<unsigned>(splits), static_cast<unsigned>(m_tiles));
  kernel<<<grid, kThreads, Sh::kSmem, stream>>>(map, a, per_split, partial);
  QL_CUDA_CHECK_LAUNCH("mma_wgmma_kernel");
  return Status::ok();
}

// The token tiles of one (code, scale) pair.
template <MmaCode C, MmaScale S>
Status launch_tokens(const MmaDecodeArgs& a, int bn, int splits, float* partial, Stream stream) {
  switch (bn) {
    case 32: return launch_tile<C, S, 32>(a, splits, partial, stream);
    case 64: return launch_tile<C, S, 64>(a, splits, partial, stream);
    case 128: return launch_tile<C, S, 128>(a, splits, partial, stream);
    case 256: return launch_tile<C, S, 256>(a, splits, partial, stream);
    default: break;
  }
  return Status::error("mma_decode wgmma: token tile " + std::to_string(bn) +
                       " is not instantiated (32, 64, 128, 256)");
}

}  // namespace qlinear::cuda::mma_wgmma
