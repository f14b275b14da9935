// quantize_fast's row kernels (fast_quant_kernels.inc) with one lane, at baseline flags: the same operations
// on plain f32 / u32 values, for CPUs without AVX2 (and QLINEAR_CPU_ISA=scalar).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "qlinear/tensor.hpp"
#include "quant/fast_quant_isa.hpp"

namespace qlinear::quant::fast {

namespace {

struct V {
  static constexpr int W = 1;
  using F = float;
  using U = uint32_t;
  template <Src S>
  static F load(const void* p) {
    if constexpr (S == Src::kF32) {
      return *static_cast<const float*>(p);
    } else if constexpr (S == Src::kBF16) {
      return std::bit_cast<float>(static_cast<uint32_t>(*static_cast<const uint16_t*>(p)) << 16);
    } else {
      return f16_to_float(*static_cast<const uint16_t*>(p));
    }
  }
  static U bits(F x) { return std::bit_cast<uint32_t>(x); }
  static F fl(U x) { return std::bit_cast<float>(x); }
  static U set1u(uint32_t v) { return v; }
  static F set1f(float v) { return v; }
  static U and_(U a, U b) { return a & b; }
  static U or_(U a, U b) { return a | b; }
  static U xor_(U a, U b) { return a ^ b; }
  static U add(U a, U b) { return a + b; }
  static U sub(U a, U b) { return a - b; }
  static U max_u(U a, U b) { return std::max(a, b); }
  static U max_i(U a, U b) { return static_cast<U>(std::max(static_cast<int32_t>(a), static_cast<int32_t>(b))); }
  template <int N> static U srl(U a) { return a >> N; }
  template <int N> static U sll(U a) { return a << N; }
  template <int N> static U sra(U a) { return static_cast<U>(static_cast<int32_t>(a) >> N); }
  static U sllv(U a, int n) { return a << n; }
  static U srlv(U a, int n) { return a >> n; }
  static F mul(F a, F b) { return a * b; }
  static F sub(F a, F b) { return a - b; }
  static F min(F a, F b) { return b < a ? b : a; }
  // To nearest, ties to even, whatever the floating-point environment's rounding mode (as formats.cpp).
  static F round_ne(F a) {
    const float whole = std::floor(a);
    const float fraction = a - whole;  // exact
    const bool odd = std::fmod(whole, 2.0f) != 0;
    return fraction > 0.5f || (fraction == 0.5f && odd) ? whole + 1.0f : whole;
  }
  static U cvtt(F a) { return static_cast<U>(static_cast<int32_t>(a)); }
  static uint32_t ge_mask(F a, F b) { return a >= b ? 1u : 0u; }
  static void store_codes(uint8_t* out, U v) { *out = static_cast<uint8_t>(v); }
  static void store_f(float* out, F v) { *out = v; }
  static uint32_t hmax(U v) { return v; }
};

#include "quant/fast_quant_kernels.inc"

}  // namespace

const Kernels kScalarKernels = {"scalar", block_amax_bits_impl, amax_bits_impl, encode_row_impl, pack_fp4_impl,
                                pack_fp6_impl};

}  // namespace qlinear::quant::fast
