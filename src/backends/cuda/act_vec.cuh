#pragma once
// Vector access to activation rows for the memory-bound quantizers (act_quant.cu, int8_scaled_mm.cu).
// A "vector" is 8 consecutive elements of a row: one 16-byte load for BF16/F16, two for F32. A block of
// `blockDim.x` threads covers blockDim.x * V vectors of one row per pass (thread t takes vectors
// t, t + blockDim.x, ...), all V loads issued before the first use, so a thread keeps V * 16 bytes in
// flight; rows that fit in one pass are reduced and quantized from registers (one read of DRAM).
// Device code only (nvcc).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace qlinear::cuda::actvec {

constexpr int kVec = 8;  // elements per vector

// The raw bits of one vector.
template <class T>
struct Raw {
  uint4 w[sizeof(T) / 2];  // one uint4 for 16-bit types, two for f32
};

template <class T>
__device__ __forceinline__ float scalar_load(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return *p;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(*p);
  } else {
    return __bfloat162float(*p);
  }
}

// Elements [col, col + 8) of `row` (zeros at and beyond k). `aligned`: the row starts 16-byte aligned.
template <class T>
__device__ __forceinline__ Raw<T> load_vec(const T* __restrict__ row, int64_t col, int64_t k, bool aligned) {
  Raw<T> r;
  if (aligned && col + kVec <= k) {
    const uint4* p = reinterpret_cast<const uint4*>(row + col);
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(T) / 2); ++i) r.w[i] = __ldg(p + i);
    return r;
  }
  float f[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) f[i] = col + i < k ? scalar_load(row + col + i) : 0.0f;
  if constexpr (std::is_same_v<T, float>) {
    r.w[0] = make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
    r.w[1] = make_uint4(__float_as_uint(f[4]), __float_as_uint(f[5]), __float_as_uint(f[6]), __float_as_uint(f[7]));
  } else {
    uint32_t h[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      // Exact: the values came from T.
      if constexpr (std::is_same_v<T, __half>) {
        h[i] = __half_as_ushort(__float2half_rn(f[i]));
      } else {
        h[i] = __float_as_uint(f[i]) >> 16;
      }
    }
    r.w[0] = make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
  }
  return r;
}

// The 8 elements as floats (exact).
template <class T>
__device__ __forceinline__ void to_floats(const Raw<T>& r, float (&f)[kVec]) {
  if constexpr (std::is_same_v<T, float>) {
    const uint32_t w[8] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w, r.w[1].x, r.w[1].y, r.w[1].z, r.w[1].w};
#pragma unroll
    for (int i = 0; i < kVec; ++i) f[i] = __uint_as_float(w[i]);
  } else {
    const uint32_t w[4] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (std::is_same_v<T, __half>) {
        const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
        f[2 * i] = p.x;
        f[2 * i + 1] = p.y;
      } else {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
      }
    }
  }
}

// Elements col .. col+7 of a row, K a multiple of 8, as exact floats (`aligned`: the row starts 16-byte
// aligned and its stride keeps it so).
template <class T>
__device__ __forceinline__ void load8(const T* __restrict__ row, int64_t col, bool aligned, float (&v)[kVec]) {
  to_floats(load_vec(row, col, col + kVec, aligned), v);
}

// max |element| of a vector.
template <class T>
__device__ __forceinline__ float abs_max(const Raw<T>& r) {
  float f[kVec];
  to_floats(r, f);
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) a = fmaxf(a, fabsf(f[i]));
  return a;
}

// Reductions over `width` consecutive lanes (a power of two <= 32, groups aligned to it).
__device__ __forceinline__ float lanes_max(float v, int width = 32) {
  for (int o = width / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
__device__ __forceinline__ float lanes_min(float v) {
  for (int o = 16; o > 0; o /= 2) v = fminf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

constexpr int kMaxWarps = 16;  // blocks of at most 512 threads

// Max over the block (every thread gets it). Every thread of the block must call it.
__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[kMaxWarps];
  v = lanes_max(v);
  __syncthreads();  // a previous call's readers are done with `partial`
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float r = partial[0];
  for (int i = 1; i < static_cast<int>(blockDim.x / 32); ++i) r = fmaxf(r, partial[i]);
  return r;
}

__device__ __forceinline__ float block_min(float v) {
  __shared__ float partial[kMaxWarps];
  v = lanes_min(v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float r = partial[0];
  for (int i = 1; i < static_cast<int>(blockDim.x / 32); ++i) r = fminf(r, partial[i]);
  return r;
}

}  // namespace qlinear::cuda::actvec

namespace qlinear::cuda::actvec {

// Launch shape for rows of `vectors` vectors: `threads` per block (a multiple of 32, at most 512), `v`
// vectors per thread and pass, `chunks` blocks per row. whole_row: one block per row, covering it in one
// pass where 512 threads x 8 vectors do (longer rows loop over passes, re-reading from the caches).
struct RowPlan {
  int threads = 32;
  int v = 4;
  unsigned chunks = 1;
};

inline RowPlan plan_rows(int64_t vectors, bool whole_row) {
  const auto threads_for = [](int64_t t) {
    return static_cast<int>(t <= 32 ? 32 : (t + 31) / 32 * 32);
  };
  RowPlan p;
  if (whole_row) {
    for (int v : {4, 8}) {
      const int64_t t = (vectors + v - 1) / v;
      if (t <= 512) return RowPlan{threads_for(t), v, 1};
    }
    return RowPlan{512, 8, 1};
  }
  const int64_t t = (vectors + 3) / 4;
  p.threads = t >= 256 ? 256 : threads_for(t);
  p.v = 4;
  p.chunks = static_cast<unsigned>((vectors + int64_t{p.threads} * 4 - 1) / (int64_t{p.threads} * 4));
  return p;
}

}  // namespace qlinear::cuda::actvec
