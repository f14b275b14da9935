#pragma once
// Pre-quantized activations, end to end: a producer (the previous layer's epilogue, an engine's fused
// norm + quant) quantizes an activation into exactly the key a chosen kernel declares for a layer
// (LinearKernel::input_quant_key), and the kernel's apply uses those codes and scales as they are instead of
// quantizing the dense input itself. The result equals the kernel's own dense-input path bit for bit: the
// same key, the same static scales the kernel reads from the layer (input_scale and input_global_scale as the
// max over fused shards, input_zero_point), and the reference quantizers the fast kernels match exactly.
//
//   auto kernel = select_kernel(layer.config, platform);          // process_weights_after_loading as usual
//   auto xq = quantize_activation_for(**kernel, layer, x);         // anywhere upstream
//   (*kernel)->apply(layer, *xq, bias, out);                       // no re-quantization
//
// An activation quantized with another key is refused by apply with an error naming both keys.
#include "qlinear/kernel.hpp"

namespace qlinear {

// The key `kernel` takes pre-quantized for `layer`, or an error saying it takes dense input only.
Result<QuantKey> activation_key_for(const LinearKernel& kernel, const LinearLayer& layer);

// Quantizes dense `x` (F32/BF16/F16 [M, K], K = the layer's) into activation_key_for(kernel, layer) with the
// layer's static scales. Errors name the kernel, the layer and what did not fit (no key, wrong K, a missing
// static scale, Inf/NaN in x).
Result<Activation> quantize_activation_for(const LinearKernel& kernel, const LinearLayer& layer, const Tensor& x);

// The same for a key with dynamic per-token symmetric scales (FP8, INT8), except that each row's scale comes
// from row_amax (f32 [M], host) instead of the row's own |x| maximum, by the same rule: what a
// tensor-parallel row slice needs, which holds a part of each row and quantizes it with the whole row's
// (all-reduced) maximum. With row_amax = the rows' own maxima the result is quantize_activation_for's, bit
// for bit. Errors name the kernel, the layer and what did not fit (another key, a wrong shape).
// (LinearKernel::quantize_input of the host kernels; wrap it with Activation::quantized.)
Result<QuantizedTensor> quantize_activation_with_row_amax(const LinearKernel& kernel, const LinearLayer& layer,
                                                          const Tensor& x, const Tensor& row_amax);

}  // namespace qlinear
