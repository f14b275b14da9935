// quantize_fast's row kernels (fast_quant_kernels.inc) on AVX-512 F/BW/VL/DQ: 16 f32 lanes. Compiled with
// AVX-512 flags (CMakeLists.txt); fast_quantize.cpp calls them only where the CPU has AVX-512.
// GCC 12's AVX-512 headers make their "undefined" pass-through operands by self-initialization, which
// -Wall reports once the intrinsics are inlined here; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "qlinear/tensor.hpp"
#include "quant/fast_quant_isa.hpp"

namespace qlinear::quant::fast {

namespace {

struct V {
  static constexpr int W = 16;
  using F = __m512;
  using U = __m512i;
  template <Src S>
  static F load(const void* p) {
    if constexpr (S == Src::kF32) {
      return _mm512_loadu_ps(p);
    } else if constexpr (S == Src::kBF16) {
      const __m256i h = _mm256_loadu_si256(static_cast<const __m256i*>(p));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
    }
  }
  static U bits(F x) { return _mm512_castps_si512(x); }
  static F fl(U x) { return _mm512_castsi512_ps(x); }
  static U set1u(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }
  static F set1f(float v) { return _mm512_set1_ps(v); }
  static U and_(U a, U b) { return _mm512_and_si512(a, b); }
  static U or_(U a, U b) { return _mm512_or_si512(a, b); }
  static U xor_(U a, U b) { return _mm512_xor_si512(a, b); }
  static U add(U a, U b) { return _mm512_add_epi32(a, b); }
  static U sub(U a, U b) { return _mm512_sub_epi32(a, b); }
  static U max_u(U a, U b) { return _mm512_max_epu32(a, b); }
  static U max_i(U a, U b) { return _mm512_max_epi32(a, b); }
  template <int N> static U srl(U a) { return _mm512_srli_epi32(a, N); }
  template <int N> static U sll(U a) { return _mm512_slli_epi32(a, N); }
  template <int N> static U sra(U a) { return _mm512_srai_epi32(a, N); }
  static U sllv(U a, int n) { return _mm512_sll_epi32(a, _mm_cvtsi32_si128(n)); }
  static U srlv(U a, int n) { return _mm512_srl_epi32(a, _mm_cvtsi32_si128(n)); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F round_ne(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static U cvtt(F a) { return _mm512_cvttps_epi32(a); }
  static uint32_t ge_mask(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
  static void store_codes(uint8_t* out, U v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(v)); }
  static void store_f(float* out, F v) { _mm512_storeu_ps(out, v); }
  static uint32_t hmax(U v) { return static_cast<uint32_t>(_mm512_reduce_max_epu32(v)); }
};

#include "quant/fast_quant_kernels.inc"

}  // namespace

const Kernels kAvx512Kernels = {"avx512", block_amax_bits_impl, amax_bits_impl, encode_row_impl, pack_fp4_impl,
                                pack_fp6_impl};

}  // namespace qlinear::quant::fast
