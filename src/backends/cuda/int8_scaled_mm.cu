// INT8 activation quantization and the INT8 GEMM epilogue (int8_scaled_mm.hpp). Both memory-bound: the
// quantizer reads rows with 16-byte vectors (act_vec.cuh; a dynamic row that fits one pass is read once and
// quantized from registers; each code decided in f32, act_int8_encode_math.hpp), the epilogue takes 8
// consecutive outputs per thread (16-byte loads of every operand; 4 in the general kernel for other layouts).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "backends/cuda/act_int8_encode_math.hpp"
#include "backends/cuda/act_quant_simple.hpp"
#include "backends/cuda/act_vec.cuh"
#include "backends/cuda/int8_scaled_mm.hpp"

namespace qlinear::cuda {

namespace {

using actvec::kVec;
using actvec::Raw;

__device__ __forceinline__ int8_t sat8(double v) { return static_cast<int8_t>(fmin(fmax(v, -128.0), 127.0)); }

// The reference's arithmetic, out of line: sat8(rne(x / s) + z) with the quotient in double.
__device__ __noinline__ uint32_t int8_code_exact(float x, double s, double z) {
  return static_cast<uint8_t>(sat8(rint(static_cast<double>(x) / s) + z));
}

// sat8(rne(x[i] / s) + z) for 8 elements in f32 (act_int8_encode_math.hpp): r = f32(1/s), NaN where s is
// outside int8_scale_in_range (every element then takes the exact path), s32 = s (an f32 value), zc the
// clamped zero point. One branch per 8 elements: where any of them leaves the f32 path (|x / s| >= 2^20, not
// finite), the 8 take the exact one.
__device__ __forceinline__ uint2 int8_encode8(const float (&x)[kVec], float r, float s32, double s, double z,
                                              int32_t zc) {
  uint32_t b[kVec];
  bool fast = true;
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const float q = x[i] * r;
    fast &= actenc::int8_fast_quotient(q);
    b[i] = actenc::int8_code_byte(actenc::int8_rne_quotient(x[i], q, s32), zc);
  }
  if (!fast) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) b[i] = int8_code_exact(x[i], s, z);
  }
  return make_uint2(b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24, b[4] | b[5] << 8 | b[6] << 16 | b[7] << 24);
}

struct Int8QuantParams {
  const void* x;
  int64_t k, ld_x;
  bool aligned;
  Int8ActMode mode;
  float static_scale;
  int32_t static_zp;
  int8_t* codes;
  int64_t ld_codes;
  float* scales;
  int32_t* zps;
  const float* row_amax;
};

// A dynamic row's scale s and zero point z from this thread's part of its range (lo, hi: min and max of x,
// or max |x| in both for the symmetric mode), reduced over the block here; p.row_amax, where given, replaces
// the max (tensor parallelism). Thread 0 writes them to the row's scale / zero-point slots.
__device__ __forceinline__ void int8_dynamic_row_scale(const Int8QuantParams& p, int64_t row, bool asym, float lo,
                                                       float hi, double& s, double& z) {
  hi = actvec::block_max(hi);
  lo = asym ? actvec::block_min(lo) : hi;
  double dlo = p.k > 0 ? lo : 0.0, dhi = p.k > 0 ? hi : 0.0;
  if (p.row_amax != nullptr) dhi = p.row_amax[row];
  actenc::int8_dynamic_scale(dlo, dhi, asym, s, z);
  if (threadIdx.x == 0 && asym) p.zps[row] = static_cast<int32_t>(z);
  if (threadIdx.x == 0) p.scales[row] = static_cast<float>(s);
}

// int8_encode8's constants for scale s (an f32 value) and zero point z: r = f32(1/s) (NaN outside
// int8_scale_in_range: the exact path for every element), s as f32, zc = z clamped to +-(2^22 + 256).
struct Int8EncodeConstants {
  float rcp, s32;
  int32_t zc;
};
__device__ __forceinline__ Int8EncodeConstants int8_encode_constants(double s, double z) {
  const float s32 = static_cast<float>(s);
  const float rcp = actenc::int8_scale_in_range(s32) ? 1.0f / s32 : __int_as_float(0x7FFFFFFF);
  return {rcp, s32, actenc::int8_clamped_zero_point(z)};
}

// Grid (rows, chunks); thread t takes vectors t + j * blockDim.x (j < V) of its chunk (act_vec.cuh).
template <class T, int V>
__global__ void __launch_bounds__(512) int8_quant_kernel(Int8QuantParams p) {
  const int64_t row = blockIdx.x;
  const T* xr = static_cast<const T*>(p.x) + row * p.ld_x;
  const int64_t per_pass = int64_t{blockDim.x} * V * kVec;
  Raw<T> r[V];
  const auto col_of = [&](int64_t base, int j) { return base + (int64_t{j} * blockDim.x + threadIdx.x) * kVec; };
  const auto load_pass = [&](int64_t base) {
#pragma unroll
    for (int j = 0; j < V; ++j) r[j] = actvec::load_vec(xr, col_of(base, j), p.k, p.aligned);
  };
  const bool dynamic = p.mode == Int8ActMode::kDynamicTokenSym || p.mode == Int8ActMode::kDynamicTokenAsym;
  const bool asym = p.mode == Int8ActMode::kDynamicTokenAsym;
  const bool one_pass = per_pass >= p.ld_codes;
  const int64_t first = int64_t{blockIdx.y} * per_pass;
  if (one_pass || !dynamic) load_pass(first);
  double s = p.static_scale;
  double z = p.mode == Int8ActMode::kStaticAsym ? static_cast<double>(p.static_zp) : 0.0;
  if (dynamic) {
    // Min and max over the row's K elements (max |x| for the symmetric mode); the padding is not data.
    float lo = INFINITY, hi = -INFINITY;
    const auto reduce_pass = [&](int64_t base) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int64_t col = col_of(base, j);
        float f[kVec];
        actvec::to_floats(r[j], f);
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          if (col + i < p.k) {
            lo = fminf(lo, asym ? f[i] : fabsf(f[i]));
            hi = fmaxf(hi, asym ? f[i] : fabsf(f[i]));
          }
        }
      }
    };
    if (one_pass) {
      reduce_pass(first);
    } else {
      for (int64_t base = 0; base < p.ld_codes; base += per_pass) {
        load_pass(base);
        reduce_pass(base);
      }
    }
    int8_dynamic_row_scale(p, row, asym, lo, hi, s, z);
  }
  const Int8EncodeConstants ec = int8_encode_constants(s, z);
  const auto quantize_pass = [&](int64_t base) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t col = col_of(base, j);
      if (col >= p.ld_codes) continue;
      float f[kVec];
      actvec::to_floats(r[j], f);
      uint2 q = int8_encode8(f, ec.rcp, ec.s32, s, z, ec.zc);
      if (col + kVec > p.k) {  // the padding columns are zero codes
        for (int i = 0; i < kVec; ++i) {
          if (col + i >= p.k) (i < 4 ? q.x : q.y) &= ~(0xFFu << (8 * (i % 4)));
        }
      }
      int8_t* out = p.codes + row * p.ld_codes + col;
      if (col + kVec <= p.ld_codes && p.ld_codes % kVec == 0) {
        *reinterpret_cast<uint2*>(out) = q;
      } else {
        for (int i = 0; i < kVec && col + i < p.ld_codes; ++i) {
          out[i] = static_cast<int8_t>(((i < 4 ? q.x : q.y) >> (8 * (i % 4))) & 0xFFu);
        }
      }
    }
  };
  if (one_pass || !dynamic) {
    quantize_pass(first);
  } else {
    for (int64_t base = 0; base < p.ld_codes; base += per_pass) {
      load_pass(base);
      quantize_pass(base);
    }
  }
}

__device__ __forceinline__ double load_bias(const void* bias, DType d, int64_t n) {
  switch (d) {
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[n]);
    case DType::kF16: return __half2float(static_cast<const __half*>(bias)[n]);
    default: return static_cast<const float*>(bias)[n];
  }
}

// Output row m's activation zero point (0 without column sums: the symmetric modes) and scale.
struct Int8EpilogueRow {
  int64_t z;
  double sx;
};
__device__ __forceinline__ Int8EpilogueRow int8_epilogue_row(const Int8EpilogueArgs& a, int64_t m) {
  const int64_t z = a.w_colsum == nullptr ? 0
                    : a.x_zero_point == nullptr ? a.x_zero_point_value
                                                : a.x_zero_point[a.x_zero_point_per_row ? m : 0];
  return {z, a.x_scale == nullptr ? a.x_scale_value : a.x_scale[a.x_scale_per_row ? m : 0]};
}

// One output before its rounding, in f64: (acc - z colsum) sx ws (+ bias), each operation rounded on its own.
// The intrinsics keep nvcc from contracting the product and the bias into one FMA, which it did in some of
// the kernels' paths and not in others: with them the two kernels here and the wgmma GEMM's fused epilogue
// (wgmma_epilogue.cuh) give the same outputs bit for bit by construction.
__device__ __forceinline__ double int8_epilogue_value(int32_t acc, const Int8EpilogueRow& r, int64_t colsum, float ws,
                                                      bool has_bias, double bias) {
  int64_t v = acc;
  if (r.z != 0) v -= r.z * colsum;
  const double y = __dmul_rn(static_cast<double>(v), __dmul_rn(r.sx, static_cast<double>(ws)));
  return has_bias ? __dadd_rn(y, bias) : y;
}

// Grid (rows, column chunks of 4 * blockDim.x): 4 consecutive outputs per thread.
__global__ void int8_epilogue_kernel(Int8EpilogueArgs a, bool vec) {
  const int64_t m = blockIdx.x;
  const int64_t n0 = (int64_t{blockIdx.y} * blockDim.x + threadIdx.x) * 4;
  if (n0 >= a.n) return;
  const Int8EpilogueRow row = int8_epilogue_row(a, m);
  int32_t acc[4];
  const int32_t* arow = a.acc + m * a.n;
  const bool full = vec && n0 + 4 <= a.n;
  if (full) {
    const int4 v = *reinterpret_cast<const int4*>(arow + n0);
    acc[0] = v.x;
    acc[1] = v.y;
    acc[2] = v.z;
    acc[3] = v.w;
  } else {
    for (int i = 0; i < 4; ++i) acc[i] = n0 + i < a.n ? arow[n0 + i] : 0;
  }
  double y[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t n = n0 + i < a.n ? n0 + i : a.n - 1;
    y[i] = int8_epilogue_value(acc[i], row, row.z != 0 ? a.w_colsum[n] : 0, a.w_scale[n], a.bias != nullptr,
                               a.bias != nullptr ? load_bias(a.bias, a.bias_dtype, n) : 0.0);
  }
  const int64_t at = m * (a.ld_out > 0 ? a.ld_out : a.n) + n0;
  switch (a.out_dtype) {
    case DType::kBF16:
    case DType::kF16: {
      uint16_t h[4];
      for (int i = 0; i < 4; ++i) {
        h[i] = a.out_dtype == DType::kBF16 ? __bfloat16_as_ushort(__double2bfloat16(y[i]))
                                           : __half_as_ushort(__double2half(y[i]));
      }
      uint16_t* out = static_cast<uint16_t*>(a.out) + at;
      if (full) {
        *reinterpret_cast<uint2*>(out) = make_uint2(h[0] | uint32_t{h[1]} << 16, h[2] | uint32_t{h[3]} << 16);
      } else {
        for (int i = 0; i < 4 && n0 + i < a.n; ++i) out[i] = h[i];
      }
      break;
    }
    default: {
      float* out = static_cast<float*>(a.out) + at;
      if (full) {
        *reinterpret_cast<float4*>(out) =
            make_float4(static_cast<float>(y[0]), static_cast<float>(y[1]), static_cast<float>(y[2]),
                        static_cast<float>(y[3]));
      } else {
        for (int i = 0; i < 4 && n0 + i < a.n; ++i) out[i] = static_cast<float>(y[i]);
      }
      break;
    }
  }
}

// Bias elements n0 .. n0 + 7 (16-byte aligned) with 16-byte loads, as load_bias converts them.
__device__ __forceinline__ void load_bias8(const void* bias, DType d, int64_t n0, double (&b)[8]) {
  if (d == DType::kF32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(bias) + n0);
    const float4 u = __ldg(p), v = __ldg(p + 1);
    const float f[8] = {u.x, u.y, u.z, u.w, v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) b[i] = f[i];
    return;
  }
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(bias) + n0));
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint16_t h = static_cast<uint16_t>(w[i / 2] >> (16 * (i % 2)));
    b[i] = d == DType::kBF16 ? __bfloat162float(__ushort_as_bfloat16(h)) : __half2float(__ushort_as_half(h));
  }
}

// The epilogue for the layout nearly every call has (N and the output row stride multiples of 8; the INT32
// sums, outputs, per-column vectors and bias 16-byte aligned): 8 consecutive outputs per thread, every load and
// store 16 bytes wide, the output dtype a template argument. The general kernel's arithmetic, operation for
// operation (the same outputs bit for bit), without its per-element bounds, scalar scale loads and dtype
// switch.
template <class OutT>
__global__ void __launch_bounds__(256) int8_epilogue_vec8_kernel(Int8EpilogueArgs a) {
  const int64_t m = blockIdx.x;
  const int64_t n0 = (int64_t{blockIdx.y} * blockDim.x + threadIdx.x) * 8;
  if (n0 >= a.n) return;
  const Int8EpilogueRow row = int8_epilogue_row(a, m);
  const int4* ap = reinterpret_cast<const int4*>(a.acc + m * a.n + n0);
  const int4 a0 = ap[0], a1 = ap[1];
  const float4* wp = reinterpret_cast<const float4*>(a.w_scale + n0);
  const float4 w0 = __ldg(wp), w1 = __ldg(wp + 1);
  const int32_t acc[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
  const float ws[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
  int64_t colsum[8] = {};
  // 16-byte loads: with scalar ones (neighbouring threads 64 bytes apart) static asymmetric layers ran slower
  // than before this kernel (H100, 8b.qkv M = 4096: about 8 us more).
  if (row.z != 0) {
    const longlong2* cp = reinterpret_cast<const longlong2*>(a.w_colsum + n0);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const longlong2 c = __ldg(cp + j);
      colsum[2 * j] = c.x;
      colsum[2 * j + 1] = c.y;
    }
  }
  double bias[8] = {};
  if (a.bias != nullptr) load_bias8(a.bias, a.bias_dtype, n0, bias);
  double y[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) y[i] = int8_epilogue_value(acc[i], row, colsum[i], ws[i], a.bias != nullptr, bias[i]);
  OutT* out = static_cast<OutT*>(a.out) + m * (a.ld_out > 0 ? a.ld_out : a.n) + n0;
  if constexpr (std::is_same_v<OutT, float>) {
    reinterpret_cast<float4*>(out)[0] = make_float4(static_cast<float>(y[0]), static_cast<float>(y[1]),
                                                    static_cast<float>(y[2]), static_cast<float>(y[3]));
    reinterpret_cast<float4*>(out)[1] = make_float4(static_cast<float>(y[4]), static_cast<float>(y[5]),
                                                    static_cast<float>(y[6]), static_cast<float>(y[7]));
  } else {
    uint32_t h[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      h[i] = std::is_same_v<OutT, __nv_bfloat16> ? __bfloat16_as_ushort(__double2bfloat16(y[i]))
                                                 : __half_as_ushort(__double2half(y[i]));
    }
    *reinterpret_cast<uint4*>(out) = make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
  }
}

// The same arithmetic for the layout nearly every call has (BF16 rows 16-byte aligned, K and the code rows
// multiples of 8), without the general kernel's per-vector bounds and padding masks, dtype paths and 64-bit
// indexing (that kernel is one body for every mode, type and layout: 5-10 k SASS instructions). Vectors at or
// beyond K are padding: zero codes, not part of the row's range. Per-token rows must fit one pass.
template <int V>
__global__ void __launch_bounds__(512) int8_rows_bf16_kernel(Int8QuantParams p) {
  const int64_t row = blockIdx.x;
  const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.x) + row * p.ld_x);
  uint2* cr = reinterpret_cast<uint2*>(p.codes + row * p.ld_codes);
  const int x_vectors = static_cast<int>(p.k / kVec), code_vectors = static_cast<int>(p.ld_codes / kVec);
  const int first = static_cast<int>(blockIdx.y * blockDim.x * V + threadIdx.x);
  Raw<__nv_bfloat16> r[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int v = first + j * static_cast<int>(blockDim.x);
    r[j].w[0] = v < x_vectors ? __ldg(xr + v) : make_uint4(0, 0, 0, 0);
  }
  const bool dynamic = p.mode == Int8ActMode::kDynamicTokenSym || p.mode == Int8ActMode::kDynamicTokenAsym;
  const bool asym = p.mode == Int8ActMode::kDynamicTokenAsym;
  double s = p.static_scale;
  double z = p.mode == Int8ActMode::kStaticAsym ? static_cast<double>(p.static_zp) : 0.0;
  if (dynamic) {  // as int8_quant_kernel
    float lo = INFINITY, hi = -INFINITY;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (first + j * static_cast<int>(blockDim.x) >= x_vectors) continue;
      float f[kVec];
      actvec::to_floats(r[j], f);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        lo = fminf(lo, asym ? f[i] : fabsf(f[i]));
        hi = fmaxf(hi, asym ? f[i] : fabsf(f[i]));
      }
    }
    int8_dynamic_row_scale(p, row, asym, lo, hi, s, z);
  }
  const Int8EncodeConstants ec = int8_encode_constants(s, z);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int v = first + j * static_cast<int>(blockDim.x);
    if (v >= code_vectors) break;
    float f[kVec];
    actvec::to_floats(r[j], f);
    cr[v] = v < x_vectors ? int8_encode8(f, ec.rcp, ec.s32, s, z, ec.zc) : make_uint2(0, 0);
  }
}

// Whether int8_rows_bf16_kernel runs a launch (its layout; per-token rows in one pass).
bool int8_rows_kernel_fits(const Int8QuantParams& p, DType dtype, const actvec::RowPlan& plan, bool dynamic) {
  if (dtype != DType::kBF16 || !p.aligned || p.k % kVec != 0 || p.ld_codes % kVec != 0) return false;
  if (reinterpret_cast<uintptr_t>(p.codes) % 8 != 0 || p.ld_codes / kVec > (int64_t{1} << 30)) return false;
  return !dynamic || int64_t{plan.threads} * plan.v * kVec >= p.ld_codes;
}

template <class T>
Status launch_quant_typed(const Int8QuantArgs& a, Stream stream) {
  Int8QuantParams p{};
  p.x = a.x;
  p.k = a.k;
  p.ld_x = a.ld_x;
  p.aligned = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && (a.ld_x * sizeof(T)) % 16 == 0;
  p.mode = a.mode;
  p.static_scale = a.static_scale;
  p.static_zp = a.static_zero_point;
  p.codes = a.codes;
  p.ld_codes = a.ld_codes;
  p.scales = a.scales;
  p.zps = a.zero_points;
  p.row_amax = a.row_amax;
  const bool dynamic = a.mode == Int8ActMode::kDynamicTokenSym || a.mode == Int8ActMode::kDynamicTokenAsym;
  const actvec::RowPlan plan = actvec::plan_rows((a.ld_codes + kVec - 1) / kVec, dynamic);
  const dim3 grid(static_cast<unsigned>(a.m), plan.chunks);
  if (act_quant_rows_kernel_allowed() && int8_rows_kernel_fits(p, a.x_dtype, plan, dynamic)) {
    if (plan.v == 8) {
      int8_rows_bf16_kernel<8><<<grid, plan.threads, 0, stream>>>(p);
    } else {
      int8_rows_bf16_kernel<4><<<grid, plan.threads, 0, stream>>>(p);
    }
    QL_CUDA_CHECK_LAUNCH("int8_rows_bf16_kernel");
    return Status::ok();
  }
  // Long per-token rows: the simple kernel measured faster than this vector kernel (act_quant_simple.hpp);
  // the row kernel above beats both where it fits.
  if (dynamic && a.k > 8192 && a.m >= 256) return launch_int8_act_quant_simple(a, stream);
  if (plan.v == 8) {
    int8_quant_kernel<T, 8><<<grid, plan.threads, 0, stream>>>(p);
  } else {
    int8_quant_kernel<T, 4><<<grid, plan.threads, 0, stream>>>(p);
  }
  QL_CUDA_CHECK_LAUNCH("int8_quant_kernel");
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
  // Decode sizes: the simple kernel measured faster (act_quant_simple.hpp).
  if (a.m <= kActQuantSimpleMaxM) return launch_int8_act_quant_simple(a, stream);
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
  constexpr int kThreads = 256;
  const int64_t ld_out = a.ld_out > 0 ? a.ld_out : a.n;
  const bool vec = a.n % 4 == 0 && ld_out % 4 == 0 && reinterpret_cast<uintptr_t>(a.acc) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (a.n % 8 == 0 && ld_out % 8 == 0 && aligned16(a.acc) && aligned16(a.out) && aligned16(a.w_scale) &&
      (a.w_colsum == nullptr || aligned16(a.w_colsum)) && (a.bias == nullptr || aligned16(a.bias))) {
    const dim3 grid8(static_cast<unsigned>(a.m), static_cast<unsigned>((a.n + 8 * kThreads - 1) / (8 * kThreads)));
    switch (a.out_dtype) {
      case DType::kBF16: int8_epilogue_vec8_kernel<__nv_bfloat16><<<grid8, kThreads, 0, stream>>>(a); break;
      case DType::kF16: int8_epilogue_vec8_kernel<__half><<<grid8, kThreads, 0, stream>>>(a); break;
      default: int8_epilogue_vec8_kernel<float><<<grid8, kThreads, 0, stream>>>(a); break;
    }
    QL_CUDA_CHECK_LAUNCH("int8_epilogue_vec8_kernel");
    return Status::ok();
  }
  const dim3 grid(static_cast<unsigned>(a.m), static_cast<unsigned>((a.n + 4 * kThreads - 1) / (4 * kThreads)));
  int8_epilogue_kernel<<<grid, kThreads, 0, stream>>>(a, vec);
  QL_CUDA_CHECK_LAUNCH("int8_epilogue_kernel");
  return Status::ok();
}

}  // namespace qlinear::cuda
