#pragma once
// FP8 / MXFP8 / MXFP6 / MXFP4 / NVFP4 on AVX2 + FMA (x86_avx2_{fp8_scaled_mm, fp8_block_scaled,
// fp8_weight_only, mxfp8, mxfp6, mxfp4, nvfp4}): the plain-C interface between the kernel classes
// (fp_common.cpp, baseline flags) and the AVX2 code (fp_gemm_avx2.cpp, fp_act_avx2.cpp). No inline
// functions or templates here (see int8_isa.hpp for why).
//
// One engine for every family: weight codes are decoded to f32 in registers, multiplied with f32
// activations by FMA, summed in f32.
//
// Weight layout ("code panels"), made once by process_weights_after_loading:
//   N padded to 16, K padded to 32, padding codes 0. Panel p holds output columns 16p..16p+15; along K,
//   one record of the 16 columns' codes per k:
//     E4M3:             16 bytes, byte j = code of column j
//     FP4 (E2M1):       8 bytes per k, in quad records: the 64 codes of k = 4q..4q+3 are one 32-byte
//                       record at 32q, code (column j, k = 4q + kk) in byte 16 L + 8 W + 2 d + (kk % 2),
//                       low nibble for kk < 2, high for kk >= 2, where j = 8 W + 4 L + d (see Decoding)
//     FP6 (E2M3, E3M2): 12 bytes per k, in quad records of 48 bytes at 48q: the low nibble of code (j, kk)
//                       in byte 16 (j / 8) + i, i = 8 (kk % 2) + j % 8, low nibble for kk < 2, high for
//                       kk >= 2; its top two bits in byte 32 + i at bits 2 (2 (kk / 2) + j / 8)
//   panel p at byte p * k_pad * record_bytes, record k at k * record_bytes within it.
//
// Decoding, exact (every code value is an f32): a decoded code is its value times 2^-kFpDecodeExp[elem],
// times a multiplier 2^kFpDecodeExp[elem] * s:
//   E4M3, E3M2, E2M3: the code as an FP16 bit pattern (sign to bit 15, the other bits under it so that
//       the code's exponent field is the low end of FP16's), widened by F16C: value * 2^-(15 - bias)
//       (FP16's exponent bias is 15; subnormals map to subnormals). E4M3 without group scales, or with MX
//       scales of at most 2^7, instead places the code's bits straight into an f32 (value * 2^-120,
//       subnormals on f32 subnormals) under a multiplier 2^120 * s: no F16C, whose vcvtph2ps on Zen 3 runs
//       one per cycle in the multiplies' slots (fp_gemm_avx2.cpp, E4m3Route). FP6 quad records give their codes as
//       two ymm of bytes (low nibbles split as for E2M1, the top bits of all 64 codes one broadcast xmm
//       shifted per 128-bit lane and placed by vpshufb), each 16-byte half 2 k x 8 columns.
//   E2M1: a quad record (one ymm) is split into its low and high nibbles; two vpshufb tables give the low
//       and high byte of each code's BF16 value (every E2M1 value is a BF16; -0 maps to +0), vpunpck{l,h}bw
//       pairs them into BF16 words, and a dword's two words become f32 by a shift (even word) and a mask
//       (odd word): 8 vectors = 4 k x 16 columns in 19 integer operations and no multiply. The values are
//       not scaled (kFpDecodeExp 0): the group scale multiplies each group's partial sum instead (below).
// s is the weight's per-group scale (MX E8M0 per 1x32, NVFP4 E4M3 per 1x16). MXFP8 folds it: each
// decoded weight is then exactly value * s, which process checks (the layer otherwise takes the
// reference). E2M1 and FP6 (quad records) apply 2^kFpDecodeExp * s in the accumulator instead (process's
// range check is the same): per row and column, a group's products are summed from
// zero in k order (FMA) and the sum is added as C = fma(partial, s, C), in the same order at every M and
// thread count. Per-tensor / per-channel f32 scales are applied once in the epilogue, 128x128 f32 block
// scales (and 1x128 activation scales) on each 128-wide K block's f32 partial sum.
#include <cstdint>

#include "backends/x86/int8_isa.hpp"  // FloatKind

namespace qlinear::x86 {

enum class FpElem : uint8_t { kE4M3, kE3M2, kE2M3, kE2M1 };

// By FpElem: the power of two a decoded code lacks (above); MX multipliers 2^(e8m0 - 127 + this) must be
// normal f32 (checked at process, fp_common.cpp).
constexpr int kFpDecodeExp[4] = {8, 12, 14, 0};
// E4M3's f32 route (fp_gemm_avx2.cpp): value * 2^-120, so an MX multiplier 2^(e - 127 + 120) is a normal f32
// only for scale codes e up to 134 (2^7); layers with larger scales keep the FP16 route.
constexpr int kFpE4m3F32DecodeExp = 120;
constexpr int kFpE4m3F32MaxScale = 254 - kFpE4m3F32DecodeExp;

// How the per-group multiplier of a panel is made from its scale bytes grp[p][group][16].
enum class FpGroupScale : uint8_t {
  kNone,   // one multiplier for every weight (scales in the epilogue or per block)
  kE8M0,   // MX: 2^(code - 127) per 1x32
  kE4M3,   // NVFP4: decode(code) per 1x16
};

struct FpGemm {
  const uint8_t* packed = nullptr;  // code panels (above)
  FpElem elem = FpElem::kE4M3;
  int64_t n = 0, n_pad = 0, k_pad = 0;
  FpGroupScale group_scale = FpGroupScale::kNone;
  // MXFP8 whose scale codes are all at most kFpE4m3F32MaxScale: its records take the f32 decode route too.
  bool e4m3_f32_groups = false;
  const uint8_t* grp = nullptr;     // [n_pad/16][k_pad/group][16] scale codes
  int64_t group = 32;               // 32 (MX) or 16 (NVFP4)
  // 128x128 weight blocks: partial sums over each 128-wide K block times block_scale[n/16][k/128], the scale
  // of panel n/16's block (panel_block_scales.hpp; times act_block_scale[m][k/128] when set).
  const float* block_scale = nullptr;
  int64_t block_cols = 0;           // ceil(k / 128)
  const float* act_block_scale = nullptr;  // [m][block_cols] (fp8_block_scaled's 1x128 activation scales)
  // Epilogue: y = acc * (row_scale[m] * col_scale[n]) + bias[n] + col_nan[n]
  const float* row_scale = nullptr;  // [m] or null (1)
  const float* col_scale = nullptr;  // [n_pad] or null (1)
  const float* bias = nullptr;       // [n] or null
  const float* col_nan = nullptr;    // [n_pad] 0 or NaN (columns holding a NaN weight code), or null
  const float* act = nullptr;        // f32 [m, lda], columns k..k_pad-1 zero
  int64_t lda = 0;
  // E2M1 weights with E2M1 or E2M3 activations (W4A4 MXFP4 / NVFP4, W4A6), when set: the activations in
  // integer form (FpActQuant::int_codes) for fp_quad_avx2.cpp's integer path, each product of an activation
  // integer, a weight integer (2 * value) and act_mult the exact product of values. act_pairs[m][k_pad / 2]:
  // the integers of k = 2j and 2j + 1 as bytes 0 and 1 of dword j, repeated in bytes 2 and 3;
  // act_mult[m][k_pad / group].
  const uint32_t* act_pairs = nullptr;
  const float* act_mult = nullptr;
  int64_t m = 0;
  void* out = nullptr;               // [m, n]
  FloatKind out_kind = FloatKind::kBF16;
  int threads = 1;  // threads::threads_for(weight bytes, flops): small layers run on the calling thread
};

void fp_gemm_avx2(const FpGemm& g);

// Blocking shared by fp_gemm_avx2.cpp and fp_quad_avx2.cpp: rows of a register tile, K per decoded chunk,
// the most rows decoded in registers (no tile), panels side by side at M = 1.
constexpr int kFpTileRows = 6;
constexpr int64_t kFpChunk = 256;
constexpr int kFpFusedMaxRows = 3;
constexpr int kFpMaxFusedPanels = 4;
// One K chunk [k0, k0 + len) of a work item on quad records (E2M1, FP6): rows [m_begin, m_end) of panels
// [p0, p0 + panels) into C tiles c[panel][rows][16]; buf: kFpChunk * 16 floats of scratch.
void fp_quad_chunk_avx2(const FpGemm& g, int64_t p0, int panels, int64_t m_begin, int64_t m_end, int64_t k0,
                        int64_t len, float* buf, float* c);

// The activation elements whose codes the integer path takes (FpActQuant::int_codes): value * 2^shift is an
// integer whose products with E2M1 weights (2 * value, at most 12) sum to at most 2^15 - 1 per group of 32:
// E2M1 (x 2: [-12, 12]) and E2M3 (x 8: [-60, 60]); -1: not an integer path element.
constexpr int fp_act_int_shift(FpElem e) { return e == FpElem::kE2M1 ? 1 : e == FpElem::kE2M3 ? 3 : -1; }

// Activation preparation: dense rows to f32, or quantized bit-identically to the reference quantizer
// (src/quant) and handed on as the exact f32 values of the codes (times the group scale where that is
// exact: MX and NVFP4 groups), with the remaining scale per row or per 1x128 block.
enum class FpActMode : uint8_t {
  kDense,           // f32 = x
  kFp8Static,       // E4M3, s = static_scale                       (row_scale = s)
  kFp8DynTensor,    // E4M3, s = amax(all) / 448 (f32), or 1/(448*512) for zeros (row_scale = s)
  kFp8DynToken,     // E4M3, s = max(amax(row) / 448 (f32), 1/(448*512))        (row_scale = s)
  kFp8Dyn1x128,     // E4M3, s = max(amax(group), 1e-10f) / 448 (f32)            (block_scale = s)
  kMxDyn,           // MX element `elem`, e per 1x32 by `mx_rule`, value * 2^e folded
  kNvfp4Dyn,        // E2M1, sf = E4M3(amax / 6 * g) per 1x16, q = E2M1(x * g / sf), value * sf folded
};

// The MX shared-exponent rules of quantize.hpp's MxScaleRule that activations use (default_mx_rule).
enum class FpMxRule : uint8_t {
  kCeilOverMax,  // e = ceil(log2(amax / max))
  kQuarkEven,    // amax's f32 bits rounded to the element's mantissa width (half up), e = floor(log2) - emax
};

struct FpActQuant {
  const void* x = nullptr;  // [m, k] rows, row stride ldx elements
  FloatKind x_kind = FloatKind::kF32;
  int64_t m = 0, k = 0, ldx = 0;
  FpActMode mode = FpActMode::kDense;
  FpElem elem = FpElem::kE4M3;  // kMxDyn
  FpMxRule mx_rule = FpMxRule::kCeilOverMax;  // kMxDyn
  float static_scale = 1.0f;    // kFp8Static
  float global_scale = 1.0f;    // kNvfp4Dyn: g
  // kNvfp4Dyn with a dynamic global scale (kNvfp4DynamicGlobal): g = 448*6/amax over all m rows (f32; 1 for
  // zeros), computed here per call as the reference quantizer does; global_scale is then unused.
  bool dynamic_global = false;
  // Outputs.
  float* act = nullptr;          // [m, k_pad], columns k.. zero
  // Activations of an integer element (fp_act_int_shift >= 0: kMxDyn, kNvfp4Dyn), when set: each code as the
  // integer value * 2^shift [m][k_pad] and each group's multiplier scale * 2^-(shift + 1) [m][k_pad / group]
  // (32 or 16 k; the + 1 is the weights' 2 * value), so that act = int_codes * int_mult * 2 exactly.
  int8_t* int_codes = nullptr;
  float* int_mult = nullptr;
  int64_t k_pad = 0;
  float* row_scale = nullptr;    // [m]
  float* block_scale = nullptr;  // [m][ceil(k/128)] (kFp8Dyn1x128)
  // Set to 1 when the input holds Inf/NaN (quantizing modes; the reference refuses it) or when a folded
  // value would not be exact in f32 (the layer then takes the reference for this call).
  uint8_t* bad_input = nullptr;
  uint8_t* inexact = nullptr;
  int threads = 1;  // rows are prepared on up to this many threads (threads::threads_for)
};

void fp_prepare_activations_avx2(const FpActQuant& q);

}  // namespace qlinear::x86
