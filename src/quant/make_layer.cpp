#include "qlinear/make_layer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "qlinear/kernel.hpp"

namespace qlinear {

namespace {

// quantize_fast: the reference quantizer's codes, vectorized and threaded.
// Quantizes each fused shard separately when the weight key has one scale per tensor or blocks of several
// rows: that is how a checkpoint of unfused q/k/v projections looks once fused (one scalar per shard; each
// shard's own 128x128 grid, ScaleRowGrid).
Result<std::vector<QuantizedTensor>> quantize_shards(const Tensor& weight, const QuantKey& key,
                                                     const std::vector<int64_t>& widths, MxScaleRule rule) {
  QuantizeOptions opt;
  opt.mx_rule = rule;
  std::vector<QuantizedTensor> parts;
  const bool per_shard =
      (key.scale.group.is_per_tensor() || key.scale2.has_value() || key.scale.group.row > 1) && widths.size() > 1;
  if (!per_shard) {
    QL_ASSIGN_OR_RETURN(QuantizedTensor q, quantize_fast(weight, key, opt));
    parts.push_back(std::move(q));
    return parts;
  }
  int64_t row = 0;
  for (int64_t w : widths) {
    QL_ASSIGN_OR_RETURN(Tensor rows, weight.narrow(0, row, w));
    QL_ASSIGN_OR_RETURN(QuantizedTensor q, quantize_fast(rows.contiguous(), key, opt));
    parts.push_back(std::move(q));
    row += w;
  }
  return parts;
}

}  // namespace

Result<LinearLayer> quantize_layer(std::string name, const Scheme& scheme, const Tensor& weight,
                                   const MakeLayerOptions& options) {
  if (weight.rank() != 2) return Status::error("quantize_layer " + name + ": weight must be 2-D, got " + weight.describe());
  LinearLayer layer;
  layer.name = std::move(name);
  layer.config = make_config(scheme, weight.size(0), weight.size(1), options.input_dtype, options.out_dtype);
  if (options.dynamic_input_global_scale) {
    if (!scheme.activation_key || !scheme.activation_key->scale2) {
      return Status::error("quantize_layer " + layer.name + " as " + std::string(scheme.name) +
                           ": dynamic_input_global_scale applies to NVFP4 activations only");
    }
    layer.config.activation_key = kNvfp4DynamicGlobal;
  }
  layer.config.logical_widths = options.logical_widths;
  if (Verdict v = check_config(layer.config); !v) {
    return Status::error("quantize_layer " + layer.name + " as " + std::string(scheme.name) + ": " + v.reason);
  }
  const std::vector<int64_t> widths = options.logical_widths.empty() ? std::vector<int64_t>{layer.config.n}
                                                                      : options.logical_widths;
  QL_ASSIGN_OR_RETURN(auto parts, quantize_shards(weight, scheme.weight_key, widths, options.mx_rule));
  std::vector<Tensor> data, scales, globals;
  for (QuantizedTensor& p : parts) {
    data.push_back(p.data);
    scales.push_back(p.scale);
    if (p.scale2.defined()) globals.push_back(p.scale2);
  }
  layer.params["weight"] = concat_rows(data);
  if (parts.size() == 1) {
    layer.params["weight_scale"] = scales[0];
    if (!globals.empty()) layer.params["weight_global_scale"] = globals[0];
  } else {
    // One scalar per shard (the key is per-tensor) or per-row scales to stack.
    if (scheme.weight_key.scale.group.is_per_tensor()) {
      std::vector<float> v;
      for (const Tensor& s : scales) v.push_back(s.data<float>()[0]);
      layer.params["weight_scale"] = f32_vector(v);
    } else {
      layer.params["weight_scale"] = concat_rows(scales);
    }
    if (!globals.empty()) {
      std::vector<float> v;
      for (const Tensor& g : globals) v.push_back(g.data<float>()[0]);
      layer.params["weight_global_scale"] = f32_vector(v);
    }
  }
  if (const auto& act = scheme.activation_key) {
    const float amax = std::max(std::fabs(options.input_min), std::fabs(options.input_max));
    if (act->scale.is_static) {
      if (act->dtype == DType::kI8 && !act->symmetric) {
        // Asymmetric INT8: map [min, max] onto [-128, 127].
        const float lo = std::min(options.input_min, 0.0f), hi = std::max(options.input_max, 0.0f);
        const float s = (hi - lo) / 255.0f;
        layer.params["input_scale"] = f32_vector({s});
        Tensor zp = Tensor::empty(DType::kI32, {1});
        zp.data<int32_t>()[0] = static_cast<int32_t>(std::nearbyint(-128.0f - lo / s));
        layer.params["input_zero_point"] = zp;
      } else {
        const float qmax = act->dtype == DType::kI8 ? 127.0f : static_cast<float>(traits(act->dtype).max_finite);
        layer.params["input_scale"] = f32_vector({amax / qmax});
      }
    }
    if (act->scale2 && !options.dynamic_input_global_scale) {
      layer.params["input_global_scale"] = f32_vector({448.0f * 6.0f / amax});
    }
  }
  return layer;
}

}  // namespace qlinear
