#pragma once
// Device code of the persistent warp-specialized wgmma GEMMs (wgmma_fp8_gemm.hpp has the structure; the
// INT8 GEMM of wgmma_int8_gemm.hpp runs the same skeleton with exact S32 accumulators): the tile order,
// the producer, the math warpgroups' main loop, the launch. The epilogues are in wgmma_epilogue.cuh. One
// instantiation per .cu (wgmma_fp8_gemm_n<BN>*.cu, wgmma_int8_gemm_n<BN>*.cu), so they compile in parallel.
#include <algorithm>
#include <string>

#include "backends/cuda/wgmma_epilogue.cuh"
#include "backends/cuda/wgmma_quant.cuh"

namespace qlinear::cuda::wgp {

using wgmma::kBK;
using wgmma::kBM;
constexpr int kThreads = 384;  // producer warpgroup + two math warpgroups
constexpr int kMathWarps = 8;
// Registers per thread after setmaxnreg: 128 x 56 + 256 x 224 <= the 64 K a 384-thread block gets at
// launch (168 each). A 256-column tile keeps 128 accumulators and a 64-register promotion half, a 192-column
// tile 96 + 96; the producer warpgroup's quantizing warps spill at 40.
constexpr int kProducerRegs = 56, kMathRegs = 224;
constexpr int kSmemLimit = 227 * 1024;  // a block's dynamic shared memory on sm_90
constexpr int kSmemReserve = 1024 + 256;  // alignment of the ring, barriers

// The ring of 4-6 stages, then (INT8) the epilogue's staging buffer or (FP8) the fused quantization's
// buffers, then the barriers.
template <int BN, Mode M>
struct Tile {
  static_assert(BN == 128 || BN == 192 || BN == 256, "tile width");
  static constexpr int kXBytes = kBM * kBK;
  static constexpr int kStageBytes = kXBytes + BN * kBK;
  static constexpr int kEpiBytes = M == Mode::kInt8 ? kInt8EpiBytes : 0;
  static constexpr int kQuantBytes = M == Mode::kInt8 ? 0 : kQuantSmemBytes;
  static constexpr int kFit = (kSmemLimit - kSmemReserve - kEpiBytes - kQuantBytes) / kStageBytes;
  static constexpr int kStages = kFit < 6 ? kFit : 6;
  static_assert(kStages >= 4, "a ring of at least 4 stages");
  static constexpr int kChunk = BN == 256 ? 128 : BN;  // columns promoted per step
  static constexpr int kSmemBytes =
      kStages * kStageBytes + kEpiBytes + kQuantBytes + (2 * kStages + kQuantBarriers) * 8 + 1024;
};

// Tile t -> (row unit, column block): groups of group_m row units, column blocks outer inside a group,
// row units inner, so consecutive tiles (the blocks running together) share w columns and x rows. A row
// unit is CM row blocks (one per block of a cluster).
__device__ __forceinline__ void tile_coords(const Params& p, int t, int& mu, int& nb) {
  const int head = p.first_group * p.num_n;
  if (t < head) {
    mu = t % p.first_group;
    nb = t / p.first_group;
    return;
  }
  const int base = p.first_group;
  t -= head;
  const int per_group = p.group_m * p.num_n;
  const int g = t / per_group;
  const int first = base + g * p.group_m;
  const int rows = min(p.group_m, p.num_m - first);
  const int r = t - g * per_group;
  mu = first + r % rows;
  nb = r / rows;
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
// Mode: kFp8 promotes every 128 K; kFp8Fast (a benchmark diagnostic of the promotion's cost, not the
// route's numerics) and kInt8 (exact) accumulate across K in the tensor cores, one group in flight.
template <int BN, int CM, Mode M>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_persistent_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                                const Params p) {
  using T = Tile<BN, M>;
  constexpr int S = T::kStages;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  int32_t* epi = reinterpret_cast<int32_t*>(smem + S * T::kStageBytes);
  uint8_t* qbufs = smem + S * T::kStageBytes + T::kEpiBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(qbufs + T::kQuantBytes);
  uint64_t* empty = full + S;
  uint64_t* qbars = empty + S;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  const uint32_t rank = CM > 1 ? cluster_rank() : 0;
  const int first_tile = static_cast<int>(blockIdx.x) / CM, tile_step = static_cast<int>(gridDim.x) / CM;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      wgmma::mbar_init(&full[s], 1);
      wgmma::mbar_init(&empty[s], kMathWarps * CM);  // one arrive per math warp of every block of the cluster
    }
    for (int b = 0; b < kQuantBarriers; ++b) wgmma::mbar_init(&qbars[b], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if constexpr (CM > 1) {
    cluster_sync();  // the peer's barriers exist before its first multicast lands here
  } else {
    __syncthreads();
  }
  // Launched with programmatic stream serialization (Params::pdl), the set-up above overlapped the end of
  // the previous kernel (the activation quantization); nothing it writes is read before this point.
  asm volatile("griddepcontrol.wait;" ::: "memory");

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    const int warp = t / 32;
    if constexpr (M != Mode::kInt8) {
      if (warp >= 1 && p.q_mode != kQuantNone) {
        const int qw = warp - 1;
        quantize_rows(p, qbufs + qw * kQuantBuffers * kQuantChunk, qbars + qw * kQuantBuffers,
                      static_cast<int>(blockIdx.x) * kQuantWarps + qw, static_cast<int>(gridDim.x) * kQuantWarps,
                      t % 32);
      }
    }
    if (t == 0) {
      // The producer: K slices of every tile of this block, in order; `it` counts slices across tiles (the
      // ring position and its phase), so the next tile's loads start while the math warpgroups finish.
      int it = 0;
      for (int tile = first_tile; tile < p.num_tiles; tile += tile_step) {
        int mu, nb;
        tile_coords(p, tile, mu, nb);
        const int mb = mu * CM + static_cast<int>(rank);
        if (p.q_mode != kQuantNone) wait_rows_ready(p, mb);
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
    constexpr bool kPromote = M == Mode::kFp8;
    using Acc = typename AccOf<M>::type;
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
      Acc acc[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0;
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
      // Fused per-token scales come from other blocks: acquire them as the producer did the codes.
      if (p.q_mode == kQuantToken && mb * kBM < p.m) (void)ld_acquire(p.ready + mb);
      if constexpr (M == Mode::kInt8) {
        store_tile_int8<BN>(p, acc, mb * kBM, nb * BN, g, t, epi + (t / 32 + 4 * g) * kInt8EpiWarpWords);
      } else {
        store_tile<BN>(p, acc, mb * kBM, nb * BN, g, t);
      }
    }
  }
  if constexpr (CM > 1) cluster_sync();  // no block leaves while its peer may still arrive on its barriers
}

// Launches the kernel of (BN, CM, M) (each defined in its own .cu).
template <int BN, int CM, Mode M>
Status launch_tile(const CUtensorMap& map_x, const void* w, int64_t ld_w, int64_t n, int64_t k, Params p,
                   Stream stream);
#define QL_WGMMA_TILE(BN, CM, M)                                                                            \
  template <>                                                                                               \
  Status launch_tile<BN, CM, M>(const CUtensorMap& map_x, const void* w, int64_t ld_w, int64_t n, int64_t k, \
                                Params p, Stream stream)
QL_WGMMA_TILE(128, 1, Mode::kFp8);
QL_WGMMA_TILE(192, 1, Mode::kFp8);
QL_WGMMA_TILE(256, 1, Mode::kFp8);
QL_WGMMA_TILE(256, 1, Mode::kFp8Fast);
QL_WGMMA_TILE(128, 2, Mode::kFp8);
QL_WGMMA_TILE(192, 2, Mode::kFp8);
QL_WGMMA_TILE(256, 2, Mode::kFp8);
QL_WGMMA_TILE(128, 1, Mode::kInt8);
QL_WGMMA_TILE(256, 1, Mode::kInt8);
QL_WGMMA_TILE(256, 2, Mode::kInt8);

template <int BN, int CM, Mode M>
Status launch_tile_impl(const CUtensorMap& map_x, const void* w, int64_t ld_w, int64_t n, int64_t k, Params p,
                        Stream stream) {
  using T = Tile<BN, M>;
  auto* kernel = wgmma_persistent_kernel<BN, CM, M>;
  QL_ASSIGN_OR_RETURN(CUtensorMap map_w, wgmma::byte_map(w, n, k, ld_w, BN / CM));
  QL_RETURN_IF_ERROR(wgmma::allow_smem(kernel, T::kSmemBytes));
  p.num_n = static_cast<int>((n + BN - 1) / BN);
  p.num_m = (p.num_m + CM - 1) / CM;  // row units of CM row blocks
  if (p.group_m > p.num_m) p.group_m = p.num_m;
  p.num_tiles = p.num_m * p.num_n;
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[2];
  const bool pdl = p.pdl != 0;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = T::kSmemBytes;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CM;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 0;
  if constexpr (CM > 1) cfg.numAttrs = 1;
  if (pdl) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
    ++cfg.numAttrs;
  }
  // One block per multiprocessor; clusters: as many as fit at once (a GPC with an odd count keeps one idle).
  QL_ASSIGN_OR_RETURN(unsigned sms, wgmma::grid_blocks(1 << 30, true));
  unsigned units = sms / CM;
  if constexpr (CM > 1) {
    // Clusters that fit at once (a GPC with an odd count of free multiprocessors keeps one idle), per device.
    int device = 0;
    QL_CUDA_CHECK(cudaGetDevice(&device));
    static std::atomic<int> known[64] = {};
    int clusters = device < 64 ? known[device].load(std::memory_order_relaxed) : 0;
    if (clusters == 0) {
      cfg.gridDim = dim3(sms / CM * CM);
      QL_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
      if (device < 64 && clusters > 0) known[device].store(clusters, std::memory_order_relaxed);
    }
    if (clusters > 0) units = static_cast<unsigned>(clusters);
  }
  if (units > static_cast<unsigned>(p.num_tiles)) units = static_cast<unsigned>(p.num_tiles);
  // Fused quantization: the first wave's tiles span as few row blocks as fill it, so it waits for few rows.
  if (p.q_mode != kQuantNone) {
    p.first_group = std::min<int>(p.num_m, (static_cast<int>(units) + p.num_n - 1) / p.num_n);
  }
  cfg.gridDim = dim3(units * CM);
  QL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, map_x, map_w, p));
  QL_CUDA_CHECK_LAUNCH("wgmma_persistent_kernel");
  return Status::ok();
}

// The checks and the grid fields both GEMMs share (what the TMA maps and the 32-bit tile indices need): the
// operands' rows 16-byte aligned, M, N, K below 2^30; p's m, n, num_kb, num_m and group_m.
inline Status grid_params(const char* gemm, int64_t m, int64_t n, int64_t k, const void* x, int64_t ld_x,
                          const void* w, int64_t ld_w, int group_m, Params& p) {
  if (k <= 0) return Status::error(std::string(gemm) + ": K must be positive");
  if (ld_x % 16 != 0 || ld_w % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0) {
    return Status::error(std::string(gemm) + ": operand rows must start 16-byte aligned (TMA)");
  }
  if (m > (int64_t{1} << 30) || n > (int64_t{1} << 30) || k > (int64_t{1} << 30)) {
    return Status::error(std::string(gemm) + ": M, N and K must be below 2^30");
  }
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(n);
  p.num_kb = static_cast<int>((k + kBK - 1) / kBK);
  p.num_m = static_cast<int>((m + kBM - 1) / kBM);
  p.group_m = group_m > 0 ? group_m : 16;
  return Status::ok();
}

}  // namespace qlinear::cuda::wgp
