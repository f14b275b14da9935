// The producer side of pre-quantized activations (activation_quant.hpp).
#include "qlinear/activation_quant.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "qlinear/quantize.hpp"
#include "quant/quant_internal.hpp"

namespace qlinear {

namespace {

std::string where(const LinearKernel& kernel, const LinearLayer& layer) {
  return "quantize activation for kernel " + std::string(kernel.name()) + ", layer " +
         (layer.name.empty() ? std::string("<unnamed>") : layer.name);
}

// The largest value of a static scale tensor (fused shards share the largest, as vLLM and every kernel do).
Result<float> max_scale(const LinearLayer& layer, const std::string& param) {
  QL_ASSIGN_OR_RETURN(Tensor t, layer.get(param));
  const Tensor c = t.contiguous();
  if (c.dtype() != DType::kF32 || c.numel() < 1) {
    return Status::error("'" + param + "' must be a non-empty f32 tensor, got " + c.describe());
  }
  return *std::max_element(c.data<float>(), c.data<float>() + c.numel());
}

}  // namespace

Result<QuantKey> activation_key_for(const LinearKernel& kernel, const LinearLayer& layer) {
  const std::optional<QuantKey> key = kernel.input_quant_key(layer.config);
  if (!key) {
    return Status::error(where(kernel, layer) + ": the kernel takes no pre-quantized activations (" +
                         (layer.config.activation_key ? "it quantizes dense input itself"
                                                      : std::string("the layer is weight-only")) +
                         "); pass Activation::dense");
  }
  return *key;
}

Result<Activation> quantize_activation_for(const LinearKernel& kernel, const LinearLayer& layer, const Tensor& x) {
  QL_ASSIGN_OR_RETURN(QuantKey key, activation_key_for(kernel, layer));
  const std::string at = where(kernel, layer);
  if (!x.defined() || x.rank() != 2 || x.size(1) != layer.config.k) {
    return Status::error(at + ": the activation must be [M, " + std::to_string(layer.config.k) + "], got " +
                         (x.defined() ? x.describe() : std::string("an undefined tensor")));
  }
  if (x.dtype() != DType::kF32 && x.dtype() != DType::kBF16 && x.dtype() != DType::kF16) {
    return Status::error(at + ": the activation dtype must be f32, bf16 or f16, got " + x.describe());
  }
  if (x.device().kind != DeviceKind::kCpu) {
    return Status::error(at + ": the activation is on " + x.device().to_string() + "; this producer quantizes host tensors");
  }
  QuantizeOptions options;
  if (key.scale.is_static) {
    auto s = max_scale(layer, "input_scale");
    if (!s) return s.status().with_context(at);
    options.static_scale = Tensor::scalar_f32(*s).reshape({1}).value();
    if (!key.symmetric) {
      auto zp = layer.get("input_zero_point");
      if (!zp) return zp.status().with_context(at);
      options.static_zero_point = *zp;
    }
  }
  if (key.scale2 && key.scale2->is_static) {
    auto g = max_scale(layer, "input_global_scale");
    if (!g) return g.status().with_context(at);
    options.nvfp4_global_scale = *g;
  }
  auto q = quantize(x.contiguous(), key, options);
  if (!q) return q.status().with_context(at);
  return Activation::quantized(std::move(*q), x.dtype());
}

Result<QuantizedTensor> quantize_activation_with_row_amax(const LinearKernel& kernel, const LinearLayer& layer,
                                                          const Tensor& x, const Tensor& row_amax) {
  QL_ASSIGN_OR_RETURN(QuantKey key, activation_key_for(kernel, layer));
  const std::string at = where(kernel, layer) + " with given row maxima";
  const bool per_token = !key.scale.is_static && key.scale.group.is_per_token() && key.symmetric &&
                         (key.dtype == DType::kF8E4M3 || key.dtype == DType::kI8);
  if (!per_token) {
    return Status::error(at + ": only dynamic per-token symmetric FP8 / INT8 activations take row maxima; the "
                         "kernel takes " + key.to_string());
  }
  if (!x.defined() || x.rank() != 2 || x.size(1) != layer.config.k) {
    return Status::error(at + ": the activation must be [M, " + std::to_string(layer.config.k) + "], got " +
                         (x.defined() ? x.describe() : std::string("an undefined tensor")));
  }
  const int64_t m = x.size(0);
  if (!row_amax.defined() || row_amax.dtype() != DType::kF32 || row_amax.numel() != m ||
      row_amax.device().kind != DeviceKind::kCpu || x.device().kind != DeviceKind::kCpu) {
    return Status::error(at + ": x and row maxima must be host tensors, the maxima f32 [" + std::to_string(m) +
                         "]; got x " + x.describe() + ", maxima " +
                         (row_amax.defined() ? row_amax.describe() : std::string("undefined")));
  }
  // The dynamic rule on the given maxima, then the same encoding as a static per-token key with those scales.
  const std::function<double(double)> rule =
      key.dtype == DType::kI8 ? quant::int8_scale_rule() : quant::fp8_scale_rule(key, QuantizeOptions{});
  const Tensor amax = row_amax.contiguous();
  Tensor scales = Tensor::empty(DType::kF32, {m, 1});
  for (int64_t r = 0; r < m; ++r) {
    const double a = static_cast<double>(amax.data<float>()[r]);
    if (!(a >= 0.0) || std::isinf(a)) {
      return Status::error(at + ": row " + std::to_string(r) + " has maximum " + std::to_string(a) +
                           "; expected a finite value >= 0");
    }
    scales.data<float>()[r] = static_cast<float>(rule(a));
  }
  QuantKey as_static = key;
  as_static.scale.is_static = true;
  QuantizeOptions options;
  options.static_scale = scales;
  auto q = quantize(x.contiguous(), as_static, options);
  if (!q) return q.status().with_context(at);
  q->key = key;
  return std::move(*q);
}

}  // namespace qlinear
