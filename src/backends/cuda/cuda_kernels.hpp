#pragma once
// The CUDA backend's LinearKernels (sm_90a): one class, one object per (family, route); the names say the
// route. process_weights_after_loading copies the host checkpoint tensors into device buffers in the
// layouts of weight_stream.hpp / cublaslt_gemm.hpp (layer.kernel_state, layer_state.hpp); apply takes
// activations and output on that device, on the current stream (qlinear/cuda.hpp), and returns without
// synchronizing.
//
//   route         what runs (routes.hpp; one file each)
//   kCublasLt     activation quantization kernel + cuBLASLt FP8 GEMM, scales and bias in its epilogue
//                 (INT8: cuBLASLt INT8 GEMM + FP64 epilogue)
//   kStream       the CUDA-core weight-streaming kernel for every M (FP32 accumulation, one FMA per product)
//   kDequantBf16  MX and FP8 weight-only: weights widened to BF16 in row blocks (exactly: dequant_bf16.hpp),
//                 MXFP8 activations quantized then widened likewise, cuBLASLt BF16 GEMM (FP32 accumulation)
//   kWgmma        FP8 per-tensor / per-channel: activation quantization kernel + the own persistent wgmma
//                 FP8 GEMM (wgmma_fp8_gemm.hpp), scales, bias and rounding in its epilogue; INT8: the
//                 quantization kernel + the own wgmma INT8 GEMM with the FP64 epilogue fused
//   kMma          FP8 per-tensor / per-channel at small M: activation quantization kernel + the FP8 mma.sync
//                 GEMM (fp8_mma_gemm.hpp) on the same row-major weights, scales, bias and rounding in its
//                 epilogue
//   kAuto         kMma while M <= mma_max_m (FP8 W8A8 per-tensor / per-channel), then kStream while M <= stream_max_m (per kernel, from H200 measurements), above it kCublasLt
//                 (FP8 W8A8 families; N % 16 != 0 takes kStream for every M) or kDequantBf16 (MX and FP8
//                 weight-only, when the layer's scales keep the BF16 values exact and the input is BF16);
//                 FP8 W8A8 takes kWgmma from M = wgmma_min_m (0: never) where cuBLASLt would run; so does
//                 the INT8 kernel (a kCublasLt kernel with wgmma_min_m)
//
// Every route is also a kernel of its own (route_kernel), so a kAuto kernel declares its M ranges as
// m_routes naming those kernels, and QLINEAR_FORCE_KERNEL can run any route for every M.
//
// Numerics: weights and activation codes are decoded exactly; activation codes are bit-identical to the
// reference quantizers (act_quant.hpp); products are exact in FP32 and summed in FP32 (cuBLASLt: tensor-core
// FP32 accumulation with periodic promotion); scales are applied in FP32 where weight_stream.hpp /
// cublaslt_gemm.hpp say; bias is added in FP32 before the one rounding to the output dtype.
#include "qlinear/kernel.hpp"

namespace qlinear::cuda {

struct LayerState;

enum class Route : uint8_t { kAuto, kCublasLt, kStream, kDequantBf16, kWgmma, kMma };

class CudaLinearKernel final : public LinearKernel {
 public:
  constexpr CudaLinearKernel(Family family, std::string_view name, std::string_view summary, Route route,
                             int64_t stream_max_m = 1, int64_t wgmma_min_m = 0, int64_t mma_max_m = 0)
      : family_(family),
        name_(name),
        summary_(summary),
        route_(route),
        stream_max_m_(stream_max_m),
        wgmma_min_m_(wgmma_min_m),
        mma_max_m_(mma_max_m) {}

  std::string_view name() const override { return name_; }
  Family family() const override { return family_; }
  std::string_view summary() const override { return summary_; }
  Verdict is_supported(const Platform& platform) const override;
  Verdict can_implement(const LinearConfig& config) const override;
  // FP8 per-tensor/per-token (cuBLASLt route) and INT8 layers take activations already quantized with the
  // layer's activation key, on the layer's device: codes [M, K] (E4M3 or I8), scales f32 [1] or [M, 1],
  // INT8 asymmetric zero points i32 [1] or [M, 1]. Tensor-parallel row layers use it to quantize every
  // rank's slice with scales of the full row.
  std::optional<QuantKey> input_quant_key(const LinearConfig& config) const override;
  // Dynamic per-token FP8 / INT8 (symmetric) layers: the GPU quantizer with the given row maxima.
  Result<QuantizedTensor> quantize_input(const LinearLayer& layer, const Tensor& x,
                                         const Tensor& row_amax) const override;

  // Processed weights (the device buffers, copied to the host) can be saved and imported onto the current
  // device (the weight cache).
  bool supports_pre_processed_weights() const override { return true; }
  uint32_t processed_layout_version() const override { return 2; }  // 2: per-shard 128x128 grids

  // kAuto: the M ranges of stream_max_m and the kernels of their routes; the others: themselves.
  std::vector<MRoute> m_routes(const LinearConfig& config) const override;
  std::string_view apply_route(const LinearLayer& layer, const Activation& x) const override;

  Route route() const { return route_; }
  int64_t stream_max_m() const { return stream_max_m_; }
  int64_t wgmma_min_m() const { return wgmma_min_m_; }
  int64_t mma_max_m() const { return mma_max_m_; }

 protected:
  Status process_impl(LinearLayer& layer) const override;
  Status apply_impl(const LinearLayer& layer, const Activation& x, const Tensor* bias, Tensor& out) const override;
  Result<ProcessedWeights> export_impl(const LinearLayer& layer) const override;
  Status import_impl(LinearLayer& layer, const ProcessedWeights& weights) const override;

 private:
  // The route one apply takes (never kAuto): for kAuto by M, the config and the layer's state.
  Route route_for(const LinearConfig& c, const LayerState& st, int64_t m, bool prequantized) const;
  // The M from which kAuto runs kWgmma for this config (0: never).
  int64_t takes_wgmma_from(const LinearConfig& c) const;
  // The M up to which kAuto runs kMma for this config (0: never).
  int64_t takes_mma_to(const LinearConfig& c) const;
  // Refuses staged data the route cannot run (kDequantBf16 without exact BF16 weights).
  Status accept_staged(const LinearLayer& layer, const LayerState& st) const;

  Family family_;
  std::string_view name_;
  std::string_view summary_;
  Route route_;
  int64_t stream_max_m_;
  int64_t wgmma_min_m_;
  int64_t mma_max_m_;
};

// In priority order within each family (src/select/priority_cuda.cpp lists them). The kAuto kernels route
// by M to the route kernels named beside them.
extern const CudaLinearKernel kSm90Fp8ScaledMM;      // "sm90_fp8_scaled_mm"       cuBLASLt; stream for odd N
extern const CudaLinearKernel kCublasLtFp8ScaledMM;  // "cublaslt_fp8_scaled_mm"   cuBLASLt only
extern const CudaLinearKernel kSm90Fp8ScaledMMStream;  // "sm90_fp8_scaled_mm_stream"
extern const CudaLinearKernel kSm90Fp8ScaledMMWgmma;   // "sm90_fp8_scaled_mm_wgmma"  own wgmma GEMM
extern const CudaLinearKernel kSm90Fp8ScaledMMMma;     // "sm90_fp8_scaled_mm_mma"    FP8 mma.sync, small M
extern const CudaLinearKernel kSm90Fp8BlockScaled;   // "sm90_fp8_block_scaled"    stream at M = 1, cuBLASLt above
extern const CudaLinearKernel kCublasLtFp8BlockScaled;  // "cublaslt_fp8_block_scaled"
extern const CudaLinearKernel kSm90Fp8BlockScaledStream;  // "sm90_fp8_block_scaled_stream"
extern const CudaLinearKernel kSm90Int8ScaledMM;     // "sm90_int8_scaled_mm"      cuBLASLt INT8 + FP64 epilogue
extern const CudaLinearKernel kSm90Int8ScaledMMWgmma;  // "sm90_int8_scaled_mm_wgmma" own wgmma INT8, epilogue fused
extern const CudaLinearKernel kSm90Fp8WeightOnly;   // "sm90_fp8_weight_only"     stream, BF16 GEMM above M = 16
extern const CudaLinearKernel kSm90Fp8WeightOnlyBf16;    // "sm90_fp8_weight_only_bf16"
extern const CudaLinearKernel kSm90Fp8WeightOnlyStream;  // "sm90_fp8_weight_only_stream"
extern const CudaLinearKernel kSm90Mxfp8;            // "sm90_mxfp8"               stream, BF16 GEMM above M = 8
extern const CudaLinearKernel kSm90Mxfp8Bf16;        // "sm90_mxfp8_bf16"
extern const CudaLinearKernel kSm90Mxfp8Stream;      // "sm90_mxfp8_stream"
extern const CudaLinearKernel kSm90Mxfp6;            // "sm90_mxfp6"
extern const CudaLinearKernel kSm90Mxfp6Bf16;        // "sm90_mxfp6_bf16"
extern const CudaLinearKernel kSm90Mxfp6Stream;      // "sm90_mxfp6_stream"
extern const CudaLinearKernel kSm90Mxfp4;            // "sm90_mxfp4"
extern const CudaLinearKernel kSm90Mxfp4Bf16;        // "sm90_mxfp4_bf16"
extern const CudaLinearKernel kSm90Mxfp4Stream;      // "sm90_mxfp4_stream"

// The kernel that runs `route` alone for `family` (route != kAuto; every family has its kStream and
// kCublasLt or kDequantBf16 kernels, INT8 its kCublasLt one), or null.
const CudaLinearKernel* route_kernel(Family family, Route route);

}  // namespace qlinear::cuda
