// Dequantization to BF16 and the column-block epilogue (dequant_bf16.hpp). Memory-bound: each thread
// writes 8 consecutive BF16 values (one 16-byte store) of one row.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/dequant_bf16.hpp"
#include "backends/cuda/fp_codec.cuh"
#include "backends/cuda/mma_epilogue_math.hpp"

namespace qlinear::cuda {

namespace {

constexpr int kThreads = 256;

// Code j of a row, unpacked as the checkpoint packs it: bytes (E4M3), two per byte low nibble first
// (E2M1), a little-endian stream of 6-bit fields (FP6: code j at bit 6 j).
template <WeightFormat F>
__device__ __forceinline__ float code_value(const uint8_t* __restrict__ row, int64_t j) {
  if constexpr (F == WeightFormat::kE4M3) {
    return codec::decode_e4m3(row[j]);
  } else if constexpr (F == WeightFormat::kE2M1) {
    const uint32_t b = row[j >> 1];
    return codec::decode_e2m1((j & 1) ? b >> 4 : b & 0xFu);
  } else {
    const int64_t bit = 6 * j;
    const int64_t byte = bit >> 3;
    const int shift = static_cast<int>(bit & 7);
    uint32_t v = row[byte];
    if (shift > 2) v |= static_cast<uint32_t>(row[byte + 1]) << 8;
    const uint32_t code = (v >> shift) & 0x3Fu;
    return F == WeightFormat::kE2M3 ? codec::decode_e2m3(code) : codec::decode_e3m2(code);
  }
}

template <WeightFormat F>
__global__ void dequant_bf16_kernel(DequantArgs a) {
  const int64_t per_row = a.k / 8;
  const int64_t total = a.rows * per_row;
  for (int64_t t = blockIdx.x * int64_t{kThreads} + threadIdx.x; t < total; t += int64_t{gridDim.x} * kThreads) {
    const int64_t r = t / per_row, j0 = (t % per_row) * 8;
    const uint8_t* row = a.codes + r * a.row_bytes;
    const float s = a.scale_kind == DequantScale::kMx32 ? codec::decode_e8m0(a.scales[r * a.ld_scales + j0 / 32]) : 1.0f;
    __align__(16) __nv_bfloat16 v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __float2bfloat16_rn(code_value<F>(row, j0 + i) * s);
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(a.out) + r * a.ld_out + j0) = *reinterpret_cast<const uint4*>(v);
  }
}

__device__ __forceinline__ double load_bias(const void* bias, DType d, int64_t n) {
  switch (d) {
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[n]);
    case DType::kF16: return __half2float(static_cast<const __half*>(bias)[n]);
    default: return static_cast<const float*>(bias)[n];
  }
}

// The decode kernels' f64 epilogue (mma_epilogue_math.hpp). Memory-bound: a few f64 operations per element
// cost far less than its loads and stores.
__global__ void scale_bias_kernel(const float* __restrict__ acc, int64_t m, int64_t n, const EpilogueScales sc,
                                  const void* __restrict__ bias, DType bias_dtype, void* __restrict__ out,
                                  DType out_dtype, int64_t ld_out) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total; i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = i / n, c = i % n;
    const MmaFactor col = sc.col_f32 != nullptr ? mma_multiplier(sc.col_f32[c]) : sc.col != nullptr ? sc.col[c] : mma_no_row_factor();
    const MmaFactor f = mma_epilogue_factor(
        col, sc.activation != nullptr ? sc.activation[r * sc.activation_stride] : mma_no_activation_factor());
    const double y = mma_epilogue_value(acc[i], f, bias != nullptr ? load_bias(bias, bias_dtype, c) : 0.0);
    const int64_t o = r * ld_out + c;
    switch (out_dtype) {
      case DType::kBF16: static_cast<__nv_bfloat16*>(out)[o] = __double2bfloat16(y); break;
      case DType::kF16: static_cast<__half*>(out)[o] = __double2half(y); break;
      default: static_cast<float*>(out)[o] = __double2float_rn(y); break;
    }
  }
}

unsigned grid_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 132 * 16 ? 132 * 16 : blocks));
}

}  // namespace

void bf16_exact_mx_range(WeightFormat format, int& lo, int& hi) {
  // Smallest code's lowest bit 2^-b and largest code c_max = 1.x * 2^t: need e - 127 - b >= -133 (BF16's
  // smallest subnormal) and t + e - 127 <= 127.
  switch (format) {
    case WeightFormat::kE4M3: lo = 3; hi = 246; break;   // b = 9, 448 = 1.75 * 2^8
    case WeightFormat::kE2M3: lo = 0; hi = 252; break;   // b = 3, 7.5 = 1.875 * 2^2
    case WeightFormat::kE3M2: lo = 0; hi = 250; break;   // b = 4, 28 = 1.75 * 2^4
    case WeightFormat::kE2M1: lo = 0; hi = 252; break;   // b = 1, 6 = 1.5 * 2^2
  }
}

Status launch_dequant_bf16(const DequantArgs& a, Stream stream) {
  if (a.rows == 0 || a.k == 0) return Status::ok();
  if (a.k % 8 != 0 || a.ld_out % 8 != 0 || reinterpret_cast<uintptr_t>(a.out) % 16 != 0) {
    return Status::error("dequant_bf16: K and the output row length must be multiples of 8 (16-byte stores)");
  }
  const unsigned blocks = grid_for(a.rows * a.k / 8);
  switch (a.format) {
    case WeightFormat::kE4M3: dequant_bf16_kernel<WeightFormat::kE4M3><<<blocks, kThreads, 0, stream>>>(a); break;
    case WeightFormat::kE2M3: dequant_bf16_kernel<WeightFormat::kE2M3><<<blocks, kThreads, 0, stream>>>(a); break;
    case WeightFormat::kE3M2: dequant_bf16_kernel<WeightFormat::kE3M2><<<blocks, kThreads, 0, stream>>>(a); break;
    case WeightFormat::kE2M1: dequant_bf16_kernel<WeightFormat::kE2M1><<<blocks, kThreads, 0, stream>>>(a); break;
  }
  QL_CUDA_CHECK_LAUNCH("dequant_bf16_kernel");
  return Status::ok();
}

Status launch_scale_bias_epilogue(const float* acc, int64_t m, int64_t n, const EpilogueScales& scales,
                                  const void* bias, DType bias_dtype, void* out, DType out_dtype, int64_t ld_out,
                                  Stream stream) {
  if (m * n == 0) return Status::ok();
  if (scales.col_f32 != nullptr && scales.col != nullptr) {
    return Status::error("scale_bias_epilogue: column factors given both as f32 scales and as MmaFactors");
  }
  scale_bias_kernel<<<grid_for(m * n), kThreads, 0, stream>>>(acc, m, n, scales, bias, bias_dtype, out, out_dtype,
                                                              ld_out);
  QL_CUDA_CHECK_LAUNCH("scale_bias_kernel");
  return Status::ok();
}

}  // namespace qlinear::cuda
