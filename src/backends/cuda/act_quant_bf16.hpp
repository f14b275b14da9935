#pragma once
// Activations quantized on the GPU bit-identically to the reference quantizers and written as the BF16
// values they dequantize to, in one pass, for the BF16 tensor-core kernels (mma_decode.hpp): each product
// of a decoded weight and such a value is exact, so the GEMM equals the reference on the same quantized
// inputs within FP32 summation order. What does not fold into the BF16 values comes out as one factor that
// the GEMM's f64 epilogue combines with its row factor (mma_epilogue_math.hpp): the static FP8 scale s as a
// multiplier, or NVFP4's g as an exact divisor with its f64 reciprocal, so that the output of an exact FP32
// sum equals the reference's.
//
//   mode        per         scale (reference rule)                         BF16 value      factor
//   kMx32       1x32        2^e, e by ActMxRule (mx_quant.cpp)              code x 2^e      none
//   kFp8Static  tensor      s = the layer's static input scale              e4m3(x / s)     s
//   kNvfp4      1x16        sf = e4m3(amax / 6 * g), g static or dynamic    e2m1(x g/sf) sf 1 / g
//                           (g = f32(2688 / amax over the whole call))
//
// Exactness of the BF16 values (act_quant_bf16_math.hpp, act_mx_bf16_exact):
//   kMx32 E2M3, E3M2, E2M1: every block whose |x| max is below 2^126; E4M3 also needs the block's exponent
//     e >= -124 (|x| max >= 2^-116): smaller E4M3 blocks round their codes below 2^-133 to BF16 subnormals
//     (an absolute error below 2^-133 per element). Beyond 2^126 (only F32 inputs above 8.5e37 get there)
//     the largest values of a block may round to BF16 infinity. Nothing checks this per call.
//   kFp8Static: always (every E4M3 value is a BF16 number).
//   kNvfp4: always (an E2M1 value times an E4M3 value has at most 6 significant bits, within 2^-10 .. 2688).
// Inputs holding Inf or NaN give undefined values (the reference refuses them).
//
// Launches: one kernel; kNvfp4 with a dynamic global scale runs an |x| max reduction first (one u32 of
// stream-ordered scratch, reset with cudaMemsetAsync). No synchronization, no allocation: graph-capturable.
#include <cstdint>

#include "backends/cuda/act_quant_bf16_math.hpp"
#include "backends/cuda/cuda_util.hpp"
#include "backends/cuda/mma_epilogue_math.hpp"
#include "qlinear/formats.hpp"

namespace qlinear::cuda {

enum class ActBf16Mode : uint8_t { kMx32, kFp8Static, kNvfp4 };

struct ActBf16Args {
  const void* x = nullptr;       // [m, k], rows ld_x elements apart
  DType x_dtype = DType::kBF16;  // F32, BF16, F16
  int64_t m = 0, k = 0, ld_x = 0;
  ActBf16Mode mode = ActBf16Mode::kMx32;
  ActElem elem = ActElem::kE4M3;               // kMx32
  ActMxRule rule = ActMxRule::kCeilOverMax;    // kMx32
  float static_scale = 1.0f;                   // kFp8Static: s
  float global_scale = 1.0f;                   // kNvfp4 with a static global scale: g
  bool dynamic_global = false;                 // kNvfp4: g from this call's |x| max instead
  uint32_t* amax_scratch = nullptr;            // kNvfp4 dynamic: one u32 of device scratch
  void* out = nullptr;                         // BF16 [m, ld_out], 16-byte aligned, ld_out % 8 == 0
  int64_t ld_out = 0;
  MmaFactor* factor = nullptr;                 // device [1]: s (kFp8Static) or 1 / g and g (kNvfp4)
};

// K must be a multiple of 32 (kMx32), 16 (kNvfp4) or 8 (kFp8Static).
Status launch_act_quant_bf16(const ActBf16Args& args, Stream stream);

}  // namespace qlinear::cuda
