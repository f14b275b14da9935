// What the CUDA kernel objects do (cuda_kernels.hpp): the checks (is_supported, can_implement,
// input_quant_key), the routes by M as data (m_routes) and the route each apply takes, process / import /
// export through the layer-state pipeline (layer_state.hpp), and apply, which hands over to a route.
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/fp8_mma_gemm.hpp"
#include "backends/cuda/routes.hpp"

namespace qlinear::cuda {

namespace {

// What cuBLASLt's FP8 GEMMs need of N: outputs in multiples of 16, and for fused shards that keep their own
// 128x128 grids (one cuBLASLt call per shard, route_cublaslt_fp8.cpp) every shard's width too.
Verdict lt_fp8_verdict(const LinearConfig& c) {
  if (c.n % 16 != 0) {
    return Verdict::no("N=" + std::to_string(c.n) + " is not a multiple of 16 (cuBLASLt FP8 output alignment)");
  }
  if (c.weight_key.scale.group.row > 1) {
    const ScaleRowGrid grid = scale_row_grid(c);
    if (const int64_t r = grid.boundary_off(16); r >= 0 && !grid.uniform) {
      return Verdict::no("fused shard boundary at output row " + std::to_string(r) +
                         " is not a multiple of 16 (each shard keeps its own 128x128 grid and is one cuBLASLt "
                         "call; its output columns need 16-column alignment)");
    }
  }
  return Verdict::yes();
}

}  // namespace

Verdict CudaLinearKernel::is_supported(const Platform& platform) const {
  if (platform.kind != PlatformKind::kCuda || !platform.cuda) return Verdict::no("not a CUDA platform");
  if (platform.cuda->compute_capability != 90) {
    return Verdict::no("compute capability " + std::to_string(platform.cuda->compute_capability) +
                       ": built for sm_90a (Hopper) only");
  }
  return Verdict::yes();
}

Verdict CudaLinearKernel::can_implement(const LinearConfig& c) const {
  if (c.family != family_) return Verdict::no("layer family is " + std::string(family_name(c.family)));
  if (c.activation_key && c.activation_key->scale.dtype == DType::kE8M0 && c.activation_key->dtype != DType::kF8E4M3) {
    return Verdict::no("MX activations quantized to " + std::string(qlinear::name(c.activation_key->dtype)) +
                       " are not implemented on the GPU (MXFP8 or unquantized activations are)");
  }
  if (c.activation_key && c.weight_key.scale.dtype == DType::kE8M0 && c.activation_key->scale.dtype != DType::kE8M0) {
    return Verdict::no("input " + key_name(*c.activation_key) + " on MX weights is not implemented on the GPU " +
                       "(MXFP8 or unquantized activations are)");
  }
  if (family_ == Family::kInt8ScaledMM && route_ != Route::kWgmma) {
    if (c.n % 4 != 0) return Verdict::no("N=" + std::to_string(c.n) + " is not a multiple of 4 (cuBLASLt INT8 output)");
    return Verdict::yes();
  }
  if (route_ == Route::kMma) {
    if (family_ != Family::kFp8ScaledMM) return Verdict::no("the FP8 mma route runs FP8 per-tensor / per-channel only");
    return Verdict::yes();
  }
  if (route_ == Route::kWgmma) {
    if (family_ != Family::kFp8ScaledMM && family_ != Family::kInt8ScaledMM) {
      return Verdict::no("the wgmma route runs FP8 per-tensor / per-channel and INT8 only");
    }
    return Verdict::yes();
  }
  if (route_ == Route::kDequantBf16) return bf16_route_verdict(c);
  if (route_ == Route::kCublasLt) return lt_fp8_verdict(c);
  return Verdict::yes();
}

std::optional<QuantKey> CudaLinearKernel::input_quant_key(const LinearConfig& c) const {
  if (!c.activation_key) return std::nullopt;
  if (family_ == Family::kInt8ScaledMM) return c.activation_key;
  if (family_ == Family::kFp8ScaledMM && (route_ == Route::kWgmma || route_ == Route::kMma)) return c.activation_key;
  if (family_ == Family::kFp8ScaledMM && route_ != Route::kStream && c.n % 16 == 0) return c.activation_key;
  return std::nullopt;
}

int64_t CudaLinearKernel::takes_wgmma_from(const LinearConfig& c) const {
  if (wgmma_min_m_ <= 0) return 0;
  if (family_ == Family::kInt8ScaledMM) return route_ == Route::kCublasLt ? wgmma_min_m_ : 0;
  // Only where cuBLASLt would run (the stream route keeps odd N: input_quant_key follows the routes).
  if (route_ != Route::kAuto || family_ != Family::kFp8ScaledMM || !lt_fp8_verdict(c)) return 0;
  return wgmma_min_m_;
}

int64_t CudaLinearKernel::takes_mma_to(const LinearConfig& c) const {
  // Only where cuBLASLt would run (the stream route keeps odd N: input_quant_key follows the routes), and only
  // for per-token activations: against cuBLASLt's OUTER_VEC GEMMs (the per-token x per-channel scales) the
  // FP8 mma route measured 1.1-1.6x faster at M <= 16 on the 8B and 70B shapes (quantization included both
  // ways); cuBLASLt's per-tensor SCALAR GEMMs are faster there than it (8B qkv M = 1: 18.2 us against 19.8).
  if (mma_max_m_ <= 0 || route_ != Route::kAuto || family_ != Family::kFp8ScaledMM || !lt_fp8_verdict(c)) return 0;
  if (!c.activation_key || !c.activation_key->scale.group.is_per_token()) return 0;
  return mma_max_m_;
}

std::vector<MRoute> CudaLinearKernel::m_routes(const LinearConfig& c) const {
  if (const int64_t from = takes_wgmma_from(c); from > 0 && family_ == Family::kInt8ScaledMM) {
    std::vector<MRoute> routes;
    if (from > 1) {
      routes.push_back({1, from - 1, std::string(name()), "cuBLASLt INT8 GEMM (exact INT32) + the FP64 epilogue pass"});
    }
    routes.push_back({from, MRoute::kNoLimit, std::string(route_kernel(family_, Route::kWgmma)->name()),
                      "the own persistent wgmma INT8 GEMM with the FP64 epilogue fused (faster there on the H200)"});
    return routes;
  }
  if (route_ != Route::kAuto) return LinearKernel::m_routes(c);
  const std::string stream(route_kernel(family_, Route::kStream)->name());
  std::string large, large_why, declined;
  if (is_w8a8_fp8(family_)) {
    if (const Verdict v = lt_fp8_verdict(c); v) {
      large = route_kernel(family_, Route::kCublasLt)->name();
      large_why = "GPU activation quantization + cuBLASLt FP8 GEMM, scales and bias in its epilogue";
      if (c.weight_key.scale.group.row > 1 && !scale_row_grid(c).uniform) {
        large_why = "GPU activation quantization + one cuBLASLt FP8 GEMM per fused shard (each keeps its own "
                    "128x128 grid; the block mode takes one grid per call), bias in one epilogue";
      }
    } else {
      declined = v.reason;
    }
  } else if (const Verdict v = bf16_route_verdict(c); v) {
    large = route_kernel(family_, Route::kDequantBf16)->name();
    large_why = "weights widened exactly to BF16 + cuBLASLt BF16 GEMM";
    if (family_ != Family::kFp8WeightOnly) {
      large_why += "; a layer whose E8M0 scales leave BF16's exact range (checked at process) stays on " + stream;
    }
  } else {
    declined = "the BF16 GEMM route declines: " + v.reason;
  }
  if (large.empty()) return {MRoute{1, MRoute::kNoLimit, stream, "every M: " + declined}};
  // In route_for's order: the FP8 mma GEMM, the streaming kernel, then cuBLASLt / the BF16 route, then wgmma.
  std::vector<MRoute> routes;
  int64_t lo = 1;
  if (const int64_t to = takes_mma_to(c); to > 0) {
    // One bucket per token tile of the GEMM's table (8 tokens, then 16), with the tile and the K split it
    // takes on this layer (an H200's 132 SMs).
    for (const int64_t hi : {std::min<int64_t>(8, to), to}) {
      if (hi < lo) continue;
      Fp8MmaArgs g;
      g.m = hi;
      g.n = c.n;
      g.k = round_up(c.k, 32);
      routes.push_back({lo, hi, std::string(route_kernel(family_, Route::kMma)->name()),
                        "GPU activation quantization + " + fp8_mma_description(g) +
                            "; cuBLASLt's OUTER_VEC GEMMs read the weights far below memory speed at small M"});
      lo = hi + 1;
    }
  }
  if (stream_max_m_ >= lo) {
    routes.push_back({lo, stream_max_m_, stream, "weight-streaming CUDA-core kernel: memory-bound at small M, faster "
                                                 "there on the H200"});
    lo = stream_max_m_ + 1;
  }
  if (takes_wgmma_from(c) > 0) {
    const int64_t from = std::max(takes_wgmma_from(c), lo);
    if (from > lo) routes.push_back({lo, from - 1, large, large_why});
    routes.push_back({from, MRoute::kNoLimit, std::string(route_kernel(family_, Route::kWgmma)->name()),
                      "GPU activation quantization + the own persistent wgmma FP8 GEMM (faster than cuBLASLt "
                      "there on the H200), scales and bias in its epilogue"});
    return routes;
  }
  routes.push_back({lo, MRoute::kNoLimit, large, large_why});
  return routes;
}

Route CudaLinearKernel::route_for(const LinearConfig& c, const LayerState& st, int64_t m, bool prequantized) const {
  if (route_ != Route::kAuto) return route_;
  if (m <= takes_mma_to(c)) return Route::kMma;
  const int64_t wgmma_from = takes_wgmma_from(c);
  if (wgmma_from > 0 && m >= wgmma_from && m > stream_max_m_) return Route::kWgmma;
  if (prequantized) return Route::kCublasLt;  // input_quant_key is declared on the cuBLASLt route only
  if (m > stream_max_m_) {
    if (is_w8a8_fp8(family_) && lt_fp8_verdict(c)) return Route::kCublasLt;
    if (st.bf16_route) return Route::kDequantBf16;
  }
  return Route::kStream;
}

std::string_view CudaLinearKernel::apply_route(const LinearLayer& layer, const Activation& x) const {
  if (family_ == Family::kInt8ScaledMM) {
    const int64_t from = takes_wgmma_from(layer.config);
    return from > 0 && x.rows() >= from ? route_kernel(family_, Route::kWgmma)->name() : name();
  }
  if (route_ != Route::kAuto || !layer.kernel_state) return name();
  const auto& st = *static_cast<const LayerState*>(layer.kernel_state.get());
  return route_kernel(family_, route_for(layer.config, st, x.rows(), x.is_quantized()))->name();
}

namespace {
Status bf16_inexact(const LinearLayer& layer) {
  return Status::error("layer " + layer.name + ": its E8M0 scales leave BF16's exact range (dequant_bf16.hpp); "
                       "the streaming kernels take it");
}
}  // namespace

Status CudaLinearKernel::accept_staged(const LinearLayer& layer, const LayerState& st) const {
  if (route_ == Route::kDequantBf16 && !st.bf16_exact) return bf16_inexact(layer);
  return Status::ok();
}

Status CudaLinearKernel::process_impl(LinearLayer& layer) const {
  QL_ASSIGN_OR_RETURN(auto st, build_layer_state(layer.config, [&](LayerState& s) -> Status {
                        QL_RETURN_IF_ERROR(stage_from_checkpoint(layer, s));
                        return accept_staged(layer, s);
                      }));
  layer.kernel_state = std::move(st);
  return Status::ok();
}

Status CudaLinearKernel::import_impl(LinearLayer& layer, const ProcessedWeights& w) const {
  QL_ASSIGN_OR_RETURN(auto st, build_layer_state(layer.config, [&](LayerState& s) -> Status {
                        QL_RETURN_IF_ERROR(stage_from_processed(w, s));
                        return accept_staged(layer, s);
                      }));
  layer.kernel_state = std::move(st);
  return Status::ok();
}

Result<ProcessedWeights> CudaLinearKernel::export_impl(const LinearLayer& layer) const {
  return export_state(*static_cast<const LayerState*>(layer.kernel_state.get()));
}

Status CudaLinearKernel::apply_impl(const LinearLayer& layer, const Activation& x, const Tensor* bias,
                                    Tensor& out) const {
  if (!layer.kernel_state) return Status::error("layer " + layer.name + " has no device state");
  const auto& st = *static_cast<const LayerState*>(layer.kernel_state.get());
  const QuantizedTensor* pre = x.is_quantized() ? &x.quantized_tensor() : nullptr;
  const Tensor& xt = pre ? pre->data : x.dense_tensor();
  if (pre) QL_RETURN_IF_ERROR(expect_quantized_on(*pre, st.device));
  QL_RETURN_IF_ERROR(expect_on_device(xt, st.device, "activation"));
  QL_RETURN_IF_ERROR(expect_on_device(out, st.device, "output"));
  if (bias != nullptr) QL_RETURN_IF_ERROR(expect_on_device(*bias, st.device, "bias"));
  if (xt.strides()[0] < layer.config.k) return Status::error("activation rows overlap (row stride < K)");
  DeviceGuard guard;
  QL_RETURN_IF_ERROR(guard.set(st.device));
  const ApplyCtx ctx{layer.config, st, xt, bias, out, xt.size(0), current_stream(), pre};
  if (family_ == Family::kInt8ScaledMM) {
    const int64_t from = takes_wgmma_from(layer.config);
    return apply_int8(ctx, route_ == Route::kWgmma || (from > 0 && ctx.m >= from));
  }
  switch (route_for(layer.config, st, ctx.m, pre != nullptr)) {
    case Route::kCublasLt: return apply_cublaslt(ctx);
    case Route::kWgmma: return apply_wgmma_fp8(ctx);
    case Route::kMma: return apply_mma_fp8(ctx);
    case Route::kDequantBf16:
      if (!st.bf16_exact) return bf16_inexact(layer);  // refused at process already; kAuto never picks it so
      return apply_dequant_bf16(ctx);
    case Route::kStream:
    case Route::kAuto: break;
  }
  return apply_stream(ctx);
}

}  // namespace qlinear::cuda
