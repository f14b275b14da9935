// The warp-specialized wgmma FP8 GEMM (wgmma_fp8_gemm.hpp has the structure; wgmma_pipeline.cuh the pieces).
#include "backends/cuda/wgmma_fp8_gemm.hpp"

#include <cuda_bf16.h>

#include "backends/cuda/wgmma_pipeline.cuh"

namespace qlinear::cuda {

namespace {

using namespace wgmma;

struct Params {
  int64_t m, n, k, ld_out;
  const float* x_scale;
  bool x_scale_per_row;
  const float* w_scale;
  bool w_scale_per_col;
  __nv_bfloat16* out;
};

// The tile's outputs: register (j, i, c) of thread t (warp w, lane l) of math warpgroup g is row
// m0 + 64 g + 16 w + l / 4 + 8 i, column n0 + 8 j + 2 (l % 4) + c.
template <int BN>
__device__ __forceinline__ void store_tile(const Params& p, const float (&acc)[BN / 2], int m0, int n0, int g, int t) {
  const int warp = t / 32, lane = t % 32;
  const int64_t row0 = m0 + g * 64 + warp * 16 + lane / 4;
  const bool pairs = p.ld_out % 2 == 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t row = row0 + 8 * i;
    if (row >= p.m) continue;
    const float xs = p.x_scale[p.x_scale_per_row ? row : 0];
    __nv_bfloat16* out_row = p.out + row * p.ld_out;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int64_t col = n0 + 8 * j + 2 * (lane % 4);
      if (col >= p.n) continue;
      const float w0 = p.w_scale[p.w_scale_per_col ? col : 0];
      const float v0 = acc[4 * j + 2 * i] * xs * w0;
      if (col + 1 < p.n) {
        const float w1 = p.w_scale[p.w_scale_per_col ? col + 1 : 0];
        const float v1 = acc[4 * j + 2 * i + 1] * xs * w1;
        if (pairs) {
          *reinterpret_cast<__nv_bfloat162*>(out_row + col) = __floats2bfloat162_rn(v0, v1);
        } else {
          out_row[col] = __float2bfloat16_rn(v0);
          out_row[col + 1] = __float2bfloat16_rn(v1);
        }
      } else {
        out_row[col] = __float2bfloat16_rn(v0);
      }
    }
  }
}

template <int BN, bool kPromote>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_fp8_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w, Params p) {
  extern __shared__ uint8_t smem_raw[];
  Ring<BN> ring(smem_raw);
  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  const int num_kb = static_cast<int>((p.k + kBK - 1) / kBK);
  const int num_m = static_cast<int>((p.m + kBM - 1) / kBM);
  const TileOrder order{num_m, num_m * static_cast<int>((p.n + BN - 1) / BN)};
  if (threadIdx.x == 0) ring.init();
  __syncthreads();
  if (wg == 0) {
    if (t == 0) produce<BN>(ring, &map_x, &map_w, order, num_kb);
    return;
  }
  int it = 0;
  for (int tile = blockIdx.x; tile < order.num_tiles; tile += gridDim.x) {
    int m0, n0;
    order.coords(tile, BN, m0, n0);
    float acc[BN / 2];
    consume<BN, kPromote>(ring, wg - 1, t, num_kb, it, acc);
    store_tile<BN>(p, acc, m0, n0, wg - 1, t);
  }
}

template <int BN, bool kPromote>
Status launch(const CUtensorMap& map_x, const WgmmaFp8Args& a, const Params& p, bool persistent, Stream stream) {
  QL_ASSIGN_OR_RETURN(CUtensorMap map_w, byte_map(a.w, a.n, a.k, a.ld_w, BN));
  QL_RETURN_IF_ERROR(allow_smem(wgmma_fp8_kernel<BN, kPromote>, smem_bytes<BN>()));
  const int tiles = static_cast<int>((a.n + BN - 1) / BN * ((a.m + kBM - 1) / kBM));
  QL_ASSIGN_OR_RETURN(unsigned grid, grid_blocks(tiles, persistent));
  wgmma_fp8_kernel<BN, kPromote><<<grid, kThreads, smem_bytes<BN>(), stream>>>(map_x, map_w, p);
  QL_CUDA_CHECK_LAUNCH("wgmma_fp8_kernel");
  return Status::ok();
}

}  // namespace

Status launch_wgmma_fp8_gemm(const WgmmaFp8Args& a, Stream stream) {
  if (a.m == 0 || a.n == 0) return Status::ok();
  if (a.ld_x % 16 != 0 || a.ld_w % 16 != 0 || reinterpret_cast<uintptr_t>(a.x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.w) % 16 != 0) {
    return Status::error("wgmma_fp8_gemm: operand rows must start 16-byte aligned (TMA)");
  }
  QL_ASSIGN_OR_RETURN(CUtensorMap map_x, byte_map(a.x, a.m, a.k, a.ld_x, kBM));
  Params p{a.m, a.n, a.k, a.ld_out > 0 ? a.ld_out : a.n, a.x_scale, a.x_scale_per_row, a.w_scale, a.w_scale_per_col,
           static_cast<__nv_bfloat16*>(a.out)};
  switch (a.variant) {
    case WgmmaFp8Variant::kN128Promote: return launch<128, true>(map_x, a, p, a.persistent, stream);
    case WgmmaFp8Variant::kN128Fast: return launch<128, false>(map_x, a, p, a.persistent, stream);
    case WgmmaFp8Variant::kN256Fast: return launch<256, false>(map_x, a, p, a.persistent, stream);
  }
  return Status::ok();
}

}  // namespace qlinear::cuda
