// Route kCublasLt for FP8 W8A8: activations quantized on the GPU (or taken pre-quantized), then cuBLASLt's
// FP8 GEMM with the scales (SCALAR, OUTER_VEC or 1x128 x 128x128 blocks) and bias in its epilogue.
#include "backends/cuda/cublaslt_gemm.hpp"
#include "backends/cuda/routes.hpp"
#include "backends/cuda/weight_stream.hpp"

namespace qlinear::cuda {

namespace {

// Runs g (operands and scales set) into a.out: bias in cuBLASLt's epilogue when it takes the bias dtype,
// else an F32 result plus our epilogue; rows beyond a.m (padded runs) are dropped.
Status run_lt_into_out(const ApplyCtx& a, LtGemm& g) {
  const LinearConfig& c = a.c;
  const bool lt_bias = a.bias == nullptr || a.bias->dtype() == bias_dtype_for(g.ab_dtype, a.out.dtype());
  g.bias = lt_bias && a.bias ? a.bias->raw() : nullptr;
  g.out_dtype = lt_bias ? a.out.dtype() : DType::kF32;
  if (lt_bias && g.m == a.m) {
    g.out = a.out.raw();
    return lt_gemm(g, a.stream);
  }
  Scratch result;
  if (!lt_bias && g.m == a.m && a.out.dtype() == DType::kF32) {
    g.out = a.out.raw();  // an F32 output is its own accumulator
  } else {
    QL_ASSIGN_OR_RETURN(result, Scratch::make(static_cast<size_t>(g.m * c.n * element_size(g.out_dtype)), a.stream));
    g.out = result.get();
  }
  QL_RETURN_IF_ERROR(lt_gemm(g, a.stream));
  if (lt_bias) {
    QL_CUDA_CHECK(cudaMemcpyAsync(a.out.raw(), g.out, static_cast<size_t>(a.m * c.n * element_size(g.out_dtype)),
                                  cudaMemcpyDeviceToDevice, a.stream));
    return Status::ok();
  }
  return launch_bias_epilogue(static_cast<const float*>(g.out), a.bias->raw(), a.bias->dtype(), a.out.raw(),
                              a.out.dtype(), a.m, c.n, a.stream);
}

// FP8 per-tensor / per-token activations quantized by the caller (input_quant_key).
Status apply_cublaslt_prequantized(const ApplyCtx& a) {
  const QuantizedTensor& q = *a.pre;
  Scratch pad, expanded;
  QL_ASSIGN_OR_RETURN(const void* codes, padded_codes(q, a.st.k_valid, pad, a.stream));
  LtGemm g;
  g.ab_dtype = DType::kF8E4M3;
  g.w = a.st.w.raw();
  g.ld_w = a.st.row_bytes;
  g.x = codes;
  g.ld_x = a.st.k_valid;
  g.m = a.m;
  g.n = a.c.n;
  g.k = a.st.k_valid;
  const bool x_scalar = q.scale.numel() == 1 && a.m != 1;
  if (a.st.scalar_weight_scale && x_scalar) {
    g.scale_mode = LtScaleMode::kScalar;
    g.w_scale = static_cast<const float*>(a.st.w_scale_scalar.raw());
    g.x_scale = static_cast<const float*>(q.scale.raw());
  } else {
    g.scale_mode = LtScaleMode::kOuterVec;
    g.w_scale = static_cast<const float*>(a.st.w_scale.raw());
    if (x_scalar) {  // OUTER_VEC wants one activation scale per row
      QL_ASSIGN_OR_RETURN(expanded, Scratch::make(sizeof(float) * a.m, a.stream));
      QL_RETURN_IF_ERROR(launch_broadcast_f32(static_cast<const float*>(q.scale.raw()), expanded.as<float>(), a.m,
                                              a.stream));
      g.x_scale = expanded.as<float>();
    } else {
      g.x_scale = static_cast<const float*>(q.scale.raw());
    }
  }
  return run_lt_into_out(a, g);
}

// Fused shards that keep their own 128x128 grids (ScaleRowGrid with a partial block before the last shard):
// cuBLASLt's BLK128x128 mode takes one grid per matrix, and re-tiling the scales into one grid over the fused
// rows is not exact (a 128-row block would span two shards with different scales). Each shard is its own
// GEMM on the same quantized activation instead, writing its columns of one F32 result (ld N), and one
// epilogue adds the bias and rounds. Shard widths are multiples of 16 (can_implement), so each call's output
// columns start 64-byte aligned; its weight rows and scale rows start where the shard's do.
Status run_lt_per_shard(const ApplyCtx& a, LtGemm& g) {
  const LinearConfig& c = a.c;
  const ScaleRowGrid& grid = a.st.grid;
  QL_ASSIGN_OR_RETURN(Scratch acc, Scratch::make(sizeof(float) * static_cast<size_t>(g.m * c.n), a.stream));
  const auto* w = static_cast<const uint8_t*>(a.st.w.raw());
  const float* ws = static_cast<const float*>(a.st.w_scale.raw());
  for (size_t s = 0; s < grid.row_begin.size(); ++s) {
    const int64_t row = grid.row_begin[s];
    const int64_t end = s + 1 < grid.row_begin.size() ? grid.row_begin[s + 1] : c.n;
    if (end == row) continue;
    LtGemm shard = g;
    shard.w = w + row * a.st.row_bytes;
    shard.w_scale = ws + grid.scale_row_begin[s] * a.st.ws_ld;
    shard.n = end - row;
    shard.out = acc.as<float>() + row;
    shard.out_dtype = DType::kF32;
    shard.ld_out = c.n;
    shard.bias = nullptr;
    QL_RETURN_IF_ERROR(lt_gemm(shard, a.stream));
  }
  return launch_bias_epilogue(acc.as<float>(), a.bias ? a.bias->raw() : nullptr,
                              a.bias ? a.bias->dtype() : DType::kF32, a.out.raw(), a.out.dtype(), a.m, c.n, a.stream);
}

}  // namespace

Status apply_cublaslt(const ApplyCtx& a) {
  const LinearConfig& c = a.c;
  const QuantKey& key = *c.activation_key;
  const int64_t kl = a.st.k_valid;
  const bool block = c.family == Family::kFp8BlockScaled;
  // cuBLASLt's block-scaled mode finds no algorithm unless M is a multiple of 16 (measured on the H200 with
  // CUDA 13.0: M = 2, 7, 9, 17, 257 fail; 16, 64, 4096 run): run it on M rounded up, the extra rows zero.
  const int64_t m_run = block ? round_up(a.m, 16) : a.m;
  if (a.pre != nullptr) return apply_cublaslt_prequantized(a);
  ActQuantArgs q = quant_args(a, key);
  QL_ASSIGN_OR_RETURN(Scratch codes, Scratch::make(static_cast<size_t>(m_run * kl), a.stream));
  if (m_run > a.m) {
    QL_CUDA_CHECK(cudaMemsetAsync(codes.as<uint8_t>() + a.m * kl, 0, static_cast<size_t>((m_run - a.m) * kl), a.stream));
  }
  q.codes = codes.get();
  q.ld_codes = kl;

  LtGemm g;
  g.ab_dtype = DType::kF8E4M3;
  g.w = a.st.w.raw();
  g.ld_w = a.st.row_bytes;
  g.x = codes.get();
  g.ld_x = kl;
  g.m = m_run;
  g.n = c.n;
  g.k = kl;

  int64_t count = 1;
  if (block) {
    g.scale_mode = LtScaleMode::kBlock;
    g.w_scale = static_cast<const float*>(a.st.w_scale.raw());
    count = (c.k + 127) / 128 * m_run;
    q.scale = {nullptr, 1, m_run, false};  // [kb * M + m]
  } else if (a.st.scalar_weight_scale && !key.scale.group.is_per_token()) {
    g.scale_mode = LtScaleMode::kScalar;
    g.w_scale = static_cast<const float*>(a.st.w_scale_scalar.raw());
    q.scale = {nullptr, 0, 0, false};
  } else {
    g.scale_mode = LtScaleMode::kOuterVec;
    g.w_scale = static_cast<const float*>(a.st.w_scale.raw());
    count = a.m;
    q.scale = {nullptr, 1, 0, false};  // per-tensor scales are repeated per row
  }
  QL_ASSIGN_OR_RETURN(Scratch scales, Scratch::make(sizeof(float) * count, a.stream));
  if (m_run > a.m) QL_CUDA_CHECK(cudaMemsetAsync(scales.get(), 0, sizeof(float) * count, a.stream));
  q.scale.scales = scales.get();
  g.x_scale = scales.as<float>();
  Scratch amax;
  if (q.mode == ActQuantMode::kDynamicTensor) {
    QL_ASSIGN_OR_RETURN(amax, Scratch::make(sizeof(uint32_t), a.stream));
    q.amax_scratch = amax.as<uint32_t>();
  }
  QL_RETURN_IF_ERROR(launch_act_quant(q, a.stream));

  if (block && !a.st.grid.uniform) return run_lt_per_shard(a, g);
  return run_lt_into_out(a, g);
}

}  // namespace qlinear::cuda
