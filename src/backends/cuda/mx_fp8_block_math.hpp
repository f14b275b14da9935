#pragma once
// MX operands re-scaled exactly onto E4M3 with one power-of-two scale per 128-element block, so that
// cuBLASLt's block-scaled FP8 GEMM (1x128 activation groups x 128x128 weight blocks) multiplies MXFP4 /
// MXFP6 weights and activations (mx_fp8_block.hpp). Host and device alike; no CUDA headers.
//
// An MX group holds values c x 2^e with c on the element grid (act_grid: E2M1, E2M3 or E3M2). In a 128
// block with scale 2^F, the group's values become c x 2^d with d = e - F, and c x 2^d is an E4M3 number
// for every c of the grid exactly when
//   d <= dmax: the grid's largest value times 2^d stays <= 448 (each of these grids has at most 4
//              significant bits, all E4M3 normals hold, and the largest value has the largest mantissa);
//   d >= dmin: the grid's smallest step 2^(lsb + d) is a multiple of E4M3's smallest step 2^-9.
// E2M1: d in [-8, 6] (15 octaves), E2M3: [-6, 5] (12), E3M2: [-5, 4] (10). A block takes
// F = (largest exponent of its nonzero groups) - dmax and fits when its smallest such exponent is >= F + dmin.
// Groups whose codes are all zero fit any F. The products of two such E4M3 operands are exact; the tensor
// cores sum each 128-K block with FP8 accumulation before cuBLASLt promotes it to FP32 with the two scales.
#include "backends/cuda/act_quant_bf16_math.hpp"

#if !defined(__CUDACC__) || !defined(__CUDA_ARCH__)
#include <algorithm>
#include <climits>
#include <string>
#include <vector>
#endif

namespace qlinear::cuda {

struct MxFp8Window {
  int dmin, dmax;
};

QL_ACT_HD MxFp8Window mx_fp8_window(ActElem elem) {
  const ActGrid g = act_grid(elem);
  int dmax = 0;
  while (g.max * act_pow2f(dmax + 1) <= 448.0f) ++dmax;
  while (g.max * act_pow2f(dmax) > 448.0f) --dmax;
  return {-9 - g.lsb_log2, dmax};
}

// The block exponent range whose power-of-two scales keep cuBLASLt's FP32 promotion exact: a block's
// partial sum (|p| < 2^25, a multiple of 2^-18) times 2^(F + E) stays a normal f32 far from overflow.
inline constexpr int kMxFp8ScaleSumMin = -100, kMxFp8ScaleSumMax = 90;
// Each scale itself a normal f32.
inline constexpr int kMxFp8ScaleMin = -126, kMxFp8ScaleMax = 127;

#if !defined(__CUDACC__) || !defined(__CUDA_ARCH__)

// The weight side, planned once per layer on the host.
struct MxFp8WeightPlan {
  bool ok = false;
  std::string why_not;             // set where !ok: which block does not fit, and why
  int64_t row_blocks = 0, k_blocks = 0;
  std::vector<int32_t> exponent;   // E per block [row_blocks, k_blocks]
  std::vector<float> scale;        // 2^E [row_blocks, round_up(k_blocks, 4)] (cuBLASLt's BLK128x128 layout)
  int exp_min = 0, exp_max = 0;    // over the blocks that hold a nonzero group
};

// Whether each 32-group of an n x k matrix of packed codes (the checkpoint's row-major packing: E2M1 two per
// byte, FP6 four per 3 bytes little-endian, code i at bits 6i..6i+5) holds a nonzero code ([n, k / 32];
// negative zeros are zeros). K must be a multiple of 32. One pass of word tests: the sign bits masked off.
inline std::vector<bool> mx_fp8_nonzero_groups(ActElem elem, int64_t n, int64_t k, const uint8_t* codes) {
  const int64_t groups = k / 32;
  const bool fp4 = elem == ActElem::kE2M1;
  const int64_t row_bytes = fp4 ? k / 2 : k / 4 * 3, group_bytes = fp4 ? 16 : 24;
  std::vector<bool> nz(static_cast<size_t>(n * groups), false);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* p = codes + r * row_bytes + g * group_bytes;
      bool any = false;
      if (fp4) {
        for (int b = 0; b < 16 && !any; ++b) any = (p[b] & 0x77) != 0;  // sign bits 3 and 7
      } else {
        for (int w = 0; w < 8 && !any; ++w) {
          const uint32_t word = p[3 * w] | uint32_t{p[3 * w + 1]} << 8 | uint32_t{p[3 * w + 2]} << 16;
          any = (word & 0x7DF7DFu) != 0;  // sign bits 5, 11, 17, 23
        }
      }
      nz[static_cast<size_t>(r * groups + g)] = any;
    }
  }
  return nz;
}

// The cuBLASLt scale tensor [row_blocks, round_up(k_blocks, 4)] and the exponent range from the per-block
// exponents (also what import rebuilds from the processed weights).
inline void mx_fp8_fill_scales(MxFp8WeightPlan& p) {
  const int64_t ld = (p.k_blocks + 3) / 4 * 4;
  p.scale.assign(static_cast<size_t>(p.row_blocks * ld), 0.0f);
  for (int64_t b = 0; b < p.row_blocks; ++b) {
    for (int64_t j = 0; j < p.k_blocks; ++j) p.scale[b * ld + j] = act_pow2f(p.exponent[b * p.k_blocks + j]);
  }
}

// n x k weights with E8M0 group exponents `e8m0` [n, k / 32] (biased by 127) and `group_nonzero`
// [n, k / 32] (whether any code of the group is nonzero), in element format `elem`. K must be a multiple
// of 128.
inline MxFp8WeightPlan mx_fp8_plan_weights(ActElem elem, int64_t n, int64_t k, const uint8_t* e8m0,
                                           const std::vector<bool>& group_nonzero) {
  MxFp8WeightPlan p;
  if (k % 128 != 0) {
    p.why_not = "K=" + std::to_string(k) + " is not a multiple of 128";
    return p;
  }
  const MxFp8Window w = mx_fp8_window(elem);
  const int64_t groups = k / 32;
  p.row_blocks = (n + 127) / 128;
  p.k_blocks = k / 128;
  p.exponent.assign(static_cast<size_t>(p.row_blocks * p.k_blocks), 0);
  p.exp_min = INT_MAX;
  p.exp_max = INT_MIN;
  for (int64_t b = 0; b < p.row_blocks; ++b) {
    for (int64_t j = 0; j < p.k_blocks; ++j) {
      int lo = INT_MAX, hi = INT_MIN;
      for (int64_t r = b * 128; r < std::min(n, b * 128 + 128); ++r) {
        for (int64_t g = 4 * j; g < 4 * j + 4; ++g) {
          if (!group_nonzero[static_cast<size_t>(r * groups + g)]) continue;
          const int e = static_cast<int>(e8m0[r * groups + g]) - 127;
          lo = std::min(lo, e);
          hi = std::max(hi, e);
        }
      }
      if (hi == INT_MIN) continue;  // an all-zero block: scale 1
      const int f = hi - w.dmax;
      const std::string where = "weight block (rows " + std::to_string(b * 128) + "+, K " + std::to_string(j * 128) + "+)";
      if (lo < f + w.dmin) {
        p.why_not = where + " spans group exponents " + std::to_string(lo) + " .. " + std::to_string(hi) + ", " +
                    std::to_string(hi - lo + 1) + " octaves; E4M3 holds " + std::to_string(w.dmax - w.dmin + 1);
        return p;
      }
      if (f < kMxFp8ScaleMin) {
        p.why_not = where + " needs the scale 2^" + std::to_string(f) + ", below f32's normal range";
        return p;
      }
      p.exponent[static_cast<size_t>(b * p.k_blocks + j)] = f;
      p.exp_min = std::min(p.exp_min, f);
      p.exp_max = std::max(p.exp_max, f);
    }
  }
  if (p.exp_min == INT_MAX) p.exp_min = p.exp_max = 0;
  mx_fp8_fill_scales(p);
  p.ok = true;
  return p;
}

#endif

// The activation side, per row and 128 block (the pass's lanes): `lo` / `hi` the smallest / largest
// exponent of the block's nonzero groups (hi < lo: none), `w` the element's window (mx_fp8_window, taken
// once per call). Returns whether the block fits, and its F.
QL_ACT_HD bool mx_fp8_activation_block(const MxFp8Window& w, int lo, int hi, int weight_exp_min, int weight_exp_max,
                                       int& f) {
  if (hi < lo) {
    f = 0;
    return true;
  }
  f = hi - w.dmax;
  return lo >= f + w.dmin && f >= kMxFp8ScaleMin && f <= kMxFp8ScaleMax && f + weight_exp_min >= kMxFp8ScaleSumMin &&
         f + weight_exp_max <= kMxFp8ScaleSumMax;
}

}  // namespace qlinear::cuda
