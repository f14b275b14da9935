#pragma once
// Reference quantizers and dequantizers for every key. They define the numerics every kernel's own
// quantization is tested against; they are scalar, straightforward and parallel over rows.
//
// Operands are row-major 2-D [rows, cols] with groups running along cols (K). A weight [N, K] and an
// activation [M, K] use the same functions; the key says which granularity applies.
#include <optional>

#include "qlinear/quant_key.hpp"
#include "qlinear/tensor.hpp"

namespace qlinear {

// The shared-exponent rule of MX quantization (OCP MX v1.0 leaves the choice of scale to the producer).
//   amax = max |x| over the 32-block; e = the unbiased E8M0 exponent, clamped to [-127, 127];
//   kCeilOverMax (vLLM's current _mxfp8_e4m3_quantize_torch, triton_kernels ROUND_UP):
//        e = ceil(log2(amax / max_finite(elem)))  — the block max never exceeds the element range.
//   kFloorLog2 (vLLM's older reference and its ROCm Triton kernel): e = floor(log2(amax)),
//        so scaled values fall in [0, 2) and only the top binades of the element format are used.
//   kOcp (OCP MX spec §6.3): e = floor(log2(amax)) - emax(elem) (emax E4M3 8, E2M3 2, E3M2 4, E2M1 2),
//        then saturating conversion.
//   kQuarkEven (AMD Quark's scale_calculation_mode "even", its default, and what vLLM's QuarkOCP_MX runs):
//        amax is first rounded to the element's mantissa width M on its f32 bits (half up: add 2^(22-M)
//        to the bit pattern, clear the mantissa), then e = floor(log2(that)) - emax(elem). So a block whose
//        f32 amax has mantissa >= 2 - 2^-(M+1) takes the next binade; the rest get kOcp's exponent. An f32
//        amax below 2^-126 gives -127; one that rounds past f32's range gives 127.
// All-zero blocks get e = -127 (code 0). Elements are then encoded RNE with saturation.
enum class MxScaleRule : uint8_t { kCeilOverMax, kFloorLog2, kOcp, kQuarkEven };

// The rule a key's quantization uses when QuantizeOptions names none: Quark's "even" for dynamic FP6 / FP4
// MX keys (the activations of Quark's OCP-MX schemes, as vLLM's QuarkOCP_MX quantizes them); kCeilOverMax
// for everything else (vLLM's MXFP8 activations and every static weight key).
MxScaleRule default_mx_rule(const QuantKey& key);

struct QuantizeOptions {
  // Static keys: the scale to use — per-tensor f32 [1] or []; per-channel [rows, 1]; 128x128 blocks
  // [ceil(rows/128), ceil(cols/128)]; MX E8M0 bytes (U8) [rows, cols/32]; NVFP4 E4M3 [rows, cols/16] (with
  // nvfp4_global_scale). Without one, weight-style static keys (per-tensor, per-channel, blocks, MX, NVFP4)
  // compute it from the data, as a checkpoint producer does; static per-token, static 1xG and static
  // asymmetric INT8 keys require it. For static asymmetric INT8 also `static_zero_point` (i32 [1]).
  // Options a key does not use are errors, and so is any Inf or NaN in the input.
  Tensor static_scale;
  Tensor static_zero_point;
  // Dynamic FP8 per-token: the upper bound on amax (vLLM's input_scale_ub); none by default.
  std::optional<float> scale_ub;
  // MX keys: the shared-exponent rule; none = default_mx_rule(key).
  std::optional<MxScaleRule> mx_rule;
  // NVFP4: the per-tensor global scale as a multiplier g (compressed-tensors' *_global_scale); computed as
  // 448*6/amax(x) when absent. A key whose scale2 is dynamic (kNvfp4DynamicGlobal) always computes it.
  std::optional<float> nvfp4_global_scale;
};

// Quantizes a row-major 2-D float tensor (F32, BF16, F16 or F64) into `key`'s format.
// Errors name the key and what did not fit (cols not a multiple of the MX block, static key without scale).
Result<QuantizedTensor> quantize(const Tensor& x, const QuantKey& key, const QuantizeOptions& options = {});

// quantize(), bit for bit, fast: vectorized (AVX-512, AVX2 or scalar, chosen at run time) and spread over
// the CPU thread pool in chunks of rows, reading BF16 / F16 / F32 rows as they are. Covers FP8 and symmetric
// INT8 on every granularity, MX with computed exponents and NVFP4 with computed block scales; everything
// else (and every error) is quantize()'s own.
Result<QuantizedTensor> quantize_fast(const Tensor& x, const QuantKey& key, const QuantizeOptions& options = {});

// While one lives (on any thread), quantize_fast takes outputs of 8 MiB and more from buffers that earlier
// calls' outputs left when they were freed (it keeps two), instead of fresh memory whose pages the kernel
// faults in and clears one by one: what a loop over a model's tensors wants (quantize_checkpoint holds one).
// The kept buffers are released when the last one ends.
class QuantizeBufferReuse {
 public:
  QuantizeBufferReuse();
  ~QuantizeBufferReuse();
  QuantizeBufferReuse(const QuantizeBufferReuse&) = delete;
  QuantizeBufferReuse& operator=(const QuantizeBufferReuse&) = delete;
};

// Exact dequantization into an F32 or F64 [rows, cols] tensor (F64 is exact for every format).
Result<Tensor> dequantize(const QuantizedTensor& q, DType out = DType::kF32);

// Scale tensor shape for a [rows, cols] operand under `group` (documented in QuantizedTensor::scale).
Shape scale_shape(const GroupShape& group, int64_t rows, int64_t cols);

// The two constants vLLM's FP8 dynamic quantization uses.
inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8MinScalingFactor = 1.0f / (448.0f * 512.0f);  // per-token lower bound on the scale

}  // namespace qlinear
