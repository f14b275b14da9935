// Activation quantization kernels (act_quant.hpp): the reference quantizers' arithmetic on the GPU.
// Memory-bound and small next to the GEMMs they feed; written for clarity: one element (row kernels) or
// four consecutive elements (group kernels) per thread, coalesced.
#include <cmath>

#include "backends/cuda/act_quant.hpp"
#include "backends/cuda/fp_codec.cuh"
#include "qlinear/quantize.hpp"

namespace qlinear::cuda {

namespace {

constexpr int kThreads = 256;
constexpr double kFp8Max = kFp8E4M3Max;
constexpr double kMinScale = kFp8MinScalingFactor;    // f32 constant widened, as the reference does
constexpr double kGroupAmaxFloor = static_cast<double>(1e-10f);

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float load(const __half* p) { return __half2float(*p); }

__device__ __forceinline__ float warp_max(float v, int width = 32) {
  for (int o = width / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

__device__ float block_max(float v) {
  __shared__ float partial[kThreads / 32];
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float r = 0.0f;
  for (int i = 0; i < kThreads / 32; ++i) r = fmaxf(r, partial[i]);
  __syncthreads();
  return r;
}

__device__ __forceinline__ void store_code(void* codes, bool as_float, int64_t i, uint8_t code) {
  if (as_float) {
    static_cast<float*>(codes)[i] = codec::decode_e4m3(code);
  } else {
    static_cast<uint8_t*>(codes)[i] = code;
  }
}

// |x| max over everything into *amax (non-negative floats order like their bit patterns).
template <class T>
__global__ void amax_kernel(const T* x, int64_t m, int64_t k, int64_t ld, uint32_t* amax) {
  float v = 0.0f;
  const int64_t total = m * k;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total; i += int64_t{gridDim.x} * kThreads) {
    v = fmaxf(v, fabsf(load(x + (i / k) * ld + i % k)));
  }
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) atomicMax(amax, __float_as_uint(v));
}

// One block per row: per-tensor (static or dynamic) and per-token scales.
template <class T>
__global__ void quant_row_kernel(const T* x, int64_t k, int64_t ld_x, ActQuantMode mode, float static_scale,
                                 float scale_ub, const uint32_t* amax_tensor, void* codes, bool as_float,
                                 int64_t ld_codes, ScaleOut so) {
  const int64_t m = blockIdx.x;
  const T* row = x + m * ld_x;
  double s = static_scale;
  if (mode == ActQuantMode::kDynamicTensor) {
    s = static_cast<double>(static_cast<float>(static_cast<double>(__uint_as_float(*amax_tensor)) / kFp8Max));
    if (!(s > 0)) s = kMinScale;
  } else if (mode == ActQuantMode::kDynamicToken) {
    float a = 0.0f;
    for (int64_t j = threadIdx.x; j < k; j += kThreads) a = fmaxf(a, fabsf(load(row + j)));
    double amax = block_max(a);
    if (scale_ub > 0) amax = fmin(amax, static_cast<double>(scale_ub));
    s = fmax(static_cast<double>(static_cast<float>(amax / kFp8Max)), kMinScale);
  }
  // Per-tensor scales too are written once per row when m_stride != 0 (cuBLASLt's OUTER_VEC wants [M]).
  if (threadIdx.x == 0 && (so.m_stride != 0 || m == 0)) static_cast<float*>(so.scales)[m * so.m_stride] = static_cast<float>(s);
  const float r = 1.0f / static_cast<float>(s);  // s is an f32 value
  for (int64_t j = threadIdx.x; j < ld_codes; j += kThreads) {
    const float v = j < k ? load(row + j) : 0.0f;
    store_code(codes, as_float, m * ld_codes + j, codec::encode_e4m3_div(v, r, s));
  }
}

// ceil(log2(a / 448)) exactly, a > 0 finite (mx_quant.cpp's ceil_log2_ratio with m = 448 = 0.875 * 2^9).
__device__ __forceinline__ int ceil_log2_over_448(double a) {
  int ka = 0;
  const double fa = frexp(a, &ka);
  return ka - 9 + (fa > 0.875 ? 1 : 0);
}

// 1xG groups (G = 128: FP8 per-token-group; G = 32: MX). Each thread takes four consecutive elements of a
// row; the G/4 threads of a group are consecutive lanes of one warp and reduce the amax by shuffles.
template <class T, int G>
__global__ void quant_group_kernel(const T* x, int64_t m, int64_t k, int64_t ld_x, int64_t groups,
                                   int64_t real_groups, void* codes, bool as_float, int64_t ld_codes, ScaleOut so) {
  static_assert(G == 32 || G == 128, "1x32 (MX) and 1x128 groups only");
  constexpr int kLanesPerGroup = G / 4;
  const int64_t chunks_per_row = groups * kLanesPerGroup;
  const int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  const bool valid = c < m * chunks_per_row;
  const int64_t r = valid ? c / chunks_per_row : 0;
  const int64_t col = valid ? (c % chunks_per_row) * 4 : 0;
  float v[4];
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = valid && col + i < k ? load(x + r * ld_x + col + i) : 0.0f;
    a = fmaxf(a, fabsf(v[i]));
  }
  a = warp_max(a, kLanesPerGroup);  // groups are aligned to kLanesPerGroup lanes
  if (!valid) return;
  const int64_t g = col / G;
  uint8_t q[4];
  if constexpr (G == 128) {
    const double s = static_cast<double>(static_cast<float>(fmax(static_cast<double>(a), kGroupAmaxFloor) / kFp8Max));
    const float rcp = 1.0f / static_cast<float>(s);
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = codec::encode_e4m3_div(v[i], rcp, s);
    if (col % G == 0 && g < real_groups) {
      static_cast<float*>(so.scales)[r * so.m_stride + g * so.g_stride] = static_cast<float>(s);
    }
  } else {
    int e = a == 0.0f ? -127 : ceil_log2_over_448(a);
    e = e < -127 ? -127 : (e > 127 ? 127 : e);
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = codec::encode_e4m3_pow2(v[i], e);
    if (col % G == 0 && g < real_groups) {
      const int64_t at = r * so.m_stride + g * so.g_stride;
      if (so.mx_as_float) {
        static_cast<float*>(so.scales)[at] = ldexpf(1.0f, e);
      } else {
        static_cast<uint8_t*>(so.scales)[at] = static_cast<uint8_t>(e + 127);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (col + i < ld_codes) store_code(codes, as_float, r * ld_codes + col + i, q[i]);
  }
}

template <class T>
__global__ void widen_kernel(const T* x, int64_t m, int64_t k, int64_t ld_x, float* out, int64_t ld_out) {
  const int64_t total = m * ld_out;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total; i += int64_t{gridDim.x} * kThreads) {
    const int64_t r = i / ld_out, c = i % ld_out;
    out[i] = c < k ? load(x + r * ld_x + c) : 0.0f;
  }
}

unsigned grid_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 132 * 16 ? 132 * 16 : blocks));
}

template <class T>
Status launch_typed(const ActQuantArgs& a, Stream stream) {
  const T* x = static_cast<const T*>(a.x);
  switch (a.mode) {
    case ActQuantMode::kStaticTensor:
    case ActQuantMode::kDynamicTensor:
    case ActQuantMode::kDynamicToken: {
      if (a.mode == ActQuantMode::kDynamicTensor) {
        if (a.amax_scratch == nullptr) return Status::error("act_quant: dynamic per-tensor needs amax scratch");
        QL_CUDA_CHECK(cudaMemsetAsync(a.amax_scratch, 0, sizeof(uint32_t), stream));
        amax_kernel<T><<<grid_for(a.m * a.k), kThreads, 0, stream>>>(x, a.m, a.k, a.ld_x, a.amax_scratch);
        QL_CUDA_CHECK_LAUNCH("amax_kernel");
      }
      quant_row_kernel<T><<<static_cast<unsigned>(a.m), kThreads, 0, stream>>>(
          x, a.k, a.ld_x, a.mode, a.static_scale, a.scale_ub, a.amax_scratch, a.codes, a.codes_as_float,
          a.ld_codes, a.scale);
      QL_CUDA_CHECK_LAUNCH("quant_row_kernel");
      return Status::ok();
    }
    case ActQuantMode::kDynamicGroup128:
    case ActQuantMode::kMx32: {
      const int group = a.mode == ActQuantMode::kMx32 ? 32 : 128;
      // Groups run over the padded row (zeros beyond K); scales are written for the real groups only.
      const int64_t real_groups = (a.k + group - 1) / group;
      const int64_t groups = (a.ld_codes + group - 1) / group;
      if (a.ld_codes < a.k) return Status::error("act_quant: code rows shorter than K");
      const int64_t threads = a.m * groups * (group / 4);
      const unsigned blocks = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
      if (group == 32) {
        quant_group_kernel<T, 32><<<blocks, kThreads, 0, stream>>>(x, a.m, a.k, a.ld_x, groups, real_groups, a.codes,
                                                                   a.codes_as_float, a.ld_codes, a.scale);
      } else {
        quant_group_kernel<T, 128><<<blocks, kThreads, 0, stream>>>(x, a.m, a.k, a.ld_x, groups, real_groups, a.codes,
                                                                    a.codes_as_float, a.ld_codes, a.scale);
      }
      QL_CUDA_CHECK_LAUNCH("quant_group_kernel");
      return Status::ok();
    }
  }
  return Status::error("act_quant: unknown mode");
}

}  // namespace

Status launch_act_quant(const ActQuantArgs& a, Stream stream) {
  if (a.m == 0) return Status::ok();
  switch (a.x_dtype) {
    case DType::kF32: return launch_typed<float>(a, stream);
    case DType::kBF16: return launch_typed<__nv_bfloat16>(a, stream);
    case DType::kF16: return launch_typed<__half>(a, stream);
    default: return Status::error("act_quant: activations must be f32, bf16 or f16, got " + std::string(name(a.x_dtype)));
  }
}

Status launch_widen_to_f32(const void* x, DType x_dtype, int64_t m, int64_t k, int64_t ld_x, float* out,
                           int64_t ld_out, Stream stream) {
  if (m == 0) return Status::ok();
  const unsigned blocks = grid_for(m * ld_out);
  switch (x_dtype) {
    case DType::kF32:
      widen_kernel<float><<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(x), m, k, ld_x, out, ld_out);
      break;
    case DType::kBF16:
      widen_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), m, k, ld_x,
                                                                  out, ld_out);
      break;
    case DType::kF16:
      widen_kernel<__half><<<blocks, kThreads, 0, stream>>>(static_cast<const __half*>(x), m, k, ld_x, out, ld_out);
      break;
    default: return Status::error("widen_to_f32: activations must be f32, bf16 or f16");
  }
  QL_CUDA_CHECK_LAUNCH("widen_kernel");
  return Status::ok();
}

}  // namespace qlinear::cuda
