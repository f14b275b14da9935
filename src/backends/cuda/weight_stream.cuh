#pragma once
// Device code of the weight-streaming GEMM (weight_stream.hpp has the layouts and the numerics).
//
// Work split. A block is 8 warps; warp w owns kRows consecutive output rows (weights) and the block owns an
// M tile of MT activation rows. K is walked in steps of 1024 elements:
//
//   step s:   x[m0 .. m0+MT, 1024 s .. 1024 s + 1024]  --cp.async-->  shared memory (2 stages, swizzled)
//             lane l of every warp takes "pieces" of the step: 16 elements (E4M3: 16 B, FP6: 12 B) at
//             piece l and l + 32, or 32 elements (FP4: 16 B) at piece l, for each of its kRows rows:
//
//             row n:  | p0 | p1 | ... | p31 | p32 | ... | p63 |     (E4M3/FP6: 64 pieces of 16 per step)
//                      lane0 lane1      lane31 lane0      lane31    -> one warp load = 512 contiguous bytes
//
// so every weight load of a warp is contiguous, and each lane decodes its pieces in registers and FMAs them
// against the matching activation floats read from shared memory. Swizzle: float4 f of a stage row is
// stored at f ^ ((f >> 3) & mask) (mask 3 for 16-element pieces, 7 for 32): the 8 lanes of a shared-memory
// phase then read 8 different 16-byte bank groups. Rows of x beyond M are zero-filled by cp.async.
// Split-K (grid.z) when the row blocks alone do not fill the GPU: partial sums go to an f32 workspace by
// atomicAdd and a finalize kernel applies bias and rounding.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cmath>

#include "backends/cuda/fp_codec.cuh"
#include "backends/cuda/weight_stream.hpp"

namespace qlinear::cuda::stream_detail {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kStepFloat4 = static_cast<int>(kStreamStepElems / 4);  // 256 float4 per activation row per step

template <WeightFormat F> struct Traits;
template <> struct Traits<WeightFormat::kE4M3> {
  static constexpr int kPieceElems = 16, kPieceWords = 4, kPiecesPerLane = 2, kRows = 2, kPieceBytes = 16;
};
template <> struct Traits<WeightFormat::kE2M3> {
  static constexpr int kPieceElems = 16, kPieceWords = 3, kPiecesPerLane = 2, kRows = 2, kPieceBytes = 12;
};
template <> struct Traits<WeightFormat::kE3M2> {
  static constexpr int kPieceElems = 16, kPieceWords = 3, kPiecesPerLane = 2, kRows = 2, kPieceBytes = 12;
};
template <> struct Traits<WeightFormat::kE2M1> {
  static constexpr int kPieceElems = 32, kPieceWords = 4, kPiecesPerLane = 1, kRows = 4, kPieceBytes = 16;
};

template <WeightFormat F>
constexpr int rows_per_block() { return kWarps * Traits<F>::kRows; }

__device__ __forceinline__ int swizzle(int f, int mask) { return f ^ ((f >> 3) & mask); }

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Streaming loads: weights are read once, keep them out of L1.
__device__ __forceinline__ uint4 load_stream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t load_stream4(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}

template <WeightFormat F>
__device__ __forceinline__ void load_piece(const uint8_t* p, uint32_t (&w)[Traits<F>::kPieceWords]) {
  if constexpr (Traits<F>::kPieceWords == 4) {
    const uint4 v = load_stream16(p);
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
  } else {  // FP6: 12 bytes, 4-byte aligned (rows are multiples of 24 bytes)
    w[0] = load_stream4(p);
    w[1] = load_stream4(p + 4);
    w[2] = load_stream4(p + 8);
  }
}

// Elements 4c .. 4c+3 of a piece as exact floats.
template <WeightFormat F, int C>
__device__ __forceinline__ void decode4(const uint32_t (&w)[Traits<F>::kPieceWords], float (&v)[4]) {
  if constexpr (F == WeightFormat::kE4M3) {
    codec::decode_e4m3x4(w[C], v);
  } else if constexpr (F == WeightFormat::kE2M1) {
    const uint32_t bits = w[C / 2] >> (16 * (C % 2));
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = codec::decode_e2m1((bits >> (4 * i)) & 0xFu);
  } else {
    // FP6: codes are a little-endian stream of 6-bit fields; code j of the piece is at bit 6 j.
    constexpr int kBit = 24 * C;
    constexpr int kWord = kBit / 32, kShift = kBit % 32;
    uint64_t both = w[kWord];
    if constexpr (kWord + 1 < 3) both |= static_cast<uint64_t>(w[kWord + 1]) << 32;
    const uint32_t bits = static_cast<uint32_t>(both >> kShift);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t code = (bits >> (6 * i)) & 0x3Fu;
      v[i] = F == WeightFormat::kE2M3 ? codec::decode_e2m3(code) : codec::decode_e3m2(code);
    }
  }
}


__device__ __forceinline__ float load_bias(const void* bias, DType d, int64_t n) {
  switch (d) {
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[n]);
    case DType::kF16: return __half2float(static_cast<const __half*>(bias)[n]);
    default: return static_cast<const float*>(bias)[n];
  }
}

__device__ __forceinline__ void store_out(void* out, DType d, int64_t i, float v) {
  switch (d) {
    case DType::kBF16: static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v); break;
    case DType::kF16: static_cast<__half*>(out)[i] = __float2half_rn(v); break;
    default: static_cast<float*>(out)[i] = v; break;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// workspace: null -> write out directly; else atomicAdd the scaled partial sums (split-K).
template <WeightFormat F, WeightScale S, int MT>
__global__ void __launch_bounds__(kThreads, MT <= 2 ? 3 : 1) weight_stream_kernel(const WeightStreamArgs a, int64_t steps_per_split,
                                                                  float* workspace) {
  using T = Traits<F>;
  constexpr int R = T::kRows;
  constexpr int P = T::kPiecesPerLane;
  constexpr int kChunks = T::kPieceElems / 4;  // float4 per piece
  constexpr int kMask = T::kPieceElems == 16 ? 3 : 7;
  extern __shared__ float4 xs[];  // [2][MT][kStepFloat4]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * MT;
  const int64_t total_steps = a.ld_x / kStreamStepElems;
  const int64_t step_begin = blockIdx.z * steps_per_split;
  const int64_t step_end = min(step_begin + steps_per_split, total_steps);

  auto stage = [&](int buf, int64_t step) {
    for (int i = threadIdx.x; i < MT * kStepFloat4; i += kThreads) {
      const int mm = i / kStepFloat4, f = i % kStepFloat4;
      const int64_t m = m0 + mm;
      const float* src = a.x + (m < a.m ? m : a.m - 1) * a.ld_x + step * kStreamStepElems + f * 4;
      cp_async16(&xs[(buf * MT + mm) * kStepFloat4 + swizzle(f, kMask)], src, m < a.m ? 16 : 0);
    }
    cp_async_commit();
  };

  const uint8_t* wrow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t n = row0 + r < a.n ? row0 + r : a.n - 1;
    wrow[r] = a.w + n * a.w_row_bytes;
  }

  float acc[MT][R];
#pragma unroll
  for (int mm = 0; mm < MT; ++mm) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[mm][r] = 0.0f;
  }

  // Weights of step s + 1 are loaded into registers while step s computes (two steps in flight per lane).
  uint32_t raw[R][P][T::kPieceWords];
  bool valid[P];
  int64_t elem[P];
  auto load_step = [&](int64_t step, uint32_t (&dst)[R][P][T::kPieceWords]) {
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const int64_t piece = step * (kStreamStepElems / T::kPieceElems) + lane + 32 * j;
      const bool ok = piece * T::kPieceElems < a.k_valid && step < step_end;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (ok) {
          load_piece<F>(wrow[r] + piece * T::kPieceBytes, dst[r][j]);
        } else {
#pragma unroll
          for (int q = 0; q < T::kPieceWords; ++q) dst[r][j][q] = 0;
        }
      }
    }
  };
  if (step_begin < step_end) {
    load_step(step_begin, raw);
    stage(0, step_begin);
  }
  for (int64_t step = step_begin; step < step_end; ++step) {
    const int buf = static_cast<int>((step - step_begin) & 1);
#pragma unroll
    for (int j = 0; j < P; ++j) {
      elem[j] = (step * (kStreamStepElems / T::kPieceElems) + lane + 32 * j) * T::kPieceElems;
      valid[j] = elem[j] < a.k_valid;
    }
    uint32_t next[R][P][T::kPieceWords];
    load_step(step + 1, next);
    if (step + 1 < step_end) {
      stage(buf ^ 1, step + 1);
    } else {
      cp_async_commit();
    }
    cp_async_wait<1>();
    __syncthreads();

#pragma unroll
    for (int j = 0; j < P; ++j) {
      float part[MT][R];
#pragma unroll
      for (int mm = 0; mm < MT; ++mm) {
#pragma unroll
        for (int r = 0; r < R; ++r) part[mm][r] = 0.0f;
      }
      const int f0 = (lane + 32 * j) * kChunks;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        float4 xv[MT];
#pragma unroll
        for (int mm = 0; mm < MT; ++mm) xv[mm] = xs[(buf * MT + mm) * kStepFloat4 + swizzle(f0 + c, kMask)];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float wv[4];
          // c is a compile-time constant after unrolling; dispatch it to decode4's template argument.
          if constexpr (kChunks == 4) {
            switch (c) {
              case 0: decode4<F, 0>(raw[r][j], wv); break;
              case 1: decode4<F, 1>(raw[r][j], wv); break;
              case 2: decode4<F, 2>(raw[r][j], wv); break;
              default: decode4<F, 3>(raw[r][j], wv); break;
            }
          } else {
            switch (c) {
              case 0: decode4<F, 0>(raw[r][j], wv); break;
              case 1: decode4<F, 1>(raw[r][j], wv); break;
              case 2: decode4<F, 2>(raw[r][j], wv); break;
              case 3: decode4<F, 3>(raw[r][j], wv); break;
              case 4: decode4<F, 4>(raw[r][j], wv); break;
              case 5: decode4<F, 5>(raw[r][j], wv); break;
              case 6: decode4<F, 6>(raw[r][j], wv); break;
              default: decode4<F, 7>(raw[r][j], wv); break;
            }
          }
#pragma unroll
          for (int mm = 0; mm < MT; ++mm) {
            float& p = S == WeightScale::kRow ? acc[mm][r] : part[mm][r];
            p = fmaf(xv[mm].x, wv[0], p);
            p = fmaf(xv[mm].y, wv[1], p);
            p = fmaf(xv[mm].z, wv[2], p);
            p = fmaf(xv[mm].w, wv[3], p);
          }
        }
      }
      if constexpr (S != WeightScale::kRow) {
        if (valid[j]) {
          const int64_t g = S == WeightScale::kMx32 ? elem[j] / 32 : elem[j] / 128;
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const int64_t n = row0 + r < a.n ? row0 + r : a.n - 1;
            float ws;
            if constexpr (S == WeightScale::kMx32) {
              ws = codec::decode_e8m0(static_cast<const uint8_t*>(a.w_scale)[n * a.ws_ld + g]);
            } else {
              const int64_t sr = a.ws_row != nullptr ? a.ws_row[n] : n / 128;
              ws = static_cast<const float*>(a.w_scale)[sr * a.ws_ld + g];
            }
#pragma unroll
            for (int mm = 0; mm < MT; ++mm) {
              float f = ws;
              if (a.x_scale != nullptr) {
                const int64_t m = m0 + mm < a.m ? m0 + mm : a.m - 1;
                f *= a.x_scale[m * a.xs_m + g * a.xs_g];
              }
              acc[mm][r] = fmaf(part[mm][r], f, acc[mm][r]);
            }
          }
        }
      }
    }
    __syncthreads();  // every warp is done with `buf` before the next step's stage overwrites it
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int j = 0; j < P; ++j) {
#pragma unroll
        for (int q = 0; q < T::kPieceWords; ++q) raw[r][j][q] = next[r][j][q];
      }
    }
  }

#pragma unroll
  for (int mm = 0; mm < MT; ++mm) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float v = warp_sum(acc[mm][r]);
      const int64_t m = m0 + mm, n = row0 + r;
      if (lane == (mm * R + r) % 32 && m < a.m && n < a.n) {
        float y = v;
        if constexpr (S == WeightScale::kRow) {
          y *= static_cast<const float*>(a.w_scale)[n];
          if (a.x_scale != nullptr) y *= a.x_scale[m * a.xs_m];
        }
        if (workspace != nullptr) {
          atomicAdd(workspace + m * a.n + n, y);
        } else {
          if (a.bias != nullptr) y += load_bias(a.bias, a.bias_dtype, n);
          store_out(a.out, a.out_dtype, m * a.n + n, y);
        }
      }
    }
  }
}

constexpr int smem_bytes(int mt) { return 2 * mt * kStepFloat4 * 16; }

Status finish_split(const WeightStreamArgs& a, const float* workspace, Stream stream);

// Launch with a split of K chosen against the GPU's block slots: the row blocks alone can leave a partial
// last wave (70B down_proj at M = 1: 512 blocks on 396 slots runs as two waves); splitting K into s parts
// (partial sums by atomicAdd into an f32 workspace, then finalize_kernel) is taken when it fills the waves
// clearly better, with at least 2 steps per part.
template <WeightFormat F, WeightScale S, int MT>
Status launch_tile(const WeightStreamArgs& a, int64_t bx, int64_t by, int64_t steps, Stream stream) {
  auto kernel = weight_stream_kernel<F, S, MT>;
  // The shared-memory limit is a per-device attribute of the kernel: set it once on every device used
  // (tensor-parallel ranks launch the same kernel on several GPUs).
  static std::atomic<uint64_t> attr_set{0};
  int device = 0;
  QL_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device & 63);
  if ((attr_set.load(std::memory_order_acquire) & bit) == 0) {
    QL_RETURN_IF_ERROR(check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes(MT)),
                             "cudaFuncSetAttribute(weight_stream_kernel, MaxDynamicSharedMemorySize)"));
    attr_set.fetch_or(bit, std::memory_order_acq_rel);
  }
  static int per_sm = 0;
  if (per_sm == 0) {
    QL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem_bytes(MT)));
    if (per_sm < 1) per_sm = 1;
  }
  const double slots = static_cast<double>(per_sm) * a.sm_count;
  auto efficiency = [&](int64_t s) {
    const double waves = static_cast<double>(bx * by * s) / slots;
    return waves / std::ceil(waves);
  };
  int64_t split = 1;
  for (int64_t s = 2; s <= 8 && steps / s >= 2; ++s) {
    if (efficiency(s) > efficiency(split) + 0.15) split = s;
  }
  const int64_t per_split = (steps + split - 1) / split;
  split = (steps + per_split - 1) / per_split;
  const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(by), static_cast<unsigned>(split));
  Scratch ws;
  if (split > 1) {
    QL_ASSIGN_OR_RETURN(ws, Scratch::make(sizeof(float) * a.m * a.n, stream));
    QL_CUDA_CHECK(cudaMemsetAsync(ws.get(), 0, sizeof(float) * a.m * a.n, stream));
  }
  kernel<<<grid, kThreads, smem_bytes(MT), stream>>>(a, per_split, split > 1 ? ws.as<float>() : nullptr);
  QL_CUDA_CHECK_LAUNCH("weight_stream_kernel");
  if (split > 1) return finish_split(a, ws.as<float>(), stream);
  return Status::ok();
}

// The instantiations of one weight format (one .cu file per format keeps each compile short).
template <WeightFormat F>
Status launch_format(const WeightStreamArgs& a, int mt, int64_t bx, int64_t by, int64_t steps, Stream stream) {
#define QL_STREAM_CASE(S_)                                                   \
  switch (mt) {                                                              \
    case 1: return launch_tile<F, S_, 1>(a, bx, by, steps, stream);          \
    case 2: return launch_tile<F, S_, 2>(a, bx, by, steps, stream);          \
    case 4: return launch_tile<F, S_, 4>(a, bx, by, steps, stream);          \
    default: return launch_tile<F, S_, 8>(a, bx, by, steps, stream);         \
  }
  if constexpr (F == WeightFormat::kE4M3) {
    if (a.scale_kind == WeightScale::kRow) QL_STREAM_CASE(WeightScale::kRow)
    if (a.scale_kind == WeightScale::kBlock128) QL_STREAM_CASE(WeightScale::kBlock128)
  }
  if (a.scale_kind != WeightScale::kMx32) return Status::error("weight_stream: this format takes MX scales only");
  QL_STREAM_CASE(WeightScale::kMx32)
#undef QL_STREAM_CASE
}

}  // namespace qlinear::cuda::stream_detail
