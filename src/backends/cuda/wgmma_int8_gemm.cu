// The wgmma INT8 GEMM with the fused FP64 epilogue (wgmma_int8_gemm.hpp; wgmma_pipeline.cuh the pieces).
#include "backends/cuda/wgmma_int8_gemm.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/wgmma_pipeline.cuh"

namespace qlinear::cuda {

namespace {

using namespace wgmma;

__device__ __forceinline__ double load_bias(const void* bias, DType d, int64_t n) {
  switch (d) {
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[n]);
    case DType::kF16: return __half2float(static_cast<const __half*>(bias)[n]);
    default: return static_cast<const float*>(bias)[n];
  }
}

// Two adjacent outputs (col, col + 1), the second only when `both`.
__device__ __forceinline__ void store2(void* out, DType d, int64_t at, double y0, double y1, bool both, bool pair) {
  switch (d) {
    case DType::kBF16: {
      auto* o = static_cast<__nv_bfloat16*>(out) + at;
      if (both && pair) {
        *reinterpret_cast<__nv_bfloat162*>(o) = __halves2bfloat162(__double2bfloat16(y0), __double2bfloat16(y1));
      } else {
        o[0] = __double2bfloat16(y0);
        if (both) o[1] = __double2bfloat16(y1);
      }
      break;
    }
    case DType::kF16: {
      auto* o = static_cast<__half*>(out) + at;
      if (both && pair) {
        *reinterpret_cast<__half2*>(o) = __halves2half2(__double2half(y0), __double2half(y1));
      } else {
        o[0] = __double2half(y0);
        if (both) o[1] = __double2half(y1);
      }
      break;
    }
    default: {
      auto* o = static_cast<float*>(out) + at;
      if (both && pair) {
        *reinterpret_cast<float2*>(o) = make_float2(static_cast<float>(y0), static_cast<float>(y1));
      } else {
        o[0] = static_cast<float>(y0);
        if (both) o[1] = static_cast<float>(y1);
      }
      break;
    }
  }
}

// The tile's outputs: register (j, i, c) of thread t (warp w, lane l) of math warpgroup g is row
// m0 + 64 g + 16 w + l / 4 + 8 i, column n0 + 8 j + 2 (l % 4) + c.
template <int BN>
__device__ __forceinline__ void store_tile(const WgmmaInt8Args& p, const int32_t (&acc)[BN / 2], int m0, int n0,
                                           int g, int t) {
  const int warp = t / 32, lane = t % 32;
  const int64_t row0 = m0 + g * 64 + warp * 16 + lane / 4;
  const int64_t ld_out = p.ld_out > 0 ? p.ld_out : p.n;
  const bool pair = ld_out % 2 == 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t row = row0 + 8 * i;
    if (row >= p.m) continue;
    const double sx = p.x_scale == nullptr ? p.x_scale_value : p.x_scale[p.x_scale_per_row ? row : 0];
    const int64_t z = p.w_colsum == nullptr ? 0
                      : p.x_zero_point == nullptr ? p.x_zero_point_value
                                                  : p.x_zero_point[p.x_zero_point_per_row ? row : 0];
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int64_t col = n0 + 8 * j + 2 * (lane % 4);
      if (col >= p.n) continue;
      const bool both = col + 1 < p.n;
      double y[2];
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int64_t n = both || c == 0 ? col + c : col;
        int64_t v = acc[4 * j + 2 * i + c];
        if (z != 0) v -= z * p.w_colsum[n];
        y[c] = static_cast<double>(v) * (sx * static_cast<double>(p.w_scale[n]));
        if (p.bias != nullptr) y[c] += load_bias(p.bias, p.bias_dtype, n);
      }
      store2(p.out, p.out_dtype, row * ld_out + col, y[0], y[1], both, pair);
    }
  }
}

template <int BN>
__global__ void __launch_bounds__(kThreads, 1) wgmma_int8_kernel(const __grid_constant__ CUtensorMap map_x,
                                                                 const __grid_constant__ CUtensorMap map_w,
                                                                 WgmmaInt8Args p) {
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
    int32_t acc[BN / 2];
    consume<BN, false>(ring, wg - 1, t, num_kb, it, acc);  // exact: no promotion needed
    store_tile<BN>(p, acc, m0, n0, wg - 1, t);
  }
}

template <int BN>
Status launch(const WgmmaInt8Args& a, Stream stream) {
  QL_ASSIGN_OR_RETURN(CUtensorMap map_x, byte_map(a.x, a.m, a.k, a.ld_x, kBM));
  QL_ASSIGN_OR_RETURN(CUtensorMap map_w, byte_map(a.w, a.n, a.k, a.ld_w, BN));
  QL_RETURN_IF_ERROR(allow_smem(wgmma_int8_kernel<BN>, smem_bytes<BN>()));
  const int tiles = static_cast<int>((a.n + BN - 1) / BN * ((a.m + kBM - 1) / kBM));
  QL_ASSIGN_OR_RETURN(unsigned grid, grid_blocks(tiles, a.persistent));
  wgmma_int8_kernel<BN><<<grid, kThreads, smem_bytes<BN>(), stream>>>(map_x, map_w, a);
  QL_CUDA_CHECK_LAUNCH("wgmma_int8_kernel");
  return Status::ok();
}

}  // namespace

Status launch_wgmma_int8_gemm(const WgmmaInt8Args& a, Stream stream) {
  if (a.m == 0 || a.n == 0) return Status::ok();
  if (a.ld_x % 16 != 0 || a.ld_w % 16 != 0 || reinterpret_cast<uintptr_t>(a.x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.w) % 16 != 0) {
    return Status::error("wgmma_int8_gemm: operand rows must start 16-byte aligned (TMA)");
  }
  if (a.tile_n == 256) return launch<256>(a, stream);
  return launch<128>(a, stream);
}

}  // namespace qlinear::cuda
