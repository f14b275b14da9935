#pragma once
// The tensor-core decode kernels (mma_decode.hpp) as LinearKernels: weight-only FP8 (per-tensor or
// per-channel E4M3), MXFP8, MXFP6, MXFP4 and NVFP4 weights with BF16 activations, or with activations
// quantized as the reference does (dynamic MX per 32 by the key's scale rule, static per-tensor FP8 on
// MXFP4, NVFP4 per 16 with a static or per-call global scale) by one pass that writes their exact BF16
// values and the f64 factor the epilogue applies (act_quant_bf16.hpp). Each declares the M range
// it is built for (kMmaDecodeMaxM); larger M runs in 64-token tiles, and above kMmaWidenAboveM the weights
// are widened to BF16 per call for a cuBLASLt GEMM (m_routes says which runs where). process_weights_after_loading packs the
// codes and block scales into the kernel's layout (layout/mma_layout.hpp) on the device and leaves the
// checkpoint tensors untouched (row_major_weight reads them); apply neither allocates outside stream-ordered
// scratch nor synchronizes, so it can be captured in a CUDA graph.
#include "qlinear/kernel.hpp"

namespace qlinear::cuda {

class MmaDecodeLinearKernel final : public LinearKernel {
 public:
  constexpr MmaDecodeLinearKernel(Family family, std::string_view name, std::string_view summary)
      : family_(family), name_(name), summary_(summary) {}

  std::string_view name() const override { return name_; }
  Family family() const override { return family_; }
  std::string_view summary() const override { return summary_; }
  Verdict is_supported(const Platform& platform) const override;
  Verdict can_implement(const LinearConfig& config) const override;
  bool supports_pre_processed_weights() const override { return true; }
  uint32_t processed_layout_version() const override { return 6; }  // 6: the FP8 block plan
  // The M range this kernel's tile table covers (1 .. max_m); beyond it the kernel still runs, unprofiled.
  int64_t max_m() const;
  // The M buckets, each a route of this kernel: the tile configuration (the H200 table of mma_decode.cu)
  // and the split of K the layer's shape gets there ("8 tokens x 64 rows, 4 stages, split-K 2"), then the
  // 64-token tiles and the widened BF16 route above.
  std::vector<MRoute> m_routes(const LinearConfig& config) const override;

 protected:
  Status process_impl(LinearLayer& layer) const override;
  Status apply_impl(const LinearLayer& layer, const Activation& x, const Tensor* bias, Tensor& out) const override;
  Result<ProcessedWeights> export_impl(const LinearLayer& layer) const override;
  Status import_impl(LinearLayer& layer, const ProcessedWeights& weights) const override;

 private:
  Family family_;
  std::string_view name_;
  std::string_view summary_;
};

extern const MmaDecodeLinearKernel kSm90MmaDecodeFp8WeightOnly;  // "sm90_mma_decode_fp8_weight_only"
extern const MmaDecodeLinearKernel kSm90MmaDecodeMxfp8;          // "sm90_mma_decode_mxfp8"
extern const MmaDecodeLinearKernel kSm90MmaDecodeMxfp6;          // "sm90_mma_decode_mxfp6"
extern const MmaDecodeLinearKernel kSm90MmaDecodeMxfp4;          // "sm90_mma_decode_mxfp4"
extern const MmaDecodeLinearKernel kSm90MmaDecodeNvfp4;          // "sm90_mma_decode_nvfp4"

// Whether a layer processed by one of these kernels folds its MX block scales into the BF16 weights (else
// they multiply each 32-group's FP32 partial sum; mma_decode.cuh). True for the other scale kinds.
bool mma_decode_folds_scales(const LinearLayer& layer);
// The K splits apply would use at M, and the bytes of weights and block scales it streams (benchmarks).
int mma_decode_splits_for(const LinearLayer& layer, int64_t m);
int64_t mma_decode_weight_bytes(const LinearLayer& layer);
// What apply runs at M for this layer, in words (mma_route_description; `qlinear tune --decode`).
std::string mma_decode_route_for(const LinearLayer& layer, int64_t m);

}  // namespace qlinear::cuda
