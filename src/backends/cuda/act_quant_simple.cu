// The simple activation quantizers: FP8 with one thread per 8-element vector over the whole grid (1x128 /
// MX groups) or one block per row, INT8 with one block per row and one element per thread, the quotient in
// double. Bit-identical to the reference like act_quant.cu's kernels; which family runs a mode is decided
// by measurement (act_quant_simple.hpp), and the benchmark times both in one process.
#include <cmath>
#include <type_traits>

#include "backends/cuda/act_int8_encode_math.hpp"
#include "backends/cuda/act_quant.hpp"
#include "backends/cuda/act_quant_simple.hpp"
#include "backends/cuda/act_vec.cuh"
#include "backends/cuda/fp_codec.cuh"
#include "backends/cuda/int8_scaled_mm.hpp"
#include "qlinear/quantize.hpp"

namespace qlinear::cuda {
namespace simple_fp8 {
namespace {

constexpr int kThreads = 256;
constexpr double kFp8Max = kFp8E4M3Max;
constexpr double kMinScale = kFp8MinScalingFactor;    // f32 constant widened, as the reference does
constexpr double kGroupAmaxFloor = static_cast<double>(1e-10f);

using actvec::kVec;  // elements per thread and chunk

// Elements col .. col+7 of a row as floats, zeros at and beyond k (act_vec.cuh).
template <class T>
__device__ __forceinline__ void load8(const T* __restrict__ row, int64_t col, int64_t k, bool vec, float (&v)[kVec]) {
  actvec::to_floats(actvec::load_vec(row, col, k, vec), v);
}

// Codes col .. col+7 of output row `r` (bytes, or their exact float values), those below ld_codes.
__device__ __forceinline__ void store8(void* __restrict__ codes, bool as_float, int64_t r, int64_t ld_codes,
                                       int64_t col, const uint8_t (&q)[kVec]) {
  if (col + kVec <= ld_codes && ld_codes % kVec == 0) {
    if (as_float) {
      float4* p = reinterpret_cast<float4*>(static_cast<float*>(codes) + r * ld_codes + col);
      p[0] = make_float4(codec::decode_e4m3(q[0]), codec::decode_e4m3(q[1]), codec::decode_e4m3(q[2]),
                         codec::decode_e4m3(q[3]));
      p[1] = make_float4(codec::decode_e4m3(q[4]), codec::decode_e4m3(q[5]), codec::decode_e4m3(q[6]),
                         codec::decode_e4m3(q[7]));
    } else {
      uint2 w;
      w.x = q[0] | q[1] << 8 | q[2] << 16 | static_cast<uint32_t>(q[3]) << 24;
      w.y = q[4] | q[5] << 8 | q[6] << 16 | static_cast<uint32_t>(q[7]) << 24;
      *reinterpret_cast<uint2*>(static_cast<uint8_t*>(codes) + r * ld_codes + col) = w;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    if (col + i >= ld_codes) break;
    if (as_float) {
      static_cast<float*>(codes)[r * ld_codes + col + i] = codec::decode_e4m3(q[i]);
    } else {
      static_cast<uint8_t*>(codes)[r * ld_codes + col + i] = q[i];
    }
  }
}

__device__ __forceinline__ float warp_max(float v, int width = 32) {
  for (int o = width / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

constexpr int kRowThreads = 512;  // one block per row: 4096 elements per pass, few passes at small M

__device__ float block_max(float v) {
  __shared__ float partial[kRowThreads / 32];
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float r = 0.0f;
  for (int i = 0; i < kRowThreads / 32; ++i) r = fmaxf(r, partial[i]);
  __syncthreads();
  return r;
}

// |x| max over everything into *amax (non-negative floats order like their bit patterns).
template <class T>
__global__ void amax_kernel(const T* x, int64_t m, int64_t k, int64_t ld, uint32_t* amax) {
  float v = 0.0f;
  const int64_t total = m * k;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total; i += int64_t{gridDim.x} * kThreads) {
    v = fmaxf(v, fabsf(actvec::scalar_load(x + (i / k) * ld + i % k)));
  }
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) atomicMax(amax, __float_as_uint(v));
}

// One block per row: per-tensor (static or dynamic) and per-token scales.
template <class T>
__global__ void quant_row_kernel(const T* __restrict__ x, int64_t k, int64_t ld_x, bool vec, ActQuantMode mode,
                                 float static_scale, float scale_ub, const uint32_t* amax_tensor,
                                 void* __restrict__ codes, bool as_float, int64_t ld_codes, ScaleOut so,
                                 const float* __restrict__ row_amax) {
  const int64_t m = blockIdx.x;
  const T* row = x + m * ld_x;
  double s = static_scale;
  if (mode == ActQuantMode::kDynamicTensor) {
    s = static_cast<double>(static_cast<float>(static_cast<double>(__uint_as_float(*amax_tensor)) / kFp8Max));
    if (!(s > 0)) s = kMinScale;
  } else if (mode == ActQuantMode::kDynamicToken && row_amax != nullptr) {
    double amax = row_amax[m];
    if (scale_ub > 0) amax = fmin(amax, static_cast<double>(scale_ub));
    s = fmax(static_cast<double>(static_cast<float>(amax / kFp8Max)), kMinScale);
  } else if (mode == ActQuantMode::kDynamicToken) {
    float a = 0.0f;
#pragma unroll 4
    for (int64_t col = threadIdx.x * int64_t{kVec}; col < k; col += int64_t{kRowThreads} * kVec) {
      float v[kVec];
      load8(row, col, k, vec, v);
#pragma unroll
      for (int i = 0; i < kVec; ++i) a = fmaxf(a, fabsf(v[i]));
    }
    double amax = block_max(a);
    if (scale_ub > 0) amax = fmin(amax, static_cast<double>(scale_ub));
    s = fmax(static_cast<double>(static_cast<float>(amax / kFp8Max)), kMinScale);
  }
  // Per-tensor scales too are written once per row when m_stride != 0 (cuBLASLt's OUTER_VEC wants [M]).
  if (threadIdx.x == 0 && (so.m_stride != 0 || m == 0)) static_cast<float*>(so.scales)[m * so.m_stride] = static_cast<float>(s);
  const float r = 1.0f / static_cast<float>(s);  // s is an f32 value
#pragma unroll 4
  for (int64_t col = threadIdx.x * int64_t{kVec}; col < ld_codes; col += int64_t{kRowThreads} * kVec) {
    float v[kVec];
    load8(row, col, k, vec, v);
    uint8_t q[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) q[i] = codec::encode_e4m3_div(v[i], r, s);
    store8(codes, as_float, m, ld_codes, col, q);
  }
}

// ceil(log2(a / 448)) exactly, a > 0 finite (mx_quant.cpp's ceil_log2_ratio with m = 448 = 0.875 * 2^9).
__device__ __forceinline__ int ceil_log2_over_448(double a) {
  int ka = 0;
  const double fa = frexp(a, &ka);
  return ka - 9 + (fa > 0.875 ? 1 : 0);
}

// 1xG groups (G = 128: FP8 per-token-group; G = 32: MX). Each thread takes eight consecutive elements of a
// row; the G/8 threads of a group are consecutive lanes of one warp and reduce the amax by shuffles.
template <class T, int G>
__global__ void quant_group_kernel(const T* __restrict__ x, int64_t m, int64_t k, int64_t ld_x, bool vec,
                                   int64_t groups, int64_t real_groups, void* __restrict__ codes, bool as_float,
                                   int64_t ld_codes, ScaleOut so) {
  static_assert(G == 32 || G == 128, "1x32 (MX) and 1x128 groups only");
  constexpr int kLanesPerGroup = G / kVec;
  const int64_t chunks_per_row = groups * kLanesPerGroup;
  const int64_t c = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  const bool valid = c < m * chunks_per_row;
  const int64_t r = valid ? c / chunks_per_row : 0;
  const int64_t col = valid ? (c % chunks_per_row) * kVec : 0;
  float v[kVec];
  load8(x + r * ld_x, col, valid ? k : 0, vec, v);
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) a = fmaxf(a, fabsf(v[i]));
  a = warp_max(a, kLanesPerGroup);  // groups are aligned to kLanesPerGroup lanes
  if (!valid) return;
  const int64_t g = col / G;
  uint8_t q[kVec];
  if constexpr (G == 128) {
    const double s = static_cast<double>(static_cast<float>(fmax(static_cast<double>(a), kGroupAmaxFloor) / kFp8Max));
    const float rcp = 1.0f / static_cast<float>(s);
#pragma unroll
    for (int i = 0; i < kVec; ++i) q[i] = codec::encode_e4m3_div(v[i], rcp, s);
    if (col % G == 0 && g < real_groups) {
      static_cast<float*>(so.scales)[r * so.m_stride + g * so.g_stride] = static_cast<float>(s);
    }
  } else {
    int e = a == 0.0f ? -127 : ceil_log2_over_448(a);
    e = e < -127 ? -127 : (e > 127 ? 127 : e);
#pragma unroll
    for (int i = 0; i < kVec; ++i) q[i] = codec::encode_e4m3_pow2(v[i], e);
    if (col % G == 0 && g < real_groups) {
      const int64_t at = r * so.m_stride + g * so.g_stride;
      if (so.mx_as_float) {
        static_cast<float*>(so.scales)[at] = ldexpf(1.0f, e);
      } else {
        static_cast<uint8_t*>(so.scales)[at] = static_cast<uint8_t>(e + 127);
      }
    }
  }
  store8(codes, as_float, r, ld_codes, col, q);
}

template <class T>
__global__ void row_amax_kernel(const T* __restrict__ x, int64_t k, int64_t ld_x, bool vec, float* __restrict__ out) {
  const T* row = x + blockIdx.x * ld_x;
  float a = 0.0f;
  for (int64_t col = threadIdx.x * int64_t{kVec}; col < k; col += int64_t{kRowThreads} * kVec) {
    float v[kVec];
    load8(row, col, k, vec, v);
#pragma unroll
    for (int i = 0; i < kVec; ++i) a = fmaxf(a, fabsf(v[i]));
  }
  a = block_max(a);
  if (threadIdx.x == 0) out[blockIdx.x] = a;
}

unsigned grid_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 132 * 16 ? 132 * 16 : blocks));
}

template <class T>
Status launch_typed(const ActQuantArgs& a, Stream stream) {
  const T* x = static_cast<const T*>(a.x);
  // 16-byte loads when every row starts 16-byte aligned.
  const bool vec = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && (a.ld_x * sizeof(T)) % 16 == 0;
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
      quant_row_kernel<T><<<static_cast<unsigned>(a.m), kRowThreads, 0, stream>>>(
          x, a.k, a.ld_x, vec, a.mode, a.static_scale, a.scale_ub, a.amax_scratch, a.codes, a.codes_as_float,
          a.ld_codes, a.scale, a.row_amax);
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
      const int64_t threads = a.m * groups * (group / kVec);
      const unsigned blocks = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
      if (group == 32) {
        quant_group_kernel<T, 32><<<blocks, kThreads, 0, stream>>>(x, a.m, a.k, a.ld_x, vec, groups, real_groups, a.codes,
                                                                   a.codes_as_float, a.ld_codes, a.scale);
      } else {
        quant_group_kernel<T, 128><<<blocks, kThreads, 0, stream>>>(x, a.m, a.k, a.ld_x, vec, groups, real_groups, a.codes,
                                                                    a.codes_as_float, a.ld_codes, a.scale);
      }
      QL_CUDA_CHECK_LAUNCH("quant_group_kernel");
      return Status::ok();
    }
  }
  return Status::error("act_quant: unknown mode");
}

}  // namespace

Status launch_act_quant_simple(const ActQuantArgs& a, Stream stream) {
  if (a.m == 0) return Status::ok();
  switch (a.x_dtype) {
    case DType::kF32: return launch_typed<float>(a, stream);
    case DType::kBF16: return launch_typed<__nv_bfloat16>(a, stream);
    case DType::kF16: return launch_typed<__half>(a, stream);
    default: return Status::error("act_quant: activations must be f32, bf16 or f16, got " + std::string(name(a.x_dtype)));
  }
}

}  // namespace simple_fp8
namespace simple_int8 {
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
    actenc::int8_dynamic_scale(lo, hi, asym, s, z);
    if (threadIdx.x == 0 && asym) zps[m] = static_cast<int32_t>(z);
    if (threadIdx.x == 0) scales[m] = static_cast<float>(s);
  }
  for (int64_t c = threadIdx.x; c < ld_codes; c += kRowThreads) {
    codes[m * ld_codes + c] = c < k ? sat8(rint(load(row + c) / s) + z) : int8_t{0};
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

Status launch_int8_act_quant_simple(const Int8QuantArgs& a, Stream stream) {
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

}  // namespace simple_int8

Status launch_act_quant_simple(const ActQuantArgs& a, Stream s) { return simple_fp8::launch_act_quant_simple(a, s); }
Status launch_int8_act_quant_simple(const Int8QuantArgs& a, Stream s) {
  return simple_int8::launch_int8_act_quant_simple(a, s);
}

}  // namespace qlinear::cuda
