#pragma once
// `qlinear quantize` as a library call: a BF16/FP16/FP32 safetensors model in, a complete quantized model
// directory out (compressed-tensors, or Quark for MXFP6), streamed: one tensor at a time from the mapped
// input, each linear weight quantized by quantize_layer (quantize_fast: vectorized, over the thread pool in
// chunks of rows), written into shards of at most
// max_shard_bytes with model.safetensors.index.json (one shard: model.safetensors, as save_pretrained),
// every other tensor copied unchanged, config.json (with quantization_config), tokenizer and generation
// files carried over. Memory beyond the mapped input: about two copies of the largest layer's output plus
// the chunks in flight.
//
// Crash-safe: every file is written under a hidden staged name and fsync'ed; the old config.json is removed,
// the other files are renamed into place, config.json last (it commits the directory), and the directory is
// synced. A failure or kill leaves no config.json beside new weights. Stale temporaries of writers whose
// process is gone are removed first.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qlinear/make_layer.hpp"
#include "qlinear/scheme.hpp"
#include "qlinear/status.hpp"

namespace qlinear {

struct QuantizeCheckpointOptions {
  MakeLayerOptions layer;                       // static input ranges, MX scale rule
  std::string ignore_regex = "lm_head|embed|norm";  // 2-D weights matching it anywhere stay dense
  uint64_t max_shard_bytes = 5'000'000'000;     // as save_pretrained's "5GB"
  // Called after each input tensor is written: its name and its input bytes. (Progress display.)
  std::function<void(const std::string& tensor, uint64_t input_bytes)> on_tensor;
};

struct QuantizeCheckpointSummary {
  size_t quantized = 0, copied = 0, shards = 0;
  uint64_t input_bytes = 0;   // bytes of every input tensor
  uint64_t output_bytes = 0;  // bytes of every output tensor
  std::vector<std::string> carried_files;  // non-weight files copied from the input directory
};

// The total bytes of the tensors of `in` (for a progress display), or an error naming the path.
Result<uint64_t> checkpoint_tensor_bytes(const std::string& in);

// `out` must not exist or be an empty directory.
Result<QuantizeCheckpointSummary> quantize_checkpoint(const std::string& in, const std::string& out,
                                                      const Scheme& scheme, const QuantizeCheckpointOptions& options);

}  // namespace qlinear
