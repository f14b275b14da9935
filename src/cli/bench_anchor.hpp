#pragma once
// The anchors of `qlinear bench --compare LIST`, each measured in the same run with its device's method:
//   bf16       CPU: oneDNN BF16 matmul (F32 where oneDNN has no BF16 path); CUDA: cuBLAS BF16 GEMM; both on
//              the unquantized weights;
//   vendor     CPU: oneDNN s8s8 matmul for the 8-bit schemes; CUDA: cuBLASLt FP8 / INT8 on pre-quantized
//              operands (src/bench/cuda_anchors.hpp); 4- and 6-bit schemes have none (an error row);
//   reference  qlinear's reference kernel of the family (correctness anchor; one repetition);
//   read       CUDA: the read floor, a plain kernel reading the layer's stored bytes and activations
//              (src/bench/cuda_anchors.hpp); its anchor / ours is the fraction of that floor reached.
// An anchor that cannot run a shape gives an error that the row records; the run goes on.
#include <memory>
#include <string>
#include <vector>

#include "bench/timing.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear::cli {

struct AnchorResult {
  std::string name;  // "onednn_bf16", "cublas_bf16", "cublaslt_fp8_rowwise", "reference_mxfp4", ...
  std::string impl;  // the library's implementation string where it gives one
  bench::Timing timing;
};

class BenchAnchor {
 public:
  // Parses "bf16,vendor,reference"; an unknown name is an error naming it and the known ones.
  static Result<std::vector<std::string>> parse_list(const std::string& list);
  // What the anchor `kind` is for `scheme` on `platform`: schemes with the same key share the anchor and its
  // measurement within a shape ("cublas_bf16"; the reference anchor is the scheme's own). An error says why
  // the anchor cannot run the scheme.
  static Result<std::string> key_for(const std::string& kind, const Scheme& scheme, const LinearLayer& layer,
                                     const Platform& platform);
  // The anchor `kind` for one (scheme, shape); `layer` is the quantized layer (the reference anchor runs it).
  static Result<std::unique_ptr<BenchAnchor>> create(const std::string& kind, const Scheme& scheme,
                                                     const LinearLayer& layer, const Platform& platform);
  virtual ~BenchAnchor() = default;
  virtual std::string name() const = 0;
  virtual Result<AnchorResult> measure(int64_t m, int reps) = 0;
};

}  // namespace qlinear::cli
