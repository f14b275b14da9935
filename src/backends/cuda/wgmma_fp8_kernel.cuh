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

// Tile t -> (row unit, column block): groups of group_m row units, column blocks outer inside a group,
// row units inner, so consecutive tiles (the blocks running together) share w columns and x rows. A row
// unit is CM row blocks (one per block of a cluster).
__device__ __forceinline__ void tile_coords(const Params& p, int t, int& mu, int& nb) {
  const int per_group = p.group_m * p.num_n;
  const int g = t / per_group;
  const int first = g * p.group_m;
  const int rows = min(p.group_m, p.num_m - first);
  const int r = t - g * per_group;
  mu = first + r % rows;
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

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// Arrives on the barrier at `bar`'s offset in block `rank` of the cluster.
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(wgmma::smem_addr(bar)), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
// tma_load into the same offset of every block in `mask`, completing on each one's barrier at `bar`'s offset.
__device__ __forceinline__ void tma_load_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                                   uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, "
      "%4}], [%2], %5;" ::"r"(wgmma::smem_addr(dst)),
      "l"(map), "r"(wgmma::smem_addr(bar)), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}

// CM: blocks per cluster along M (1, or 2: the pair shares the w tile, each block loading half of it and
// multicasting it to both, so each block reads 2/3 (BN = 256) of the bytes it would alone from the L2).
// kPromote = false: the tensor cores accumulate across K (fast accumulation; a benchmark diagnostic of the
// promotion's cost, not the route's numerics).
template <int BN, int CM, bool kPromote>
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
  const uint32_t rank = CM > 1 ? cluster_rank() : 0;
  const int first_tile = static_cast<int>(blockIdx.x) / CM, tile_step = static_cast<int>(gridDim.x) / CM;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      wgmma::mbar_init(&full[s], 1);
      wgmma::mbar_init(&empty[s], kMathWarps * CM);  // one arrive per math warp of every block of the cluster
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if constexpr (CM > 1) {
    cluster_sync();  // the peer's barriers exist before its first multicast lands here
  } else {
    __syncthreads();
  }

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (t == 0) {
      // The producer: K slices of every tile of this block, in order; `it` counts slices across tiles (the
      // ring position and its phase), so the next tile's loads start while the math warpgroups finish.
      int it = 0;
      for (int tile = first_tile; tile < p.num_tiles; tile += tile_step) {
        int mu, nb;
        tile_coords(p, tile, mu, nb);
        const int mb = mu * CM + static_cast<int>(rank);
        for (int kb = 0; kb < p.num_kb; ++kb, ++it) {
          const int s = it % S;
          wgmma::mbar_wait(&empty[s], ((it / S) & 1) ^ 1);  // a fresh barrier counts as released
          wgmma::mbar_arrive_expect_tx(&full[s], T::kStageBytes);
          uint8_t* stage = smem + s * T::kStageBytes;
          wgmma::tma_load(stage, &map_x, &full[s], kb * kBK, mb * kBM);
          if constexpr (CM == 1) {
            wgmma::tma_load(stage + T::kXBytes, &map_w, &full[s], kb * kBK, nb * BN);
          } else {
            constexpr int kPart = BN / CM;
            tma_load_multicast(stage + T::kXBytes + rank * kPart * kBK, &map_w, &full[s], kb * kBK,
                               nb * BN + static_cast<int>(rank) * kPart, static_cast<uint16_t>((1u << CM) - 1));
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kMathRegs));
    const int g = wg - 1;
    const int lane = t % 32;
    constexpr int kChunks = kPromote ? BN / T::kChunk : 1;
    constexpr int kPartRegs = kPromote ? T::kChunk / 2 : 1;
    // The stage is read: release it (in every block of the cluster, whose producers write into it).
    const auto release = [&](int s) {
      if (lane != 0) return;
      if constexpr (CM == 1) {
        wgmma::mbar_arrive(&empty[s]);
      } else {
#pragma unroll
        for (int r = 0; r < CM; ++r) mbar_arrive_cluster(&empty[s], static_cast<uint32_t>(r));
      }
    };
    int it = 0;
    for (int tile = first_tile; tile < p.num_tiles; tile += tile_step) {
      int mu, nb;
      tile_coords(p, tile, mu, nb);
      const int mb = mu * CM + static_cast<int>(rank);
      float acc[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
      if constexpr (kPromote) {
        float part[kPartRegs];
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
            for (int kk = 0; kk < kBK / 32; ++kk) wgmma::wgmma_m64k32(part, da + 2 * kk, db + 2 * kk, kk);  // +32 B
            wgmma::wgmma_commit();
            wgmma::wgmma_wait<0>();
            wgmma::fence_regs(part);
            if (c == kChunks - 1) release(s);
#pragma unroll
            for (int i = 0; i < kPartRegs; ++i) acc[c * kPartRegs + i] += part[i];
          }
        }
      } else {
        for (int kb = 0; kb < p.num_kb; ++kb, ++it) {
          const int s = it % S;
          wgmma::mbar_wait(&full[s], (it / S) & 1);
          const uint8_t* stage = smem + s * T::kStageBytes;
          const uint64_t da = wgmma::smem_desc(stage + g * 64 * kBK);
          const uint64_t db = wgmma::smem_desc(stage + T::kXBytes);
          wgmma::fence_regs(acc);
          wgmma::wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < kBK / 32; ++kk) wgmma::wgmma_m64k32(acc, da + 2 * kk, db + 2 * kk, 1);
          wgmma::wgmma_commit();
          wgmma::wgmma_wait<1>();  // the previous slice's group is done: release its stage
          if (kb > 0) release((it - 1) % S);
        }
        wgmma::wgmma_wait<0>();
        wgmma::fence_regs(acc);
        if (p.num_kb > 0) release((it - 1) % S);
      }
      store_tile<BN>(p, acc, mb * kBM, nb * BN, g, t);
    }
  }
  if constexpr (CM > 1) cluster_sync();  // no block leaves while its peer may still arrive on its barriers
}

// Launches the kernel of (BN, CM, kPromote) (defined in wgmma_fp8_gemm_n<BN>*.cu).
template <int BN, int CM, bool kPromote>
Status launch_tile(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream);
template <>
Status launch_tile<128, 1, true>(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream);
template <>
Status launch_tile<192, 1, true>(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream);
template <>
Status launch_tile<256, 1, true>(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream);
template <>
Status launch_tile<256, 1, false>(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream);
template <>
Status launch_tile<128, 2, true>(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream);
template <>
Status launch_tile<256, 2, true>(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream);

template <int BN, int CM, bool kPromote>
Status launch_tile_impl(const WgmmaFp8Args& a, const CUtensorMap& map_x, Params p, Stream stream) {
  using T = Tile<BN>;
  auto* kernel = wgmma_fp8_persistent_kernel<BN, CM, kPromote>;
  QL_ASSIGN_OR_RETURN(CUtensorMap map_w, wgmma::byte_map(a.w, a.n, a.k, a.ld_w, BN / CM));
  QL_RETURN_IF_ERROR(wgmma::allow_smem(kernel, T::kSmemBytes));
  p.num_n = static_cast<int>((a.n + BN - 1) / BN);
  p.num_m = (p.num_m + CM - 1) / CM;  // row units of CM row blocks
  if (p.group_m > p.num_m) p.group_m = p.num_m;
  p.num_tiles = p.num_m * p.num_n;
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[1];
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = T::kSmemBytes;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CM;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = CM > 1 ? 1 : 0;
  // One block per multiprocessor; clusters: as many as fit at once (a GPC with an odd count keeps one idle).
  QL_ASSIGN_OR_RETURN(unsigned sms, wgmma::grid_blocks(1 << 30, true));
  unsigned units = sms / CM;
  if constexpr (CM > 1) {
    cfg.gridDim = dim3(sms / CM * CM);
    int clusters = 0;
    QL_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
    if (clusters > 0) units = static_cast<unsigned>(clusters);
  }
  if (units > static_cast<unsigned>(p.num_tiles)) units = static_cast<unsigned>(p.num_tiles);
  cfg.gridDim = dim3(units * CM);
  QL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, map_x, map_w, p));
  QL_CUDA_CHECK_LAUNCH("wgmma_fp8_persistent_kernel");
  return Status::ok();
}

}  // namespace qlinear::cuda::wgfp8
