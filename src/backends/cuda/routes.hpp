#pragma once
// The routes of CudaLinearKernel::apply (cuda_kernels.hpp), one file each: what runs for one apply once the
// kernel has picked the route. Shared here: the apply's operands and the activation-quantization helpers.
#include "backends/cuda/act_quant.hpp"
#include "backends/cuda/cuda_util.hpp"
#include "backends/cuda/layer_state.hpp"

namespace qlinear::cuda {

struct ApplyCtx {
  const LinearConfig& c;
  const LayerState& st;
  const Tensor& x;
  const Tensor* bias;
  Tensor& out;
  int64_t m;
  Stream stream;
  const QuantizedTensor* pre = nullptr;  // a pre-quantized activation (input_quant_key), or null
};

// The activation quantization a layer's key asks for.
ActQuantMode act_mode(const QuantKey& key);
// ActQuantArgs for a's input with `key` (codes and scales left for the route to place).
ActQuantArgs quant_args(const ApplyCtx& a, const QuantKey& key);
// FP8 per-tensor / per-token activations quantized by the layer's key into stream-ordered scratch: E4M3
// codes [m, k_valid] (zeros beyond K) and f32 scales, [m] per token (per_row) or [1]; a dynamic per-tensor
// scale's |x| max in `amax`.
struct Fp8Activations {
  Scratch codes, scales, amax;
};
Result<Fp8Activations> quantize_fp8_activations(const ApplyCtx& a, bool per_row);
// A pre-quantized activation's codes with rows k_valid long (zero padding), as the GEMMs read them: the
// tensor itself when it already is, else a padded copy in `pad`.
Result<const void*> padded_codes(const QuantizedTensor& q, int64_t k_valid, Scratch& pad, Stream stream);
// A pre-quantized activation on `device` with scales (and zero points) of the shapes the routes take.
Status expect_quantized_on(const QuantizedTensor& q, int device);

// route_stream.cpp: the weight-streaming CUDA-core kernel, every M.
Status apply_stream(const ApplyCtx& a);
// route_cublaslt_fp8.cpp: FP8 activation quantization (or a pre-quantized input) + cuBLASLt FP8 GEMM.
Status apply_cublaslt(const ApplyCtx& a);
// route_wgmma_fp8.cpp: FP8 activation quantization (or a pre-quantized input) + the own wgmma FP8 GEMM.
Status apply_wgmma_fp8(const ApplyCtx& a);
// route_mma_fp8.cpp: FP8 activation quantization (or a pre-quantized input) + the small-M FP8 mma.sync GEMM.
Status apply_mma_fp8(const ApplyCtx& a);
// route_int8.cpp: INT8 activation quantization + cuBLASLt INT8 GEMM + FP64 epilogue, or (wgmma) the own
// wgmma INT8 GEMM with that epilogue fused.
Status apply_int8(const ApplyCtx& a, bool wgmma);
// route_bf16.cpp: weights (and MXFP8 activations) widened exactly to BF16 + cuBLASLt BF16 GEMM.
Status apply_dequant_bf16(const ApplyCtx& a);

}  // namespace qlinear::cuda
