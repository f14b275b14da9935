// Activation quantization kernels (act_quant.hpp): the reference quantizers' arithmetic on the GPU.
// Memory-bound, written for DRAM speed (act_vec.cuh): 16-byte loads, V vectors in flight per thread, one
// block per row (per-token and per-tensor scales) or per row chunk (1xG groups); a per-token row that fits
// one pass (K <= 32768) is read once, reduced and quantized from registers.
#include <cmath>
#include <type_traits>

#include "backends/cuda/act_quant.hpp"
#include "backends/cuda/act_quant_simple.hpp"
#include "backends/cuda/act_fp8_encode.cuh"
#include "backends/cuda/act_vec.cuh"
#include "backends/cuda/fp_codec.cuh"
#include "qlinear/quantize.hpp"

namespace qlinear::cuda {

namespace {

using actvec::kVec;
using actvec::Raw;
using actenc::encode8_div;
using actenc::quotient_rcp;

constexpr int kThreads = 256;
constexpr double kFp8Max = kFp8E4M3Max;
constexpr double kMinScale = kFp8MinScalingFactor;    // f32 constant widened, as the reference does
constexpr double kGroupAmaxFloor = static_cast<double>(1e-10f);

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float load(const __half* p) { return __half2float(*p); }

// Codes col .. col+7 of output row `r` (bytes packed in `q`, code i in byte i % 4 of word i / 4, or their
// exact float values), those below ld_codes.
__device__ __forceinline__ void store8(void* __restrict__ codes, bool as_float, int64_t r, int64_t ld_codes,
                                       int64_t col, uint2 q) {
  if (col + kVec <= ld_codes && ld_codes % kVec == 0) {
    if (as_float) {
      float4* p = reinterpret_cast<float4*>(static_cast<float*>(codes) + r * ld_codes + col);
      float f[kVec];
      codec::decode_e4m3x4(q.x, f);
      codec::decode_e4m3x4(q.y, f + 4);
      p[0] = make_float4(f[0], f[1], f[2], f[3]);
      p[1] = make_float4(f[4], f[5], f[6], f[7]);
    } else {
      *reinterpret_cast<uint2*>(static_cast<uint8_t*>(codes) + r * ld_codes + col) = q;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    if (col + i >= ld_codes) break;
    const uint32_t c = ((i < 4 ? q.x : q.y) >> (8 * (i % 4))) & 0xFFu;
    if (as_float) {
      static_cast<float*>(codes)[r * ld_codes + col + i] = codec::decode_e4m3(c);
    } else {
      static_cast<uint8_t*>(codes)[r * ld_codes + col + i] = static_cast<uint8_t>(c);
    }
  }
}

// encode_e4m3(x[i] * 2^-e) for MX (fp_codec.cuh's encode_e4m3_pow2: the scaling is exact).
__device__ __forceinline__ uint2 encode8_pow2(const float (&x)[kVec], int e) {
  const float scale = e == 127 ? __uint_as_float(0x00400000u) : __uint_as_float(static_cast<uint32_t>(127 - e) << 23);
  uint32_t w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t lo =
        __nv_cvt_float2_to_fp8x2(make_float2(x[4 * h] * scale, x[4 * h + 1] * scale), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi =
        __nv_cvt_float2_to_fp8x2(make_float2(x[4 * h + 2] * scale, x[4 * h + 3] * scale), __NV_SATFINITE, __NV_E4M3);
    w[h] = lo | hi << 16;
  }
  return make_uint2(w[0], w[1]);
}

// ceil(log2(a / 448)) exactly, a > 0 finite (mx_quant.cpp's ceil_log2_ratio with m = 448 = 0.875 * 2^9).
__device__ __forceinline__ int ceil_log2_over_448(double a) {
  int ka = 0;
  const double fa = frexp(a, &ka);
  return ka - 9 + (fa > 0.875 ? 1 : 0);
}

struct Fp8QuantParams {
  const void* x;
  int64_t k, ld_x;
  bool aligned;  // rows start 16-byte aligned
  ActQuantMode mode;
  float static_scale, scale_ub;
  const uint32_t* amax_tensor;  // kDynamicTensor: the global amax (float bits)
  const float* row_amax;        // kDynamicToken: given row maxima, or null
  uint32_t* amax_out;           // non-null: only reduce |x| into *amax_out (the first pass of kDynamicTensor)
  void* codes;
  bool as_float;
  int64_t ld_codes;
  ScaleOut so;
  int64_t real_groups;  // group modes: scales are written for groups < real_groups
};

// Grid (rows, chunks). Thread t of a block takes vectors t + j * blockDim.x (j < V) of its chunk.
template <class T, int V>
__global__ void __launch_bounds__(512) fp8_quant_kernel(Fp8QuantParams p) {
  // A GEMM launched after this one with programmatic stream serialization (wgmma_fp8_gemm.hpp) may start
  // its blocks once every block here has started; it waits for this grid's completion before reading.
  asm volatile("griddepcontrol.launch_dependents;");
  const int64_t row = blockIdx.x;
  const T* xr = static_cast<const T*>(p.x) + row * p.ld_x;
  const int64_t per_pass = int64_t{blockDim.x} * V * kVec;
  Raw<T> r[V];
  const auto col_of = [&](int64_t base, int j) { return base + (int64_t{j} * blockDim.x + threadIdx.x) * kVec; };
  const auto load_pass = [&](int64_t base) {
#pragma unroll
    for (int j = 0; j < V; ++j) r[j] = actvec::load_vec(xr, col_of(base, j), p.k, p.aligned);
  };
  const auto pass_max = [&]() {
    float a = 0.0f;
#pragma unroll
    for (int j = 0; j < V; ++j) a = fmaxf(a, actvec::abs_max(r[j]));
    return a;
  };

  if (p.amax_out != nullptr) {  // per-tensor amax
    load_pass(int64_t{blockIdx.y} * per_pass);
    const float a = actvec::block_max(pass_max());
    if (threadIdx.x == 0) atomicMax(p.amax_out, __float_as_uint(a));
    return;
  }

  const bool group = p.mode == ActQuantMode::kDynamicGroup128 || p.mode == ActQuantMode::kMx32;
  if (group) {
    const int64_t base = int64_t{blockIdx.y} * per_pass;
    load_pass(base);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t col = col_of(base, j);
      float f[kVec];
      actvec::to_floats(r[j], f);
      float a = 0.0f;
#pragma unroll
      for (int i = 0; i < kVec; ++i) a = fmaxf(a, fabsf(f[i]));
      uint2 q;
      if (p.mode == ActQuantMode::kDynamicGroup128) {
        a = actvec::lanes_max(a, 128 / kVec);  // a group is 16 consecutive lanes
        const double s = static_cast<double>(static_cast<float>(fmax(static_cast<double>(a), kGroupAmaxFloor) / kFp8Max));
        q = encode8_div(f, quotient_rcp(s), s);
        const int64_t g = col / 128;
        if (col % 128 == 0 && g < p.real_groups) {
          static_cast<float*>(p.so.scales)[row * p.so.m_stride + g * p.so.g_stride] = static_cast<float>(s);
        }
      } else {
        a = actvec::lanes_max(a, 32 / kVec);  // a group is 4 consecutive lanes
        int e = a == 0.0f ? -127 : ceil_log2_over_448(a);
        e = e < -127 ? -127 : (e > 127 ? 127 : e);
        q = encode8_pow2(f, e);
        const int64_t g = col / 32;
        if (col % 32 == 0 && g < p.real_groups) {
          const int64_t at = row * p.so.m_stride + g * p.so.g_stride;
          if (p.so.mx_as_float) {
            static_cast<float*>(p.so.scales)[at] = ldexpf(1.0f, e);
          } else {
            static_cast<uint8_t*>(p.so.scales)[at] = static_cast<uint8_t>(e + 127);
          }
        }
      }
      if (col < p.ld_codes) store8(p.codes, p.as_float, row, p.ld_codes, col, q);
    }
    return;
  }

  // One scale for the row: per-tensor (static or dynamic) or per-token.
  double s = p.static_scale;
  const bool reduce = p.mode == ActQuantMode::kDynamicToken && p.row_amax == nullptr;
  const bool one_pass = per_pass >= p.ld_codes;  // whole-row launches cover the row in one pass when it fits
  const int64_t first = int64_t{blockIdx.y} * per_pass;
  if (one_pass || !reduce) load_pass(first);
  if (p.mode == ActQuantMode::kDynamicTensor) {
    s = static_cast<double>(static_cast<float>(static_cast<double>(__uint_as_float(*p.amax_tensor)) / kFp8Max));
    if (!(s > 0)) s = kMinScale;
  } else if (p.mode == ActQuantMode::kDynamicToken) {
    double amax;
    if (!reduce) {
      amax = p.row_amax[row];
    } else {
      float a = 0.0f;
      if (one_pass) {
        a = pass_max();
      } else {
        for (int64_t base = 0; base < p.ld_codes; base += per_pass) {
          load_pass(base);
          a = fmaxf(a, pass_max());
        }
      }
      amax = actvec::block_max(a);
    }
    if (p.scale_ub > 0) amax = fmin(amax, static_cast<double>(p.scale_ub));
    s = fmax(static_cast<double>(static_cast<float>(amax / kFp8Max)), kMinScale);
  }
  // Per-tensor scales too are written once per row when m_stride != 0 (cuBLASLt's OUTER_VEC wants [M]).
  if (threadIdx.x == 0 && blockIdx.y == 0 && (p.so.m_stride != 0 || row == 0)) {
    static_cast<float*>(p.so.scales)[row * p.so.m_stride] = static_cast<float>(s);
  }
  const float rcp = quotient_rcp(s);  // s is an f32 value
  const auto quantize_pass = [&](int64_t base) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t col = col_of(base, j);
      if (col >= p.ld_codes) continue;
      float f[kVec];
      actvec::to_floats(r[j], f);
      store8(p.codes, p.as_float, row, p.ld_codes, col, encode8_div(f, rcp, s));
    }
  };
  if (one_pass || !reduce) {
    quantize_pass(first);
  } else {
    for (int64_t base = 0; base < p.ld_codes; base += per_pass) {
      load_pass(base);
      quantize_pass(base);
    }
  }
}

// The row modes (static, dynamic per-tensor's second pass, per-token) for the layout nearly every call has:
// BF16 rows 16-byte aligned, K and the code rows multiples of 8, codes as bytes. The same arithmetic as
// fp8_quant_kernel (encode8_div, the scale rules), without its per-vector bounds, dtype and output branches
// and its 64-bit indexing: that kernel is one body for every mode, type and layout, ~18 k SASS instructions
// per instantiation, and ran issue-bound at 1.9-2.4 TB/s. Vectors at or beyond K are zeros (code 0), as there.
// Per-token rows must fit one pass (blockDim.x * V vectors): they are reduced and quantized from registers.
template <int V>
__global__ void __launch_bounds__(512) fp8_rows_bf16_kernel(Fp8QuantParams p) {
  asm volatile("griddepcontrol.launch_dependents;");  // as fp8_quant_kernel
  const int64_t row = blockIdx.x;
  const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.x) + row * p.ld_x);
  uint2* cr = reinterpret_cast<uint2*>(static_cast<uint8_t*>(p.codes) + row * p.ld_codes);
  const int x_vectors = static_cast<int>(p.k / kVec), code_vectors = static_cast<int>(p.ld_codes / kVec);
  const int first = static_cast<int>(blockIdx.y * blockDim.x * V + threadIdx.x);
  Raw<__nv_bfloat16> r[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int v = first + j * static_cast<int>(blockDim.x);
    r[j].w[0] = v < x_vectors ? __ldg(xr + v) : make_uint4(0, 0, 0, 0);
  }
  double s = p.static_scale;
  if (p.mode == ActQuantMode::kDynamicTensor) {
    s = static_cast<double>(static_cast<float>(static_cast<double>(__uint_as_float(*p.amax_tensor)) / kFp8Max));
    if (!(s > 0)) s = kMinScale;
  } else if (p.mode == ActQuantMode::kDynamicToken) {
    double amax;
    if (p.row_amax != nullptr) {
      amax = p.row_amax[row];
    } else {
      float a = 0.0f;
#pragma unroll
      for (int j = 0; j < V; ++j) a = fmaxf(a, actvec::abs_max(r[j]));
      amax = actvec::block_max(a);
    }
    if (p.scale_ub > 0) amax = fmin(amax, static_cast<double>(p.scale_ub));
    s = fmax(static_cast<double>(static_cast<float>(amax / kFp8Max)), kMinScale);
  }
  if (threadIdx.x == 0 && blockIdx.y == 0 && (p.so.m_stride != 0 || row == 0)) {
    static_cast<float*>(p.so.scales)[row * p.so.m_stride] = static_cast<float>(s);
  }
  const float rcp = quotient_rcp(s);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int v = first + j * static_cast<int>(blockDim.x);
    if (v >= code_vectors) break;
    float f[kVec];
    actvec::to_floats(r[j], f);
    cr[v] = encode8_div(f, rcp, s);
  }
}

template <class T, int V>
Status launch_fp8_quant(const Fp8QuantParams& p, int64_t m, const actvec::RowPlan& plan, Stream stream) {
  fp8_quant_kernel<T, V><<<dim3(static_cast<unsigned>(m), plan.chunks), plan.threads, 0, stream>>>(p);
  QL_CUDA_CHECK_LAUNCH("fp8_quant_kernel");
  return Status::ok();
}

template <class T>
Status launch_plan(const Fp8QuantParams& p, int64_t m, const actvec::RowPlan& plan, Stream stream) {
  return plan.v == 8 ? launch_fp8_quant<T, 8>(p, m, plan, stream) : launch_fp8_quant<T, 4>(p, m, plan, stream);
}

template <class T>
__global__ void row_amax_kernel(const T* __restrict__ x, int64_t k, int64_t ld_x, bool vec, float* __restrict__ out) {
  const T* row = x + blockIdx.x * ld_x;
  float a = 0.0f;
  for (int64_t col = threadIdx.x * int64_t{kVec}; col < k; col += int64_t{blockDim.x} * kVec) {
    a = fmaxf(a, actvec::abs_max(actvec::load_vec(row, col, k, vec)));
  }
  a = actvec::block_max(a);
  if (threadIdx.x == 0) out[blockIdx.x] = a;
}

__global__ void broadcast_kernel(const float* src, float* dst, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < count; i += int64_t{gridDim.x} * kThreads) {
    dst[i] = *src;
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

bool g_allow_rows_kernel = true;  // act_quant_allow_rows_kernel

// Whether fp8_rows_bf16_kernel runs a row-mode launch (its layout, and per-token rows in one pass).
template <class T>
bool rows_kernel_fits(const Fp8QuantParams& p, const actvec::RowPlan& plan, bool whole_row) {
  if (!g_allow_rows_kernel || !std::is_same_v<T, __nv_bfloat16> || !p.aligned || p.as_float) return false;
  if (p.k % kVec != 0 || p.ld_codes % kVec != 0 || reinterpret_cast<uintptr_t>(p.codes) % 8 != 0) return false;
  if (p.ld_codes / kVec > (int64_t{1} << 30)) return false;  // 32-bit vector indices
  return !whole_row || int64_t{plan.threads} * plan.v * kVec >= p.ld_codes;
}

template <class T>
Status launch_typed(const ActQuantArgs& a, Stream stream) {
  Fp8QuantParams p{};
  p.x = a.x;
  p.k = a.k;
  p.ld_x = a.ld_x;
  p.aligned = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && (a.ld_x * sizeof(T)) % 16 == 0;
  p.mode = a.mode;
  p.static_scale = a.static_scale;
  p.scale_ub = a.scale_ub;
  p.amax_tensor = a.amax_scratch;
  p.row_amax = a.row_amax;
  p.codes = a.codes;
  p.as_float = a.codes_as_float;
  p.ld_codes = a.ld_codes;
  p.so = a.scale;
  if (a.ld_codes < a.k) return Status::error("act_quant: code rows shorter than K");
  const int64_t vectors = (a.ld_codes + kVec - 1) / kVec;
  switch (a.mode) {
    case ActQuantMode::kStaticTensor:
    case ActQuantMode::kDynamicTensor:
    case ActQuantMode::kDynamicToken: {
      if (a.mode == ActQuantMode::kDynamicTensor) {
        if (a.amax_scratch == nullptr) return Status::error("act_quant: dynamic per-tensor needs amax scratch");
        QL_CUDA_CHECK(cudaMemsetAsync(a.amax_scratch, 0, sizeof(uint32_t), stream));
        Fp8QuantParams r = p;
        r.amax_out = a.amax_scratch;
        QL_RETURN_IF_ERROR(launch_plan<T>(r, a.m, actvec::plan_rows(vectors, false), stream));
      }
      const bool whole_row = a.mode == ActQuantMode::kDynamicToken && a.row_amax == nullptr;
      const actvec::RowPlan plan = actvec::plan_rows(vectors, whole_row);
      if (rows_kernel_fits<T>(p, plan, whole_row)) {
        const dim3 grid(static_cast<unsigned>(a.m), plan.chunks);
        if (plan.v == 8) {
          fp8_rows_bf16_kernel<8><<<grid, plan.threads, 0, stream>>>(p);
        } else {
          fp8_rows_bf16_kernel<4><<<grid, plan.threads, 0, stream>>>(p);
        }
        QL_CUDA_CHECK_LAUNCH("fp8_rows_bf16_kernel");
        return Status::ok();
      }
      return launch_plan<T>(p, a.m, plan, stream);
    }
    case ActQuantMode::kDynamicGroup128:
    case ActQuantMode::kMx32: {
      const int group = a.mode == ActQuantMode::kMx32 ? 32 : 128;
      // Groups run over the padded row (zeros beyond K); scales are written for the real groups only.
      p.real_groups = (a.k + group - 1) / group;
      return launch_plan<T>(p, a.m, actvec::plan_rows(vectors, false), stream);
    }
  }
  return Status::error("act_quant: unknown mode");
}

}  // namespace

void act_quant_allow_rows_kernel(bool allow) { g_allow_rows_kernel = allow; }
bool act_quant_rows_kernel_allowed() { return g_allow_rows_kernel; }

Status launch_act_quant(const ActQuantArgs& a, Stream stream) {
  if (a.m == 0) return Status::ok();
  // Measured faster: 1x128 groups at every M, and every mode at decode sizes (M = 16: 4.2-5.9 us against
  // 7.6-9.5 us for the vector kernels; W8A8 FP8 at M = 1 on 8b.qkv took 20.8 us with them, 18.3 without).
  if (a.mode == ActQuantMode::kDynamicGroup128 || a.m <= kActQuantSimpleMaxM) return launch_act_quant_simple(a, stream);
  switch (a.x_dtype) {
    case DType::kF32: return launch_typed<float>(a, stream);
    case DType::kBF16: return launch_typed<__nv_bfloat16>(a, stream);
    case DType::kF16: return launch_typed<__half>(a, stream);
    default: return Status::error("act_quant: activations must be f32, bf16 or f16, got " + std::string(name(a.x_dtype)));
  }
}

Status launch_row_amax(const void* x, DType x_dtype, int64_t m, int64_t k, int64_t ld_x, float* out, Stream stream) {
  if (m == 0) return Status::ok();
  const auto launch = [&](auto* typed) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(typed)>>;
    const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && (ld_x * sizeof(T)) % 16 == 0;
    const actvec::RowPlan plan = actvec::plan_rows((k + kVec - 1) / kVec, true);
    row_amax_kernel<T><<<static_cast<unsigned>(m), plan.threads, 0, stream>>>(static_cast<const T*>(x), k, ld_x, vec,
                                                                             out);
  };
  switch (x_dtype) {
    case DType::kF32: launch(static_cast<const float*>(nullptr)); break;
    case DType::kBF16: launch(static_cast<const __nv_bfloat16*>(nullptr)); break;
    case DType::kF16: launch(static_cast<const __half*>(nullptr)); break;
    default: return Status::error("row_amax: activations must be f32, bf16 or f16");
  }
  QL_CUDA_CHECK_LAUNCH("row_amax_kernel");
  return Status::ok();
}

Status launch_broadcast_f32(const float* src, float* dst, int64_t count, Stream stream) {
  if (count == 0) return Status::ok();
  broadcast_kernel<<<grid_for(count), kThreads, 0, stream>>>(src, dst, count);
  QL_CUDA_CHECK_LAUNCH("broadcast_kernel");
  return Status::ok();
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
