#pragma once
// The layer model: a linear layer y = x W^T + b whose weight W [N, K] (out, in) is quantized in one of the
// kernel families. A layer holds its checkpoint tensors by their vLLM / compressed-tensors names, its
// partition info (fused shards, tensor-parallel slice) and its config; a kernel's
// process_weights_after_loading turns it into whatever that kernel streams best, once.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qlinear/quant_key.hpp"
#include "qlinear/tensor.hpp"

namespace qlinear {

enum class Family : uint8_t {
  kFp8ScaledMM,     // FP8 W8A8, per-tensor / per-channel weights, static per-tensor or dynamic per-token input
  kInt8ScaledMM,    // INT8 W8A8, symmetric or asymmetric input
  kFp8BlockScaled,  // FP8 128x128 weight blocks, dynamic 1x128 input groups
  kFp8WeightOnly,   // FP8 weights, BF16/F16/F32 activations (W8A16)
  kMxfp8,           // E4M3 + E8M0 per 1x32, W8A16 or W8A8 (MXFP8 activations)
  kMxfp6,           // FP6 E2M3/E3M2 + E8M0 per 1x32
  kMxfp4,           // FP4 E2M1 + E8M0 per 1x32
  kNvfp4,           // FP4 E2M1 + E4M3 per 1x16 + f32 global scale
};
inline constexpr int kNumFamilies = 8;
std::string_view family_name(Family f);  // "fp8_scaled_mm", ...
std::optional<Family> family_from_name(std::string_view text);

// What a kernel needs to know to decide whether it can implement a layer.
struct LinearConfig {
  Family family = Family::kFp8ScaledMM;
  QuantKey weight_key;
  std::optional<QuantKey> activation_key;  // none: activations stay in input_dtype (weight-only, "A16")
  int64_t n = 0;                           // output features of this partition
  int64_t k = 0;                           // input features of this partition
  DType input_dtype = DType::kBF16;        // dtype of unquantized activations (F32, BF16, F16)
  DType out_dtype = DType::kBF16;          // F32, BF16, F16
  std::vector<int64_t> logical_widths;     // fused shards' output widths (sum = n); empty = one shard
  std::optional<int64_t> bmm_batch_size;   // batched layers (vLLM's MXFP8 BMM); unsupported unless a kernel says

  int64_t num_shards() const { return logical_widths.empty() ? 1 : static_cast<int64_t>(logical_widths.size()); }
  std::string to_string() const;  // "mxfp8 N=4096 K=4096 w=... a=... out=bf16"
};

// The rows of a weight_scale whose blocks span several output rows (FP8 128x128). Every fused shard keeps
// its own block grid, as its checkpoint tensor has it: weight_scale holds the shards' scale rows one after
// the other, and output row n of shard s finds its scale row at
//   scale_row_begin[s] + (n - row_begin[s]) / block
// A shard whose row count is not a multiple of the block ends in a partial block; when only the last shard
// does, this is the plain grid n / block (`uniform`). Keys without row blocks: block = 1, one row per row.
//
//   shards 576 | 192 | 192 (SmolLM2-135M q/k/v), block 128:
//   output rows  0 ........ 575 | 576 .. 767 | 768 .. 959
//   scale rows   0 1 2 3 4(64)  | 5  6(64)   | 7  8(64)       (9 rows; the plain grid would have 8)
struct ScaleRowGrid {
  int64_t block = 1;                     // output rows per scale row
  int64_t n = 0;                         // output rows in all
  std::vector<int64_t> row_begin;        // per shard: its first output row
  std::vector<int64_t> scale_row_begin;  // per shard: its first scale row
  int64_t rows = 0;                      // scale rows in all
  bool uniform = true;                   // scale row = n / block for every output row n

  int64_t shard_of(int64_t n) const;     // the shard holding output row n
  int64_t scale_row(int64_t n) const;
  // The first shard boundary (output row) that is not a multiple of `multiple`, or -1: a kernel that reads one
  // scale row per tile of `multiple` rows needs none (boundaries inside a shard's grid are multiples of block).
  int64_t boundary_off(int64_t multiple) const;
  std::string to_string() const;         // "per-shard 128-row grids: 576->5, 192->2, 192->2 scale rows"
};
ScaleRowGrid scale_row_grid(const LinearConfig& c);

// A layer's tensors by name. Names follow vLLM: weight, weight_scale, input_scale, input_zero_point,
// azp_adj, weight_global_scale, input_global_scale, bias.
class LinearLayer {
 public:
  std::string name;  // "model.layers.0.self_attn.qkv_proj"
  LinearConfig config;
  std::map<std::string, Tensor> params;

  // Tensor-parallel position of this partition (informational; sharding happens at load).
  int tp_rank = 0;
  int tp_size = 1;

  // Set by process_weights_after_loading: which kernel owns the layout, and its private state
  // (prepacked weights, padded copies, ...). Apply refuses a layer processed by another kernel.
  std::string processed_by;
  std::shared_ptr<void> kernel_state;

  bool has(const std::string& param) const { return params.count(param) && params.at(param).defined(); }
  // The named tensor, or an error naming the layer and the missing tensor.
  Result<Tensor> get(const std::string& param) const;
  int64_t input_size_per_partition() const { return config.k; }
  int64_t output_size_per_partition() const { return config.n; }
};

// An activation as a kernel receives it: dense [M, K] F32/BF16/F16, or already quantized (data + scales +
// the key it was made with). A kernel takes a quantized activation only when the key equals the
// input_quant_key it declares for the layer.
class Activation {
 public:
  static Activation dense(Tensor x);
  static Activation quantized(QuantizedTensor q, DType orig_dtype);

  bool is_quantized() const { return quantized_.has_value(); }
  const Tensor& dense_tensor() const { return dense_; }
  const QuantizedTensor& quantized_tensor() const { return *quantized_; }
  int64_t rows() const;
  int64_t cols() const;
  DType orig_dtype() const { return orig_dtype_; }

 private:
  Tensor dense_;
  std::optional<QuantizedTensor> quantized_;
  DType orig_dtype_ = DType::kF32;
};

}  // namespace qlinear
