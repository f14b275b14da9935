#include "qlinear/layer.hpp"

#include <array>

namespace qlinear {

namespace {
constexpr std::array<std::string_view, kNumFamilies> kFamilyNames = {
    "fp8_scaled_mm", "int8_scaled_mm", "fp8_block_scaled", "fp8_weight_only",
    "mxfp8",         "mxfp6",          "mxfp4",            "nvfp4",
};
static_assert(static_cast<int>(Family::kNvfp4) + 1 == kNumFamilies, "kFamilyNames must list every family");
}  // namespace

std::string_view family_name(Family f) { return kFamilyNames[static_cast<size_t>(f)]; }

std::optional<Family> family_from_name(std::string_view text) {
  for (size_t i = 0; i < kFamilyNames.size(); ++i) {
    if (kFamilyNames[i] == text) return static_cast<Family>(i);
  }
  return std::nullopt;
}

std::string LinearConfig::to_string() const {
  std::string s = std::string(family_name(family)) + " N=" + std::to_string(n) + " K=" + std::to_string(k) +
                  " weight=" + key_name(weight_key) +
                  " activation=" + (activation_key ? key_name(*activation_key) : std::string(name(input_dtype))) +
                  " out=" + std::string(name(out_dtype));
  if (logical_widths.size() > 1) {
    s += " shards=[";
    for (size_t i = 0; i < logical_widths.size(); ++i) s += (i ? "," : "") + std::to_string(logical_widths[i]);
    s += "]";
  }
  return s;
}

Result<Tensor> LinearLayer::get(const std::string& param) const {
  auto it = params.find(param);
  if (it == params.end() || !it->second.defined()) {
    return Status::error("layer " + (name.empty() ? std::string("<unnamed>") : name) + " (" +
                         std::string(family_name(config.family)) + ") has no tensor '" + param + "'");
  }
  return it->second;
}

Activation Activation::dense(Tensor x) {
  Activation a;
  a.orig_dtype_ = x.dtype();
  a.dense_ = std::move(x);
  return a;
}

Activation Activation::quantized(QuantizedTensor q, DType orig_dtype) {
  Activation a;
  a.quantized_ = std::move(q);
  a.orig_dtype_ = orig_dtype;
  return a;
}

int64_t Activation::rows() const {
  if (quantized_) return quantized_->rows;
  return dense_.rank() == 2 ? dense_.size(0) : -1;
}

int64_t Activation::cols() const {
  if (quantized_) return quantized_->cols;
  return dense_.rank() == 2 ? dense_.size(1) : -1;
}

}  // namespace qlinear
