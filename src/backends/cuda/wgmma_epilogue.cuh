#pragma once
// The epilogues of the persistent wgmma GEMMs (wgmma_persistent.cuh): the kernel parameters, FP8 (FP32:
// accumulator x x_scale x w_scale + bias, one rounding) and INT8 (the INT8 route's FP64 epilogue of
// int8_scaled_mm.hpp: zero point x column sums, scales, bias, one rounding; bit for bit the two-pass result).
// Both read the wgmma accumulator layout: register 4 j + 2 i + c of thread t (warp w, lane l) of math
// warpgroup g is row m0 + 64 g + 16 w + l / 4 + 8 i, column n0 + 8 j + 2 (l % 4) + c.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/wgmma_pipeline.cuh"

namespace qlinear::cuda::wgp {

using wgmma::kBK;
using wgmma::kBM;

enum class Mode : int { kFp8, kFp8Fast, kInt8 };
template <Mode M>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<Mode::kInt8> {
  using type = int32_t;
};

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
  // INT8: x_scale null -> x_scale_value; zero points per row, one pointed-to value, or x_zp_value; w_colsum
  // null when every zero point is 0.
  float x_scale_value;
  const int32_t* x_zero_point;
  int x_zp_per_row, x_zp_value;
  const int64_t* w_colsum;
  int pdl;  // launched with programmatic stream serialization after the kernel that writes x / its scales
  // Fused activation quantization (wgmma_quant.cuh; q_mode 0: none): BF16 rows q_src (q_ld_src elements
  // apart, q_k long) -> E4M3 codes q_codes (q_ld_codes apart: the x of the tensor map) and per-token scales
  // q_scale_out; ready: finished rows per row block. first_group: row units of the first tile group (0: as
  // the others).
  int q_mode, q_k;
  const void* q_src;
  int64_t q_ld_src, q_ld_codes;
  float q_static_scale;
  uint8_t* q_codes;
  float* q_scale_out;
  int* ready;
  int first_group;
};

// Scales, column sums and bias are read-only for the kernel's life: read through the non-coherent path,
// which the compiler may schedule ahead of the output stores (plain loads could alias them and would wait
// for every store before, one L2 round trip per column: that cost more than the MMAs of a tile).
__device__ __forceinline__ float load_bias(const Params& p, int col) {
  switch (p.bias_kind) {
    case kBiasBf16: return __bfloat162float(__ldg(static_cast<const __nv_bfloat16*>(p.bias) + col));
    case kBiasF16: return __half2float(__ldg(static_cast<const __half*>(p.bias) + col));
    case kBiasF32: return __ldg(static_cast<const float*>(p.bias) + col);
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

// FP8: y = acc * x_scale * w_scale + bias in FP32: first every accumulator is scaled in place (all the
// loads, none waits for a store), then the tile is converted and stored.
template <int BN>
__device__ __forceinline__ void store_tile(const Params& p, float (&acc)[BN / 2], int m0, int n0, int g, int t) {
  const int warp = t / 32, lane = t % 32;
  const int row0 = m0 + g * 64 + warp * 16 + lane / 4;
  float xs[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = min(row0 + 8 * i, p.m - 1);
    xs[i] = p.x_scale == nullptr ? p.x_scale_value : p.x_scale[p.x_scale_per_row ? row : 0];
  }
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int c0 = min(n0 + 8 * j + 2 * (lane % 4), p.n - 1), c1 = min(c0 + 1, p.n - 1);
    const float ws0 = __ldg(p.w_scale + (p.w_scale_per_col ? c0 : 0));
    const float ws1 = __ldg(p.w_scale + (p.w_scale_per_col ? c1 : 0));
    const float b0 = load_bias(p, c0), b1 = load_bias(p, c1);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      acc[4 * j + 2 * i] = acc[4 * j + 2 * i] * xs[i] * ws0 + b0;
      acc[4 * j + 2 * i + 1] = acc[4 * j + 2 * i + 1] * xs[i] * ws1 + b1;
    }
  }
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int col = n0 + 8 * j + 2 * (lane % 4);
    if (col >= p.n) continue;
    const bool both = col + 1 < p.n;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 8 * i;
      if (row >= p.m) continue;
      store_out(p, static_cast<int64_t>(row) * p.ld_out + col, acc[4 * j + 2 * i], acc[4 * j + 2 * i + 1], both);
    }
  }
}

// INT8: y = (acc - z colsum[n]) * (s_x * s_w[n]) + bias[n] in FP64, as launch_int8_epilogue computes it.
// Each warp stages its 16 rows x 64 columns of accumulators at a time in shared memory (buf, 4 KiB) and
// finishes them in a loop over the chunk (not unrolled: unrolled over the whole tile, the FP64 arithmetic
// cost nvcc minutes per instantiation), lanes on consecutive columns (coalesced stores).
constexpr int kInt8EpiCols = 64;
constexpr int kInt8EpiWarpWords = 16 * kInt8EpiCols;
constexpr int kInt8EpiBytes = 8 * kInt8EpiWarpWords * 4;  // 8 math warps

__device__ __forceinline__ void finish_int8_chunk(const Params& p, const int32_t* buf, int row0, int col0, int lane) {
#pragma unroll 4
  for (int e = lane; e < kInt8EpiWarpWords; e += 32) {
    const int row = row0 + e / kInt8EpiCols, col = col0 + e % kInt8EpiCols;
    if (row >= p.m || col >= p.n) continue;
    const double sx = p.x_scale == nullptr ? p.x_scale_value : __ldg(p.x_scale + (p.x_scale_per_row ? row : 0));
    const int64_t z = p.w_colsum == nullptr          ? 0
                      : p.x_zero_point == nullptr    ? p.x_zp_value
                                                     : __ldg(p.x_zero_point + (p.x_zp_per_row ? row : 0));
    int64_t v = buf[e];
    if (z != 0) v -= z * __ldg(p.w_colsum + col);
    // Rounded operation by operation as the route's epilogue (int8_epilogue_value): no FMA contraction.
    double y = __dmul_rn(static_cast<double>(v), __dmul_rn(sx, static_cast<double>(__ldg(p.w_scale + col))));
    if (p.bias_kind != kBiasNone) y = __dadd_rn(y, static_cast<double>(load_bias(p, col)));
    const int64_t at = static_cast<int64_t>(row) * p.ld_out + col;
    if (p.out_kind == kOutBf16) {
      static_cast<__nv_bfloat16*>(p.out)[at] = __double2bfloat16(y);
    } else if (p.out_kind == kOutF16) {
      static_cast<__half*>(p.out)[at] = __double2half(y);
    } else {
      static_cast<float*>(p.out)[at] = static_cast<float>(y);
    }
  }
}

template <int BN>
__device__ __forceinline__ void store_tile_int8(const Params& p, const int32_t (&acc)[BN / 2], int m0, int n0, int g,
                                                int t, int32_t* buf) {
  const int warp = t / 32, lane = t % 32;
  const int row0 = m0 + g * 64 + warp * 16;
#pragma unroll
  for (int q = 0; q < BN / kInt8EpiCols; ++q) {
#pragma unroll
    for (int j = 0; j < kInt8EpiCols / 8; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int at = (lane / 4 + 8 * i) * kInt8EpiCols + 8 * j + 2 * (lane % 4);
        const int r = 4 * (q * (kInt8EpiCols / 8) + j) + 2 * i;
        *reinterpret_cast<int2*>(buf + at) = make_int2(acc[r], acc[r + 1]);
      }
    }
    __syncwarp();
    finish_int8_chunk(p, buf, row0, n0 + q * kInt8EpiCols, lane);
    __syncwarp();
  }
}

}  // namespace qlinear::cuda::wgp
