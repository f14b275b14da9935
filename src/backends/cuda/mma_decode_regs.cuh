#pragma once
// The registers variant of the tensor-core decode GEMM, for M <= 16 (the decode, the MMA and the numerics are
// those of mma_decode.cuh; only the way the weights arrive differs).
//
// At small M the GEMM is a weight stream: what matters is how many weight bytes each SM keeps in flight. The
// pipelined kernel copies weights through shared memory with cp.async and a block barrier per 256 K, so a
// stage can only be refilled once every warp has finished it. Here each warp loads its own tile's packed words
// straight into registers with 16-byte ld.global.nc.L1::no_allocate loads, DEPTH slabs (of 128 K) ahead of the
// MMAs that use them: no barrier orders them, so they stay in flight while the block waits on anything else.
// Only the activations go through shared memory, in chunks of 1024 K shared by the block's 8 warps (cp.async,
// two buffers, one barrier per chunk).
//
// Work split: a block is 8 warps, each its own 16-row tile (128 rows per block), all over the block's K range
// (one split when split-K is on); grid (N blocks, splits, M tiles of 8 * TN tokens). Each warp's sums go
// straight to the output, or, with split-K, is added across the splits in one of two ways: the blocks of
// one N block's splits form a thread-block cluster (cluster_reduce; at most 8 splits) and rank 0 adds the
// others' sums from their shared memory in rank order (deterministic, one launch, no scratch); or each split
// writes FP32 partial sums that mma_decode_reduce_kernel adds in split order.
#include <cooperative_groups.h>

#include "backends/cuda/mma_decode.cuh"

namespace qlinear::cuda::mma_detail {

constexpr int kRegWarps = 8, kRegThreads = 32 * kRegWarps;
constexpr int kRegChunkSlabs = 8;  // K slabs per staged activation chunk
constexpr int kRegChunkK = kRegChunkSlabs * static_cast<int>(kMmaSlabK);

template <int TN>
constexpr int reg_chunk_bytes() {
  return 8 * TN * kRegChunkK * 2;
}

// Read-once data: not kept in L1 (the weights pass through each SM once).
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ld_stream8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// Blocks per SM the kernel is built for: two while the in-flight words (DEPTH x pieces x 4 registers) leave
// room under the 128 registers that allows, else one (E4M3 and FP6 at depth 4 spilled at two).
constexpr int reg_blocks_per_sm(MmaCode c, int depth) {
  return depth * static_cast<int>(mma_lane_bytes(c) / 16) <= 8 ? 2 : 1;
}

// Layers whose MX scales fold (or that have none to fold) only: the registers kernel has no promoted path.
template <MmaCode C, MmaScale S, int TN, int DEPTH>
__global__ void __launch_bounds__(kRegThreads, reg_blocks_per_sm(C, DEPTH))
    mma_decode_regs_kernel(const MmaDecodeArgs a, int slabs_per_split, float* __restrict__ partial,
                           bool cluster_reduce) {
  constexpr int kWords = CodeTraits<C>::kWords, kPieces = kWords / 4;
  constexpr int kUnitBytes = 32 * 4 * kWords;
  constexpr int kRec = static_cast<int>(mma_scale_record_bytes(S));
  constexpr int kXRows = 8 * TN;
  constexpr int kRowChunks = kRegChunkK / 8;  // 16-byte chunks per token row of a chunk
  constexpr int kChunkBytes = reg_chunk_bytes<TN>();
  constexpr int kBias = CodeTraits<C>::kBias;
  extern __shared__ __align__(128) uint8_t smem[];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n_tiles = a.layout.n_tiles(), k_slabs = a.layout.k_slabs();
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * kRegWarps + warp;
  const int64_t load_tile = min(tile, n_tiles - 1);  // a warp past N streams the last tile; its sums are dropped
  const int64_t m0 = static_cast<int64_t>(blockIdx.z) * kXRows;
  const int slab0 = blockIdx.y * slabs_per_split;
  const int slabs = max(0, min(slabs_per_split, static_cast<int>(k_slabs) - slab0));
  const uint8_t* wsrc = a.w + (load_tile * k_slabs + slab0) * kUnitBytes + lane * 16;
  const uint8_t* ssrc =
      kRec > 0 ? a.w_scale + ((load_tile * k_slabs + slab0) * kMmaScaleRecords + lane / 4) * kRec : nullptr;

  // Chunk c holds token rows m0 .. m0 + 8 TN - 1 at K from (slab0 + 8c) * 128, zero-filled beyond M and K;
  // 16-byte chunk j of row r sits at j ^ (r & 7), so the 8 rows one ldmatrix reads hit 8 bank groups.
  auto stage_x = [&](int chunk) {
    uint8_t* dst = smem + (chunk & 1) * kChunkBytes;
    const int64_t kcol0 = (static_cast<int64_t>(slab0) + chunk * kRegChunkSlabs) * kMmaSlabK;
    for (int i = threadIdx.x; i < kXRows * kRowChunks; i += kRegThreads) {
      const int r = i / kRowChunks, c = i % kRowChunks;
      const int64_t m = m0 + r, col = kcol0 + c * 8;
      const bool ok = m < a.m && col < a.layout.k;
      const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(a.x) + (ok ? m * a.ld_x + col : 0);
      cp_async16_zfill(dst + (r * kRowChunks + (c ^ (r & 7))) * 16, src, ok ? 16 : 0);
    }
    cp_async_commit();
  };

  uint4 wbuf[DEPTH][kPieces];
  uint4 sbuf[DEPTH];
  auto load_slab = [&](int d, int i) {
    const uint8_t* p = wsrc + static_cast<int64_t>(i) * kUnitBytes;
#pragma unroll
    for (int piece = 0; piece < kPieces; ++piece) wbuf[d][piece] = ld_stream16(p + piece * 512);
    if constexpr (kRec == 8) {
      const uint2 v = ld_stream8(ssrc + static_cast<int64_t>(i) * kMmaScaleRecords * kRec);
      sbuf[d] = make_uint4(v.x, v.y, 0, 0);
    } else if constexpr (kRec == 16) {
      sbuf[d] = ld_stream16(ssrc + static_cast<int64_t>(i) * kMmaScaleRecords * kRec);
    }
  };
#pragma unroll
  for (int d = 0; d < DEPTH; ++d) {
    if (d < slabs) load_slab(d, d);
  }
  if (slabs > 0) stage_x(0);

  float acc[TN][4];
#pragma unroll
  for (int tt = 0; tt < TN; ++tt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[tt][e] = 0.0f;

  const uint32_t e2m1_lo = C == MmaCode::kE2M1 ? e2m1_table_lo() : 0u;
  for (int i0 = 0; i0 < slabs; i0 += DEPTH) {
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      const int i = i0 + d;
      if (i >= slabs) break;  // the same for every thread of the block: the barrier below stays uniform
      if (i % kRegChunkSlabs == 0) {
        cp_async_wait<0>();
        __syncthreads();  // chunk i / 8 landed for all; every warp is done with the chunk before it
        if (i + kRegChunkSlabs < slabs) stage_x(i / kRegChunkSlabs + 1);
      }
      uint32_t w[kWords];
#pragma unroll
      for (int piece = 0; piece < kPieces; ++piece) {
        w[4 * piece] = wbuf[d][piece].x;
        w[4 * piece + 1] = wbuf[d][piece].y;
        w[4 * piece + 2] = wbuf[d][piece].z;
        w[4 * piece + 3] = wbuf[d][piece].w;
      }
      const uint4 sc = sbuf[d];
      if (i + DEPTH < slabs) load_slab(d, i + DEPTH);  // refill the slot before the math that frees it

      const uint8_t* xs = smem + ((i / kRegChunkSlabs) & 1) * kChunkBytes;
      const int chunk_slab = i % kRegChunkSlabs;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t b[TN][4];
#pragma unroll
        for (int tt = 0; tt < TN; ++tt) {
          const int row = tt * 8 + (lane & 7);
          const int chunk = chunk_slab * 16 + 4 * q + (lane >> 3);
          ldmatrix_x4(b[tt], xs + (row * kRowChunks + (chunk ^ (row & 7))) * 16);
        }
        uint32_t f[2][2];
        if constexpr (S == MmaScale::kRow) {
          f[0][0] = f[0][1] = f[1][0] = f[1][1] = bf16_pow2_pair(kBias + 127);
        } else if constexpr (S == MmaScale::kMx32) {
          f[0][0] = f[1][0] = bf16_pow2_pair(kBias + static_cast<int>((sc.x >> (8 * q)) & 0xFF));
          f[0][1] = f[1][1] = bf16_pow2_pair(kBias + static_cast<int>((sc.y >> (8 * q)) & 0xFF));
        } else {  // kNv16: group 2q + h of rows g (words x, y) and g+8 (words z, w)
          const uint32_t words[4] = {sc.x, sc.y, sc.z, sc.w};
#pragma unroll
          for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int gi = 2 * q + h;
              const uint32_t code = (words[2 * half + gi / 4] >> (8 * (gi % 4))) & 0xFF;
              const float v = codec::decode_e4m3(code) * 0x1p118f;
              f[h][half] = static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(v))) * 0x00010001u;
            }
          }
        }
        uint32_t af[2][4];
        decode_group<C>(w, q, f, af, e2m1_lo);
#pragma unroll
        for (int tt = 0; tt < TN; ++tt) {
          mma_bf16(acc[tt], af[0], b[tt][0], b[tt][1]);
          mma_bf16(acc[tt], af[1], b[tt][2], b[tt][3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  if (cluster_reduce) {
    namespace cg = cooperative_groups;
    __syncthreads();  // every warp is done with the activation chunks: their memory takes the sums
    float* red = reinterpret_cast<float*>(smem);  // [warp][tt][e][lane]
#pragma unroll
    for (int tt = 0; tt < TN; ++tt)
#pragma unroll
      for (int e = 0; e < 4; ++e) red[((warp * TN + tt) * 4 + e) * 32 + lane] = acc[tt][e];
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const unsigned rank = cluster.block_rank();
    if (rank == 0) {
      for (unsigned r = 1; r < cluster.num_blocks(); ++r) {
        const float* other = cluster.map_shared_rank(red, r);
#pragma unroll
        for (int tt = 0; tt < TN; ++tt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[tt][e] += other[((warp * TN + tt) * 4 + e) * 32 + lane];
      }
    }
    cluster.sync();  // the other ranks' shared memory stays until rank 0 has read it
    if (rank != 0) return;
  }
  if (tile >= n_tiles) return;

  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int tt = 0; tt < TN; ++tt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t row = tile * kMmaTileN + g + 8 * (e >> 1);
      const int64_t m = m0 + tt * 8 + 2 * t + (e & 1);
      if (row >= a.layout.n || m >= a.m) continue;
      if (partial != nullptr) {
        partial[(static_cast<int64_t>(blockIdx.y) * a.m + m) * a.layout.n + row] = acc[tt][e];
        continue;
      }
      const double bias = a.bias != nullptr ? load_bias(a.bias, a.bias_dtype, row) : 0.0;
      store_out(a.out, a.out_dtype, m * a.layout.n + row, epilogue_value<S>(acc[tt][e], epilogue_factor<S>(a, row, m), bias));
    }
  }
}

template <MmaCode C, MmaScale S, int TN, int DEPTH>
Status launch_regs_config(const MmaDecodeArgs& a, int splits, float* partial, Stream stream) {
  auto kernel = mma_decode_regs_kernel<C, S, TN, DEPTH>;
  constexpr int kSmem = 2 * reg_chunk_bytes<TN>();
  static std::atomic<uint64_t> attr_set{0};
  int device = 0;
  QL_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device & 63);
  if ((attr_set.load(std::memory_order_acquire) & bit) == 0) {
    QL_RETURN_IF_ERROR(check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
                             "cudaFuncSetAttribute(mma_decode_regs_kernel, MaxDynamicSharedMemorySize)"));
    attr_set.fetch_or(bit, std::memory_order_acq_rel);
  }
  const int64_t n_blocks = (a.layout.n_tiles() + kRegWarps - 1) / kRegWarps;
  const int64_t m_tiles = (a.m + 8 * TN - 1) / (8 * TN);
  const int total = static_cast<int>(a.layout.k_slabs());
  const int per_split = (total + splits - 1) / splits;
  const dim3 grid(static_cast<unsigned>(n_blocks), static_cast<unsigned>(splits), static_cast<unsigned>(m_tiles));
  if (partial != nullptr || splits == 1) {
    kernel<<<grid, kRegThreads, kSmem, stream>>>(a, per_split, partial, false);
    QL_CUDA_CHECK_LAUNCH("mma_decode_regs_kernel");
    return Status::ok();
  }
  // Split-K without partial sums: the splits of an N block are one cluster (at most 8).
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kRegThreads);
  cfg.dynamicSmemBytes = kSmem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = static_cast<unsigned>(splits);
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  QL_RETURN_IF_ERROR(check(cudaLaunchKernelEx(&cfg, kernel, a, per_split, static_cast<float*>(nullptr), true),
                           "cudaLaunchKernelEx(mma_decode_regs_kernel, split-K cluster)"));
  return Status::ok();
}

template <MmaCode C, MmaScale S>
Status launch_regs_scale(const MmaDecodeArgs& a, int token_tiles, int depth, int splits, float* partial,
                         Stream stream) {
  if (token_tiles == 1) {
    return depth == 2 ? launch_regs_config<C, S, 1, 2>(a, splits, partial, stream)
                      : launch_regs_config<C, S, 1, 4>(a, splits, partial, stream);
  }
  return depth == 2 ? launch_regs_config<C, S, 2, 2>(a, splits, partial, stream)
                    : launch_regs_config<C, S, 2, 4>(a, splits, partial, stream);
}

}  // namespace qlinear::cuda::mma_detail
