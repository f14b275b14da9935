#pragma once
// The reference backend: one kernel per family, last in every priority list, runs anywhere.
//
// Numerics (the definition every fast kernel is tested against):
//   W  = dequantize(weight codes, weight scales)            exactly, in FP64
//   X  = x (unquantized A16 layers), or dequantize(quantize(x, activation key)) with the reference
//        quantizers (static scales from input_scale / input_zero_point / input_global_scale, the max over
//        fused shards as vLLM does), or the pre-quantized activation's own codes and scales
//   y  = round_to_out_dtype( sum_k X[m,k] * W[n,k]  (FP64 accumulation)  + bias[n] )   one rounding, RNE
// Per-shard scalar scales (fused layers) dequantize each shard's rows with its own scale.
#include "qlinear/kernel.hpp"

namespace qlinear::reference {

class ReferenceLinearKernel final : public LinearKernel {
 public:
  explicit constexpr ReferenceLinearKernel(Family family, std::string_view name)
      : family_(family), name_(name) {}

  std::string_view name() const override { return name_; }
  Family family() const override { return family_; }
  std::string_view summary() const override {
    return "reference: exact dequantization, FP64 accumulation, any platform (the test oracle)";
  }
  Verdict is_supported(const Platform&) const override { return Verdict::yes(); }
  Verdict can_implement(const LinearConfig& config) const override;
  std::optional<QuantKey> input_quant_key(const LinearConfig& config) const override {
    return config.activation_key;
  }
  // The reference keeps the checkpoint layout: its processed state is empty (layout version 1, no tensors),
  // so a cache entry of a reference layer records only that the layer was checked and which kernel owns it.
  bool supports_pre_processed_weights() const override { return true; }
  uint32_t processed_layout_version() const override { return 1; }

 protected:
  Status process_impl(LinearLayer& layer) const override;
  Status apply_impl(const LinearLayer& layer, const Activation& x, const Tensor* bias, Tensor& out) const override;
  Result<ProcessedWeights> export_impl(const LinearLayer&) const override { return ProcessedWeights{}; }
  Status import_impl(LinearLayer&, const ProcessedWeights& weights) const override;

 private:
  Family family_;
  std::string_view name_;
};

extern const ReferenceLinearKernel kFp8ScaledMM;
extern const ReferenceLinearKernel kInt8ScaledMM;
extern const ReferenceLinearKernel kFp8BlockScaled;
extern const ReferenceLinearKernel kFp8WeightOnly;
extern const ReferenceLinearKernel kMxfp8;
extern const ReferenceLinearKernel kMxfp6;
extern const ReferenceLinearKernel kMxfp4;
extern const ReferenceLinearKernel kNvfp4;

// The building blocks, shared with tests and the demo: the layer's weight dequantized to F64 [N, K], and
// the activation as the layer's numerics see it, F64 [M, K].
Result<Tensor> dequantized_weight(const LinearLayer& layer);
Result<Tensor> effective_activation(const LinearLayer& layer, const Activation& x);

}  // namespace qlinear::reference
