// Route kCublasLt for INT8 W8A8: activations quantized on the GPU (static/dynamic, symmetric/asymmetric) or
// taken pre-quantized, cuBLASLt's INT8 GEMM (exact INT32), then the FP64 epilogue (zero points x column
// sums, scales, bias, one rounding).
#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/int8_scaled_mm.hpp"
#include "backends/cuda/routes.hpp"
#include "backends/cuda/wgmma_int8_gemm.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace qlinear::cuda {

namespace {

// Columns per GEMM + epilogue pass: the INT32 block of M x cols stays within `budget` bytes, so that the
// epilogue reads it back from the L2 rather than from DRAM (QLINEAR_INT8_L2_BLOCK_MIB; 0 or unset: one
// pass over all N). A multiple of 256 columns, at least 256.
int64_t int8_block_cols(int64_t m, int64_t n) {
  const char* env = std::getenv("QLINEAR_INT8_L2_BLOCK_MIB");
  const int64_t mib = env != nullptr ? std::atoll(env) : 0;
  if (mib <= 0) return n;
  const int64_t cols = std::max<int64_t>(256, (mib << 20) / (4 * m) / 256 * 256);
  return std::min(cols, n);
}

// The GEMM + epilogue engine: the fused wgmma kernel (wgmma_int8_gemm.hpp: bit for bit the same outputs,
// no INT32 matrix in memory) or cuBLASLt's INT32 GEMM + the epilogue kernel. QLINEAR_INT8_GEMM=wgmma |
// cublaslt picks one for every M; by default the fused kernel runs from kFusedMinM rows up.
constexpr int64_t kFusedMinM = 1 << 30;

bool use_fused(int64_t m) {
  const char* env = std::getenv("QLINEAR_INT8_GEMM");
  if (env != nullptr && std::string(env) == "wgmma") return true;
  if (env != nullptr && std::string(env) == "cublaslt") return false;
  return m >= kFusedMinM;
}

}  // namespace

Status apply_int8(const ApplyCtx& a) {
  const LinearConfig& c = a.c;
  const QuantKey& key = *c.activation_key;
  const int64_t kl = a.st.k_valid;
  Int8QuantArgs q;
  q.x = a.x.raw();
  q.x_dtype = a.x.dtype();
  q.m = a.m;
  q.k = c.k;
  q.ld_x = a.x.strides()[0];
  q.mode = key.scale.is_static ? (key.symmetric ? Int8ActMode::kStaticSym : Int8ActMode::kStaticAsym)
                               : (key.symmetric ? Int8ActMode::kDynamicTokenSym : Int8ActMode::kDynamicTokenAsym);
  q.static_scale = a.st.static_input_scale;
  q.static_zero_point = a.st.static_zero_point;
  q.ld_codes = kl;
  Scratch codes, scales, zps;
  const void* code_ptr = nullptr;
  const float* scale_ptr = nullptr;
  const int32_t* zp_ptr = nullptr;
  bool per_row = !key.scale.is_static;
  if (a.pre != nullptr) {
    QL_ASSIGN_OR_RETURN(code_ptr, padded_codes(*a.pre, kl, codes, a.stream));
    scale_ptr = static_cast<const float*>(a.pre->scale.raw());
    per_row = a.pre->scale.numel() != 1 || a.m == 1;
    if (!key.symmetric) zp_ptr = static_cast<const int32_t*>(a.pre->zero_point.raw());
  } else {
    QL_ASSIGN_OR_RETURN(codes, Scratch::make(static_cast<size_t>(a.m * kl), a.stream));
    QL_ASSIGN_OR_RETURN(scales, Scratch::make(sizeof(float) * a.m, a.stream));
    QL_ASSIGN_OR_RETURN(zps, Scratch::make(sizeof(int32_t) * a.m, a.stream));
    q.codes = codes.as<int8_t>();
    q.scales = scales.as<float>();
    q.zero_points = zps.as<int32_t>();
    QL_RETURN_IF_ERROR(launch_int8_act_quant(q, a.stream));
    code_ptr = codes.get();
    scale_ptr = per_row ? scales.as<float>() : nullptr;
    zp_ptr = per_row && !key.symmetric ? zps.as<int32_t>() : nullptr;
  }
  // TMA reads the codes: rows 16-byte aligned (k_valid is a multiple of 32; a caller's pre-quantized
  // tensor may start anywhere).
  if (use_fused(a.m) && reinterpret_cast<uintptr_t>(code_ptr) % 16 == 0) {
    WgmmaInt8Args f;
    f.x = code_ptr;
    f.ld_x = kl;
    f.w = a.st.w.raw();
    f.ld_w = a.st.row_bytes;
    f.m = a.m;
    f.n = c.n;
    f.k = kl;
    f.x_scale = scale_ptr;
    f.x_scale_per_row = per_row;
    f.x_scale_value = a.st.static_input_scale;
    f.x_zero_point = zp_ptr;
    f.x_zero_point_per_row = per_row;
    f.x_zero_point_value = a.st.static_zero_point;
    f.w_scale = static_cast<const float*>(a.st.w_scale.raw());
    f.w_colsum = key.symmetric ? nullptr : static_cast<const int64_t*>(a.st.w_colsum.raw());
    f.bias = a.bias ? a.bias->raw() : nullptr;
    f.bias_dtype = a.bias ? a.bias->dtype() : DType::kF32;
    f.out = a.out.raw();
    f.out_dtype = a.out.dtype();
    f.tile_n = 256;
    f.persistent = true;
    return launch_wgmma_int8_gemm(f, a.stream);
  }
  const int64_t block = int8_block_cols(a.m, c.n);
  QL_ASSIGN_OR_RETURN(Scratch acc, Scratch::make(sizeof(int32_t) * a.m * block, a.stream));

  LtGemm g;
  g.ab_dtype = DType::kI8;
  g.ld_w = a.st.row_bytes;
  g.x = code_ptr;
  g.ld_x = kl;
  g.m = a.m;
  g.k = kl;
  g.out = acc.get();
  g.out_dtype = DType::kI32;

  Int8EpilogueArgs e;
  e.acc = acc.as<int32_t>();
  e.m = a.m;
  e.ld_out = c.n;
  // Scales and zero points: per row (dynamic, or pre-quantized [M, 1]), or one value (static: the layer's,
  // or a pre-quantized activation's [1] on the device).
  e.x_scale = scale_ptr;
  e.x_scale_per_row = per_row;
  e.x_scale_value = a.st.static_input_scale;
  e.x_zero_point = zp_ptr;
  e.x_zero_point_per_row = per_row;
  e.x_zero_point_value = a.st.static_zero_point;
  e.bias_dtype = a.bias ? a.bias->dtype() : DType::kF32;
  e.out_dtype = a.out.dtype();
  const auto* w_scale = static_cast<const float*>(a.st.w_scale.raw());
  const auto* colsum = key.symmetric ? nullptr : static_cast<const int64_t*>(a.st.w_colsum.raw());
  for (int64_t n0 = 0; n0 < c.n; n0 += block) {
    const int64_t cols = std::min(block, c.n - n0);
    g.w = static_cast<const int8_t*>(a.st.w.raw()) + n0 * a.st.row_bytes;
    g.n = cols;
    QL_RETURN_IF_ERROR(lt_gemm(g, a.stream));
    e.n = cols;
    e.w_scale = w_scale + n0;
    e.w_colsum = colsum != nullptr ? colsum + n0 : nullptr;
    e.bias = a.bias ? static_cast<const uint8_t*>(a.bias->raw()) + n0 * element_size(e.bias_dtype) : nullptr;
    e.out = static_cast<uint8_t*>(a.out.raw()) + n0 * element_size(e.out_dtype);
    QL_RETURN_IF_ERROR(launch_int8_epilogue(e, a.stream));
  }
  return Status::ok();
}

}  // namespace qlinear::cuda
