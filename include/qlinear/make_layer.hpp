#pragma once
// Quantizes a dense weight into a scheme's checkpoint tensors: how the demo, the tests, the benchmarks and
// `qlinear quantize` make layers (checkpoints from elsewhere are loaded by src/checkpoint/ instead).
#include <string>
#include <vector>

#include "qlinear/layer.hpp"
#include "qlinear/quantize.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear {

struct MakeLayerOptions {
  // Static activation scales are calibrated from the activations' range: symmetric keys use
  // max(|input_min|, |input_max|); asymmetric INT8 uses [input_min, input_max]; NVFP4's input global scale
  // is 448*6/amax. Inputs beyond the range saturate. The default suits the synthetic N(0,1) inputs of the
  // tests and benchmarks only: a layer made from a real model's weights is given its activations' observed
  // range (`qlinear quantize --input-range`, the Python package's calibration), or refused.
  float input_min = -4.0f;
  float input_max = 4.0f;
  // NVFP4 only: store no input_global_scale and give the layer the activation key kNvfp4DynamicGlobal, whose
  // global scale each call computes from its own activation (input_min/input_max are then unused). For a
  // layer made from a float model whose activations' range is unknown.
  bool dynamic_input_global_scale = false;
  MxScaleRule mx_rule = MxScaleRule::kCeilOverMax;
  std::vector<int64_t> logical_widths;  // fused shards (per-tensor scales become one per shard)
  DType input_dtype = DType::kBF16;
  DType out_dtype = DType::kBF16;
};

// weight: F32 (or BF16/F16/F64) [N, K]. The layer is ready for process_weights_after_loading.
Result<LinearLayer> quantize_layer(std::string name, const Scheme& scheme, const Tensor& weight,
                                   const MakeLayerOptions& options = {});

}  // namespace qlinear
