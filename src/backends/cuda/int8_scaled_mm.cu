// INT8 activation quantization and the INT8 GEMM epilogue (int8_scaled_mm.hpp). Both memory-bound: one
// block per activation row for the quantizer (the row's amax or min/max, then the codes), a grid-stride
// loop over the INT32 accumulators for the epilogue.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "backends/cuda/int8_scaled_mm.hpp"

namespace qlinear::cuda {

namespace {

constexpr int kRowThreads = 256;

__device__ __forceinline__ double load(const float* p) { return *p; }
__device__ __forceinline__ double load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ double load(const __half* p) { return __half2float(*p); }

// Max and min over the block (every thread gets them).
__device__ void block_min_max(double& lo, double& hi) {
  __shared__ double s_lo[kRowThreads / 32], s_hi[kRowThreads / 32];
  for (int o = 16; o > 0; o /= 2) {
    lo = fmin(lo, __shfl_xor_sync(0xFFFFFFFFu, lo, o));
    hi = fmax(hi, __shfl_xor_sync(0xFFFFFFFFu, hi, o));
  }
  if (threadIdx.x % 32 == 0) {
    s_lo[threadIdx.x / 32] = lo;
    s_hi[threadIdx.x / 32] = hi;
  }
  __syncthreads();
  lo = s_lo[0];
  hi = s_hi[0];
  for (int i = 1; i < kRowThreads / 32; ++i) {
    lo = fmin(lo, s_lo[i]);
    hi = fmax(hi, s_hi[i]);
  }
}

__device__ __forceinline__ int8_t sat8(double v) { return static_cast<int8_t>(fmin(fmax(v, -128.0), 127.0)); }

template <class T>
__global__ void int8_quant_row_kernel(const T* __restrict__ x, int64_t k, int64_t ld_x, Int8ActMode mode,
                                      float static_scale, int32_t static_zp, int8_t* __restrict__ codes,
                                      int64_t ld_codes, float* __restrict__ scales, int32_t* __restrict__ zps,
                                      const float* __restrict__ row_amax) {
  const int64_t m = blockIdx.x;
  const T* row = x + m * ld_x;
  double s = static_scale;
  double z = mode == Int8ActMode::kStaticAsym ? static_cast<double>(static_zp) : 0.0;
  if (mode == Int8ActMode::kDynamicTokenSym || mode == Int8ActMode::kDynamicTokenAsym) {
    const bool asym = mode == Int8ActMode::kDynamicTokenAsym;
    // The reference starts min/max from the row's first element; 0 is a neutral start for the amax only.
    double lo = k > 0 ? load(row) : 0.0, hi = lo;
    for (int64_t c = threadIdx.x; c < k; c += kRowThreads) {
      const double v = load(row + c);
      if (asym) {
        lo = fmin(lo, v);
        hi = fmax(hi, v);
      } else {
        hi = fmax(hi, fabs(v));
      }
    }
    if (!asym) lo = hi;
    block_min_max(lo, hi);
    if (row_amax != nullptr) hi = row_amax[m];
    if (asym) {
      if (hi == lo) {
        lo = fmin(lo, 0.0);
        hi = fmax(hi, 0.0);
      }
      s = static_cast<double>(static_cast<float>((hi - lo) / 255.0));
      if (s == 0) s = 1.0;
      // (hi - lo) / 255 of finite inputs is below FLT_MAX, so the reference's overflow refusal cannot trigger.
      z = fmin(fmax(rint(-128.0 - lo / s), -2147483648.0), 2147483647.0);
      if (threadIdx.x == 0) zps[m] = static_cast<int32_t>(z);
    } else {
      s = static_cast<double>(static_cast<float>(hi / 127.0));
      if (!(s > 0)) s = 1.0;
    }
    if (threadIdx.x == 0) scales[m] = static_cast<float>(s);
  }
  for (int64_t c = threadIdx.x; c < ld_codes; c += kRowThreads) {
    codes[m * ld_codes + c] = c < k ? sat8(rint(load(row + c) / s) + z) : int8_t{0};
  }
}

__device__ __forceinline__ void store_out(void* out, DType d, int64_t i, double v) {
  switch (d) {
    case DType::kBF16: static_cast<__nv_bfloat16*>(out)[i] = __double2bfloat16(v); break;
    case DType::kF16: static_cast<__half*>(out)[i] = __double2half(v); break;
    default: static_cast<float*>(out)[i] = static_cast<float>(v); break;
  }
}

__device__ __forceinline__ double load_bias(const void* bias, DType d, int64_t n) {
  switch (d) {
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[n]);
    case DType::kF16: return __half2float(static_cast<const __half*>(bias)[n]);
    default: return static_cast<const float*>(bias)[n];
  }
}

__global__ void int8_epilogue_kernel(Int8EpilogueArgs a) {
  const int64_t total = a.m * a.n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t m = i / a.n, n = i % a.n;
    int64_t acc = a.acc[i];
    if (a.w_colsum != nullptr) {
      const int64_t z = a.x_zero_point == nullptr ? a.x_zero_point_value : a.x_zero_point[a.x_zero_point_per_row ? m : 0];
      acc -= z * a.w_colsum[n];
    }
    const double sx = a.x_scale == nullptr ? a.x_scale_value : a.x_scale[a.x_scale_per_row ? m : 0];
    double y = static_cast<double>(acc) * (sx * static_cast<double>(a.w_scale[n]));
    if (a.bias != nullptr) y += load_bias(a.bias, a.bias_dtype, n);
    store_out(a.out, a.out_dtype, i, y);
  }
}

template <class T>
Status launch_quant_typed(const Int8QuantArgs& a, Stream stream) {
  int8_quant_row_kernel<T><<<static_cast<unsigned>(a.m), kRowThreads, 0, stream>>>(
      static_cast<const T*>(a.x), a.k, a.ld_x, a.mode, a.static_scale, a.static_zero_point, a.codes, a.ld_codes,
      a.scales, a.zero_points, a.row_amax);
  QL_CUDA_CHECK_LAUNCH("int8_quant_row_kernel");
  return Status::ok();
}

}  // namespace

Status launch_int8_act_quant(const Int8QuantArgs& a, Stream stream) {
  if (a.m == 0) return Status::ok();
  if (a.ld_codes < a.k) return Status::error("int8 act_quant: code rows shorter than K");
  const bool dynamic = a.mode == Int8ActMode::kDynamicTokenSym || a.mode == Int8ActMode::kDynamicTokenAsym;
  if (dynamic && a.scales == nullptr) return Status::error("int8 act_quant: dynamic modes need a scale buffer");
  if (a.mode == Int8ActMode::kDynamicTokenAsym && a.zero_points == nullptr) {
    return Status::error("int8 act_quant: dynamic asymmetric mode needs a zero-point buffer");
  }
  switch (a.x_dtype) {
    case DType::kF32: return launch_quant_typed<float>(a, stream);
    case DType::kBF16: return launch_quant_typed<__nv_bfloat16>(a, stream);
    case DType::kF16: return launch_quant_typed<__half>(a, stream);
    default:
      return Status::error("int8 act_quant: activations must be f32, bf16 or f16, got " + std::string(name(a.x_dtype)));
  }
}

Status launch_int8_epilogue(const Int8EpilogueArgs& a, Stream stream) {
  if (a.m * a.n == 0) return Status::ok();
  const int64_t blocks = std::min<int64_t>((a.m * a.n + 255) / 256, 132 * 16);
  int8_epilogue_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(a);
  QL_CUDA_CHECK_LAUNCH("int8_epilogue_kernel");
  return Status::ok();
}

}  // namespace qlinear::cuda
