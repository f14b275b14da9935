#pragma once
// The row kernels of quantize_fast (fast_quantize.cpp): the plain-C interface between the dispatcher
// (baseline flags) and one implementation per instruction set, each compiled with its own flags from
// fast_quant_kernels.inc: fast_quant_avx512.cpp (16 f32 lanes), fast_quant_avx2.cpp (8 lanes),
// fast_quant_scalar.cpp (one lane, any CPU). No inline functions or templates here: a header function
// compiled into an AVX-512 file and a baseline file would be one symbol, and the linker could hand the
// AVX-512 copy to a baseline caller.
//
// How an element becomes a code, bit-identically to the reference quantizers (src/quant, all in double):
//   t = |x| * mul (f32), saturated to the format's largest finite value; the code's magnitude is t rounded
//   to the format's grid, ties to even, found exactly with f32 operations: with e = max(exponent(t), emin),
//   y = t * 2^(M - e) is exact and the magnitude is ((e - emin) << M) + RNE(y) (integers: RNE(t)). The sign
//   is x's sign (integers: two's complement).
//   When mul is a power of two (MX) t is the exact scaled value and this is the reference's code. When it
//   is not (a division by an f32 scale, NVFP4's g / sf), t differs from the reference's double quotient by
//   a few f32 ulps; that moves the code only when the quotient lies within those ulps of a midpoint between
//   two codes, so such lanes (y's fraction within 2^-(21 - M) of 1/2) are recomputed by `exact` with the
//   reference's own double formula. Elements past the last full vector of a row take `exact` too.
#include <cstdint>
#include <vector>

#include "qlinear/quantize.hpp"

namespace qlinear::quant::fast {

enum class Src : uint8_t { kF32, kBF16, kF16 };

// The element grid of a code format.
struct Grid {
  int mbits = 3;        // mantissa bits (0 for integers)
  int emin = -6;        // unbiased exponent of the smallest normal
  int sign_bit = 7;     // bit of the code that holds the sign
  float max = 448.0f;   // largest finite magnitude
  bool integer = false; // INT8: magnitude RNE(t), code = two's complement byte
};

// Codes of elements whose f32 computation might round differently from the reference (above).
struct Exact {
  uint32_t (*fn)(const void* ctx, int64_t block, float x) = nullptr;
  const void* ctx = nullptr;
};

// One row: codes[c] for c in [0, cols), one byte each, block b = c / block scaled by mul[b]. A block with
// mul[b] == 0 gets code 0 (NVFP4's zero block scale); one whose mul[b] is not finite takes exact throughout.
// check_ties: recompute near-midpoint lanes by exact.
struct EncodeRow {
  const void* x = nullptr;
  Src src = Src::kBF16;
  int64_t cols = 0;
  int64_t block = 0;
  const float* mul = nullptr;
  Grid grid;
  bool check_ties = true;
  Exact exact;
  uint8_t* codes = nullptr;
};

struct Kernels {
  const char* name;
  // out[b] = max |x| over block b of one row, as f32 bits (Inf or NaN in the block: >= 0x7F800000).
  void (*block_amax_bits)(const void* x, Src src, int64_t cols, int64_t block, uint32_t* out);
  // max |x| over a contiguous run of n values, as f32 bits.
  uint32_t (*amax_bits)(const void* x, Src src, int64_t n);
  void (*encode_row)(const EncodeRow& job);
  // Sub-byte packing of one-byte codes (formats.hpp's layouts): FP4 two per byte, FP6 four in three bytes.
  void (*pack_fp4)(const uint8_t* codes, int64_t n, uint8_t* out);
  void (*pack_fp6)(const uint8_t* codes, int64_t n, uint8_t* out);
};

extern const Kernels kScalarKernels;
extern const Kernels kAvx2Kernels;    // AVX2 + FMA + F16C
extern const Kernels kAvx512Kernels;  // AVX-512 F/BW/VL/DQ

// The kernel sets this CPU can run, best first (QLINEAR_CPU_ISA hides the higher ones); the scalar set last.
std::vector<const Kernels*> usable_kernels();

// quantize_fast with a given kernel set (tests compare every usable set against the reference).
Result<QuantizedTensor> quantize_with(const Kernels& kernels, const Tensor& x, const QuantKey& key,
                                      const QuantizeOptions& options);

}  // namespace qlinear::quant::fast
