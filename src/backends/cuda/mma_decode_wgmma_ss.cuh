#pragma once
// Device code of the shared-memory variant of the wgmma decode GEMM (MmaWgmmaPlan::smem_b; the host side is
// mma_decode_wgmma.cu): y = x W^T with the tokens as wgmma's M (64 per math warpgroup, 128 per block) and the
// decoded weights as its N (128 or 256 rows per block), both operands in shared memory. Where the swap-AB
// kernel (mma_decode_wgmma.cuh) re-reads the activation box for every 128 weight rows, this one reads it for
// every 256 and the weights once per 128 tokens: a third less L2 traffic at 256 tokens with FP8 weights, half
// with 4-bit ones, and no accumulator limit on the weight rows a block covers.
//
// The ring, its stage layout and the producer are the swap-AB kernel's (Shape<C, S, 128 tokens, rows / 128>,
// produce()). Each stage, the eight math warps decode the unit's n16 tiles (decode_tile_words, the same exact
// decode) into a BF16 B tile in shared memory -- stmatrix of the mma fragments, rows of 64 K (128 bytes) with
// the 128-byte swizzle wgmma reads -- then meet at a named barrier and issue four wgmma m64nBNWk16 each on the
// stage's x tile (A) and that B tile. Three B tiles rotate: the one decoded at stage i was last read by the
// groups of stage i - 3, which every warp retired (wait_group 1 at stage i - 2) before the barrier of stage
// i - 1 let any warp on. Numerics are the swap-AB kernel's: exact BF16 weights and products, FP32
// accumulation, the f64 epilogue (epilogue_factor / epilogue_value) or FP32 split sums.
#include "backends/cuda/mma_decode_wgmma.cuh"
#include "backends/cuda/wgmma_bf16_ss.cuh"

namespace qlinear::cuda::mma_wgmma {

constexpr int kSsTokens = 64 * kMathWarpgroups;  // tokens per block (wgmma M)
constexpr int kSsBTiles = 3;                     // decoded B tiles in rotation
constexpr int kSsSmemBudget = 220 * 1024;        // ring + B tiles (227 KB per block on sm_90)

template <MmaCode C, MmaScale S, int BNW>
struct ShapeSs : Shape<C, S, kSsTokens, BNW / 128> {
  using Base = Shape<C, S, kSsTokens, BNW / 128>;
  static_assert(BNW == 128 || BNW == 256, "weight rows per block (wgmma N)");
  static_assert(Base::kTiles * 16 == BNW, "the stage layout's tiles are the block's weight rows");
  static constexpr int kBBytes = BNW * 128;  // BNW rows x 64 BF16
  static constexpr int kStagesFit = (kSsSmemBudget - kSsBTiles * kBBytes) / Base::kStageBytes < kMaxStages
                                        ? (kSsSmemBudget - kSsBTiles * kBBytes) / Base::kStageBytes
                                        : kMaxStages;
  static constexpr int kSmem = kStagesFit * Base::kStageBytes + kSsBTiles * kBBytes + 2 * kMaxStages * 8 + 1024;
  static_assert(kStagesFit >= 2, "shared memory for two stages");
};

__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}

// The 256 math threads meet (named barrier 1; the producer warpgroup never takes part).
__device__ __forceinline__ void math_barrier() { asm volatile("bar.sync 1, %0;" ::"n"(128 * kMathWarpgroups) : "memory"); }

// Math warp `warp` decodes its tiles (warp, warp + 8) of the stage at `st` into the B tile at shared address
// `b`: the A fragment of tile t, k16 step kk (mma layout: rows g / g + 8 at K 2t / 2t + 8) is the four 8x8
// matrices stmatrix stores, lane l addressing row 16 t + l % 8 + 8 ((l / 8) % 2), 16-byte chunk 2 kk + l / 16
// of its 128-byte row, swizzled (chunk ^ row % 8) as a TMA 128B-swizzled tile.
template <MmaCode C, MmaScale S, int BNW, int HALF>
__device__ __forceinline__ void decode_to_b(const uint8_t* st, uint32_t b, int warp, int lane, uint32_t e2m1_lo) {
  using Sh = ShapeSs<C, S, BNW>;
  const int r = lane & 7;
#pragma unroll
  for (int tile = warp; tile < Sh::kTiles; tile += 4 * kMathWarpgroups) {
    uint32_t af[4][4];
    decode_tile_words<C, S, HALF, Sh::kLaneWords, Sh::kRec>(st + Sh::kXBytes + tile * Sh::kTileBytes,
                                                            st + Sh::kXBytes + Sh::kWBytes + tile * Sh::kUnitRecBytes,
                                                            lane, e2m1_lo, af);
    const uint32_t row = b + static_cast<uint32_t>(16 * tile + r + 8 * ((lane >> 3) & 1)) * 128;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) stmatrix_x4(row + (((2 * kk + (lane >> 4)) ^ r) << 4), af[kk]);
  }
}

// partial: null -> the epilogue writes out; else [splits][M][N] f32 sums (mma_decode_reduce_kernel adds them).
template <MmaCode C, MmaScale S, int BNW>
__global__ void __launch_bounds__(kThreads, 1)
    mma_wgmma_ss_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                        const __grid_constant__ CUtensorMap map_s, const MmaDecodeArgs a, const Walk wk,
                        float* __restrict__ partial) {
  using Sh = ShapeSs<C, S, BNW>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (wgmma::smem_addr(smem_raw) & 1023)) & 1023);
  uint8_t* btiles = smem + Sh::kStagesFit * Sh::kStageBytes;  // 1024-aligned: stage sizes are multiples of 1024
  uint64_t* full = reinterpret_cast<uint64_t*>(btiles + kSsBTiles * Sh::kBBytes);
  uint64_t* empty = full + kMaxStages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == 0) {
    for (int s = 0; s < wk.stages; ++s) {
      wgmma::mbar_init(&full[s], 1);
      wgmma::mbar_init(&empty[s], 4 * kMathWarpgroups);  // one arrive per math warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp >= kProducerWarp) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (warp != kProducerWarp || lane != 0) return;
    produce<Sh, kSsTokens>(wk, smem, full, empty, map_x, map_w, map_s);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kMathRegs));
  const int wg = warp / 4;
  const uint32_t e2m1_lo = C == MmaCode::kE2M1 ? mma_detail::e2m1_table_lo() : 0u;
  const uint32_t b0 = wgmma::smem_addr(btiles);
  float acc[BNW / 2];
  int slot = 0, prev = -1, bt = 0;
  uint32_t phase = 0;

  Segment sg;
  for (int seg = 0; segment_at(wk, seg, sg); ++seg) {
#pragma unroll
    for (int i = 0; i < BNW / 2; ++i) acc[i] = 0.0f;
    wgmma::fence_regs(acc);
    for (int kst = 0; kst < sg.steps; ++kst) {  // sg.kst0 is even: kst's parity is the stage's slab half
      const uint8_t* st = smem + slot * Sh::kStageBytes;
      const uint32_t b = b0 + bt * Sh::kBBytes;
      wgmma::mbar_wait(&full[slot], phase);
      if (kst & 1) {
        decode_to_b<C, S, BNW, 1>(st, b, warp, lane, e2m1_lo);
      } else {
        decode_to_b<C, S, BNW, 0>(st, b, warp, lane, e2m1_lo);
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the B tile, visible to the tensor cores
      math_barrier();
      const uint64_t da = wgmma::smem_desc(st + wg * 64 * 128), db = wgmma::smem_desc(btiles + bt * Sh::kBBytes);
      wgmma::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma::wgmma_bf16_ss(acc, da + 2 * kk, db + 2 * kk, 1);  // +32 B per k16
      wgmma::wgmma_commit();
      wgmma::wgmma_wait<1>();  // the previous stage's group is done: its ring slot is free
      if (prev >= 0 && lane == 0) wgmma::mbar_arrive(&empty[prev]);
      prev = slot;
      if (++slot == wk.stages) {
        slot = 0;
        phase ^= 1;
      }
      if (++bt == kSsBTiles) bt = 0;
    }
    wgmma::wgmma_wait<0>();
    if (prev >= 0 && lane == 0) wgmma::mbar_arrive(&empty[prev]);
    prev = -1;
    wgmma::fence_regs(acc);

    // acc[4 j + 2 i + c]: token 64 wg + 16 (warp % 4) + g + 8 i of the token tile, weight row 8 j + 2 t + c of
    // the block's rows.
    const int g = lane / 4, t = lane % 4;
    const int64_t n = a.layout.n, n0 = static_cast<int64_t>(sg.b) * BNW;
    const int64_t mrow = static_cast<int64_t>(sg.z) * kSsTokens + 64 * wg + 16 * (warp % 4) + g;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t m = mrow + 8 * i;
      if (m >= a.m) continue;
#pragma unroll
      for (int j = 0; j < BNW / 8; ++j) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int64_t row = n0 + 8 * j + 2 * t + c;
          if (row >= n) continue;
          const float v = acc[4 * j + 2 * i + c];
          if (sg.piece >= 0) {
            partial[(static_cast<int64_t>(sg.piece) * a.m + m) * n + row] = v;
          } else {
            const double bias = a.bias != nullptr ? mma_detail::load_bias(a.bias, a.bias_dtype, row) : 0.0;
            mma_detail::store_out(a.out, a.out_dtype, m * n + row,
                                  mma_detail::epilogue_value<S>(v, mma_detail::epilogue_factor<S>(a, row, m), bias));
          }
        }
      }
    }
  }
}

template <MmaCode C, MmaScale S, int BNW>
Status launch_tile_ss(const MmaDecodeArgs& a, const MmaWgmmaPlan& p, float* partial, Stream stream) {
  using Sh = ShapeSs<C, S, BNW>;
  auto kernel = mma_wgmma_ss_kernel<C, S, BNW>;
  QL_RETURN_IF_ERROR(wgmma::allow_smem(kernel, Sh::kSmem));
  QL_ASSIGN_OR_RETURN(CUtensorMap map_x, x_map(a, kSsTokens));
  const int64_t k_slabs = a.layout.k_slabs();
  CUtensorMap map_w, map_s;
  QL_RETURN_IF_ERROR(weight_maps<Sh>(a, map_w, map_s));
  const int stages = p.stages > 0 && p.stages < Sh::kStagesFit ? std::max(2, p.stages) : Sh::kStagesFit;
  Walk wk{};
  wk.units = p.units;
  wk.n_blocks = p.n_blocks;
  wk.splits = p.splits;
  wk.stages_per_split = p.stages_per_split;
  wk.total_stages = static_cast<int>(2 * k_slabs);
  wk.stages = stages;
  wk.hint = mma_decode_forced().wgmma_no_hint ? 0 : 1;
  wk.cluster = 1;
  kernel<<<p.grid, kThreads, Sh::kSmem, stream>>>(map_x, map_w, map_s, a, wk, partial);
  QL_CUDA_CHECK_LAUNCH("mma_wgmma_ss_kernel");
  return Status::ok();
}

// The weight-row tiles of one (code, scale) pair.
template <MmaCode C, MmaScale S>
Status launch_rows_ss(const MmaDecodeArgs& a, const MmaWgmmaPlan& p, float* partial, Stream stream) {
  if (p.rows == 256) return launch_tile_ss<C, S, 256>(a, p, partial, stream);
  return launch_tile_ss<C, S, 128>(a, p, partial, stream);
}

}  // namespace qlinear::cuda::mma_wgmma
