#pragma once
// A CUDA layer's processed state and the one pipeline that builds it: plan (the device layout the config
// implies) -> stage (host tensors in that layout: from the checkpoint at process, from a weight-cache entry
// at import) -> upload (the staged tensors copied to the current device). Its processed form (export,
// import, the meta check) is derived from one declaration, cuda_state_schema() in layer_state.cpp.
#include <cstdint>
#include <functional>
#include <memory>

#include "backends/cuda/weight_stream.hpp"
#include "qlinear/kernel.hpp"

namespace qlinear::cuda {

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The device layout a layer's config implies: planned once for process and import alike.
struct LayoutPlan {
  int64_t n = 0;          // weight rows
  WeightFormat format = WeightFormat::kE4M3;
  WeightScale scale_kind = WeightScale::kRow;
  int64_t row_bytes = 0;  // bytes of one weight row on the device
  int64_t k_valid = 0;    // K as the GEMMs see it
  int64_t ws_ld = 0;      // scale row length (kMx32: K / 32; kBlock128: K blocks padded to 4)
  bool colsum = false;    // INT8 with asymmetric activations: w_colsum is kept
  // kBlock128: the scale rows of every fused shard's own block grid (qlinear/layer.hpp). A grid that is not
  // uniform (a shard before the last ends in a partial block) gives the streaming kernel a scale row per
  // output row (ws_row) and the cuBLASLt route one call per shard.
  ScaleRowGrid grid;
  Shape w_shape() const { return {n, row_bytes}; }
  Shape scale_shape() const {
    if (scale_kind == WeightScale::kMx32) return {n, ws_ld};
    if (scale_kind == WeightScale::kBlock128) return {grid.rows, ws_ld};
    return {n};
  }
  DType scale_dtype() const { return scale_kind == WeightScale::kMx32 ? DType::kU8 : DType::kF32; }
};

LayoutPlan plan_layout(const LinearConfig& c);

// What process_weights_after_loading leaves in layer.kernel_state: the layout, then the buffers in it (host
// tensors while staged, device tensors once uploaded).
struct LayerState : LayoutPlan {
  int device = 0;
  int sm_count = 132;
  Tensor w;                          // u8 w_shape()
  Tensor w_scale;                    // scale_dtype() scale_shape()
  bool scalar_weight_scale = false;  // one scale for the whole weight: cuBLASLt SCALAR_32F
  Tensor w_scale_scalar;             // f32 [1] (row scales only)
  float static_input_scale = 1.0f;   // static per-tensor activations: the max over shards (as vLLM)
  int32_t static_zero_point = 0;     // INT8 static asymmetric activations
  bool bf16_exact = false;           // kDequantBf16 reproduces every weight value exactly (dequant_bf16.hpp)
  bool bf16_route = false;           // ... and the config suits it: kAuto may switch to it above stream_max_m
  Tensor w_colsum;                   // i64 [N], sum over K of the codes (plan.colsum)
  Tensor ws_row;                     // i32 [N]: kBlock128 with a grid that is not uniform, each row's scale row
                                     // (derived from the config at upload, not part of the processed form)
};

bool is_w8a8_fp8(Family f);
// What the kDequantBf16 route needs of a layer's config (the data check, bf16_exact, comes at staging).
Verdict bf16_route_verdict(const LinearConfig& c);

// Stage: the checkpoint tensors of `layer` (host) rewritten into the planned layout, as host tensors.
Status stage_from_checkpoint(const LinearLayer& layer, LayerState& st);
// Stage: a weight-cache entry's tensors, checked against the plan (cuda_state_schema()).
Status stage_from_processed(const ProcessedWeights& w, LayerState& st);
// The inverse of staging + upload: the state's processed form as host tensors.
Result<ProcessedWeights> export_state(const LayerState& st);
// Plan, stage (by `stage`, which may also refuse the staged data), derive bf16_route, upload to the current
// device and synchronize: the state process and import leave in layer.kernel_state.
Result<std::shared_ptr<LayerState>> build_layer_state(const LinearConfig& c,
                                                      const std::function<Status(LayerState&)>& stage);

}  // namespace qlinear::cuda
