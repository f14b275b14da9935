#pragma once
// Device code of the persistent FP8 GEMM (wgmma_fp8_gemm.hpp has the contract and the structure). One
// instantiation per tile width, each in its own .cu (wgmma_fp8_gemm_n<BN>.cu), so they compile in parallel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/wgmma_fp8_gemm.hpp"
#include "backends/cuda/wgmma_pipeline.cuh"

namespace qlinear::cuda::wgfp8 {

using wgmma::kBK;
using wgmma::kBM;
constexpr int kThreads = 384;  // producer warpgroup + two math warpgroups
constexpr int kMathWarps = 8;
// Registers per thread after setmaxnreg: 128 x 40 + 256 x 232 <= the 64 K a 384-thread block gets at
// launch (168 each); a 192-column tile keeps 96 accumulators and 96 promotion scratch registers.
constexpr int kProducerRegs = 40, kMathRegs = 232;
constexpr int kSmemBudget = 200 * 1024;  // the stage ring; the rest of the 227 KiB is barriers and alignment

enum OutKind : int { kOutBf16 = 0, kOutF16 = 1, kOutF32 = 2 };
enum BiasKind : int { kBiasNone = 0, kBiasBf16 = 1, kBiasF16 = 2, kBiasF32 = 3 };

struct Params {
  int m, n, num_kb;
  int num_m, num_n, group_m, num_tiles;
  const float* x_scale;
  const float* w_scale;
  const void* bias;
  void* out;
  int64_t ld_out;
  int x_scale_per_row, w_scale_per_col, bias_kind, out_kind, pairs;  // pairs: two outputs per store
};

template <int BN>
struct Tile {
  static_assert(BN == 128 || BN == 192 || BN == 256, "tile width");
  static constexpr int kXBytes = kBM * kBK;
  static constexpr int kStageBytes = kXBytes + BN * kBK;
  static constexpr int kStages = kSmemBudget / kStageBytes < 6 ? kSmemBudget / kStageBytes : 6;
  static constexpr int kChunk = BN == 256 ? 128 : BN;  // columns promoted per step
  static constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;
};

// Tile t -> (row block, column block): groups of group_m row blocks, column blocks outer inside a group,
// row blocks inner, so consecutive tiles (the blocks running together) share w columns and x rows.
__device__ __forceinline__ void tile_coords(const Params& p, int t, int& mb, int& nb) {
  const int per_group = p.group_m * p.num_n;
  const int g = t / per_group;
  const int first = g * p.group_m;
  const int rows = min(p.group_m, p.num_m - first);
  const int r = t - g * per_group;
  mb = first + r % rows;
  nb = r / rows;
}

__device__ __forceinline__ float load_bias(const Params& p, int col) {
  switch (p.bias_kind) {
    case kBiasBf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[col]);
    case kBiasF16: return __half2float(static_cast<const __half*>(p.bias)[col]);
    case kBiasF32: return static_cast<const float*>(p.bias)[col];
    default: return 0.0f;
  }
}

__device__ __forceinline__ void store_out(const Params& p, int64_t idx, float v0, float v1, bool both) {
  if (p.out_kind == kOutBf16) {
    auto* o = static_cast<__nv_bfloat16*>(p.out) + idx;
    if (both && p.pairs) {
      *reinterpret_cast<__nv_bfloat162*>(o) = __floats2bfloat162_rn(v0, v1);
    } else {
      o[0] = __float2bfloat16_rn(v0);
      if (both) o[1] = __float2bfloat16_rn(v1);
    }
  } else if (p.out_kind == kOutF16) {
    auto* o = static_cast<__half*>(p.out) + idx;
    if (both && p.pairs) {
      *reinterpret_cast<__half2*>(o) = __floats2half2_rn(v0, v1);
    } else {
      o[0] = __float2half_rn(v0);
      if (both) o[1] = __float2half_rn(v1);
    }
  } else {
    float* o = static_cast<float*>(p.out) + idx;
    if (both && p.pairs) {
      *reinterpret_cast<float2*>(o) = make_float2(v0, v1);
    } else {
      o[0] = v0;
      if (both) o[1] = v1;
    }
  }
}

// The tile's outputs: register 4 j + 2 i + c of thread t (warp w, lane l) of math warpgroup g is row
// m0 + 64 g + 16 w + l / 4 + 8 i, column n0 + 8 j + 2 (l % 4) + c (the wgmma accumulator layout).
template <int BN>
__device__ __forceinline__ void store_tile(const Params& p, const float (&acc)[BN / 2], int m0, int n0, int g, int t) {
  const int warp = t / 32, lane = t % 32;
  const int row0 = m0 + g * 64 + warp * 16 + lane / 4;
  float xs[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = row0 + 8 * i;
    xs[i] = row < p.m ? p.x_scale[p.x_scale_per_row ? row : 0] : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int col = n0 + 8 * j + 2 * (lane % 4);
    if (col >= p.n) continue;
    const bool both = col + 1 < p.n;
    const float ws0 = p.w_scale[p.w_scale_per_col ? col : 0];
    const float ws1 = both ? p.w_scale[p.w_scale_per_col ? col + 1 : 0] : 0.0f;
    const float b0 = load_bias(p, col);
    const float b1 = both ? load_bias(p, col + 1) : 0.0f;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 8 * i;
      if (row >= p.m) continue;
      const float v0 = acc[4 * j + 2 * i] * xs[i] * ws0 + b0;
      const float v1 = acc[4 * j + 2 * i + 1] * xs[i] * ws1 + b1;
      store_out(p, static_cast<int64_t>(row) * p.ld_out + col, v0, v1, both);
    }
  }
}

template <int BN>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_fp8_persistent_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                                const Params p) {
  using T = Tile<BN>;
  constexpr int S = T::kStages;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S * T::kStageBytes);
  uint64_t* empty = full + S;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      wgmma::mbar_init(&full[s], 1);
      wgmma::mbar_init(&empty[s], kMathWarps);  // one arrive per math warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (t != 0) return;
    // The producer: K slices of every tile of this block, in order; `it` counts slices across tiles (the
    // ring position and its phase), so the next tile's loads start while the math warpgroups finish.
    int it = 0;
    for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x) {
      int mb, nb;
      tile_coords(p, tile, mb, nb);
      for (int kb = 0; kb < p.num_kb; ++kb, ++it) {
        const int s = it % S;
        wgmma::mbar_wait(&empty[s], ((it / S) & 1) ^ 1);  // a fresh barrier counts as released
        wgmma::mbar_arrive_expect_tx(&full[s], T::kStageBytes);
        uint8_t* stage = smem + s * T::kStageBytes;
        wgmma::tma_load(stage, &map_x, &full[s], kb * kBK, mb * kBM);
        wgmma::tma_load(stage + T::kXBytes, &map_w, &full[s], kb * kBK, nb * BN);
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kMathRegs));
  const int g = wg - 1;
  const int lane = t % 32;
  constexpr int kChunks = BN / T::kChunk;
  int it = 0;
  for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x) {
    int mb, nb;
    tile_coords(p, tile, mb, nb);
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    float part[T::kChunk / 2];
    for (int kb = 0; kb < p.num_kb; ++kb, ++it) {
      const int s = it % S;
      wgmma::mbar_wait(&full[s], (it / S) & 1);
      const uint8_t* stage = smem + s * T::kStageBytes;
      const uint64_t da = wgmma::smem_desc(stage + g * 64 * kBK);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const uint64_t db = wgmma::smem_desc(stage + T::kXBytes + c * T::kChunk * kBK);
        wgmma::fence_regs(part);
        wgmma::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 32; ++kk) wgmma::wgmma_m64k32(part, da + 2 * kk, db + 2 * kk, kk);  // +32 bytes
        wgmma::wgmma_commit();
        wgmma::wgmma_wait<0>();
        wgmma::fence_regs(part);
        if (c == kChunks - 1 && lane == 0) wgmma::mbar_arrive(&empty[s]);  // the stage is read: release it
#pragma unroll
        for (int i = 0; i < T::kChunk / 2; ++i) acc[c * (T::kChunk / 2) + i] += part[i];
      }
    }
    store_tile<BN>(p, acc, mb * kBM, nb * BN, g, t);
  }
}

// Launches the BN-wide kernel (defined in wgmma_fp8_gemm_n<BN>.cu).
template <int BN>
Status launch_tile(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream);
template <>
Status launch_tile<128>(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream);
template <>
Status launch_tile<192>(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream);
template <>
Status launch_tile<256>(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream);

template <int BN>
Status launch_tile_impl(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream) {
  using T = Tile<BN>;
  QL_ASSIGN_OR_RETURN(CUtensorMap map_w, wgmma::byte_map(a.w, a.n, a.k, a.ld_w, BN));
  QL_RETURN_IF_ERROR(wgmma::allow_smem(wgmma_fp8_persistent_kernel<BN>, T::kSmemBytes));
  p.num_n = static_cast<int>((a.n + BN - 1) / BN);
  p.num_tiles = p.num_m * p.num_n;
  QL_ASSIGN_OR_RETURN(unsigned grid, wgmma::grid_blocks(p.num_tiles, true));
  wgmma_fp8_persistent_kernel<BN><<<grid, kThreads, T::kSmemBytes, stream>>>(map_x, map_w, p);
  QL_CUDA_CHECK_LAUNCH("wgmma_fp8_persistent_kernel");
  return Status::ok();
}

}  // namespace qlinear::cuda::wgfp8
