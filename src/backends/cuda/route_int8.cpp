// INT8 W8A8: activations quantized on the GPU (static/dynamic, symmetric/asymmetric) or taken
// pre-quantized, then either cuBLASLt's INT8 GEMM (exact INT32) and the FP64 epilogue (zero points x column
// sums, scales, bias, one rounding), or the own wgmma INT8 GEMM with that epilogue fused (the same output
// bit for bit, no INT32 matrix in memory).
#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/int8_scaled_mm.hpp"
#include "backends/cuda/routes.hpp"
#include "backends/cuda/wgmma_int8_gemm.hpp"

namespace qlinear::cuda {

Status apply_int8(const ApplyCtx& a, bool wgmma) {
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
  if (wgmma) {
    WgmmaInt8Args g;
    g.x = code_ptr;
    g.ld_x = kl;
    g.w = a.st.w.raw();
    g.ld_w = a.st.row_bytes;
    g.m = a.m;
    g.n = c.n;
    g.k = kl;
    g.x_scale = scale_ptr;
    g.x_scale_per_row = per_row;
    g.x_scale_value = a.st.static_input_scale;
    g.x_zero_point = zp_ptr;
    g.x_zero_point_per_row = per_row;
    g.x_zero_point_value = a.st.static_zero_point;
    g.w_scale = static_cast<const float*>(a.st.w_scale.raw());
    g.w_colsum = key.symmetric ? nullptr : static_cast<const int64_t*>(a.st.w_colsum.raw());
    g.bias = a.bias ? a.bias->raw() : nullptr;
    g.bias_dtype = a.bias ? a.bias->dtype() : DType::kF32;
    g.out = a.out.raw();
    g.out_dtype = a.out.dtype();
    return launch_wgmma_int8_gemm(g, a.stream);
  }
  QL_ASSIGN_OR_RETURN(Scratch acc, Scratch::make(sizeof(int32_t) * a.m * c.n, a.stream));

  LtGemm g;
  g.ab_dtype = DType::kI8;
  g.w = a.st.w.raw();
  g.ld_w = a.st.row_bytes;
  g.x = code_ptr;
  g.ld_x = kl;
  g.m = a.m;
  g.n = c.n;
  g.k = kl;
  g.out = acc.get();
  g.out_dtype = DType::kI32;
  QL_RETURN_IF_ERROR(lt_gemm(g, a.stream));

  Int8EpilogueArgs e;
  e.acc = acc.as<int32_t>();
  e.m = a.m;
  e.n = c.n;
  // Scales and zero points: per row (dynamic, or pre-quantized [M, 1]), or one value (static: the layer's,
  // or a pre-quantized activation's [1] on the device).
  e.x_scale = scale_ptr;
  e.x_scale_per_row = per_row;
  e.x_scale_value = a.st.static_input_scale;
  e.x_zero_point = zp_ptr;
  e.x_zero_point_per_row = per_row;
  e.x_zero_point_value = a.st.static_zero_point;
  e.w_scale = static_cast<const float*>(a.st.w_scale.raw());
  e.w_colsum = key.symmetric ? nullptr : static_cast<const int64_t*>(a.st.w_colsum.raw());
  e.bias = a.bias ? a.bias->raw() : nullptr;
  e.bias_dtype = a.bias ? a.bias->dtype() : DType::kF32;
  e.out = a.out.raw();
  e.out_dtype = a.out.dtype();
  return launch_int8_epilogue(e, a.stream);
}

}  // namespace qlinear::cuda
