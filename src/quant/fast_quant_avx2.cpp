// quantize_fast's row kernels (fast_quant_kernels.inc) on AVX2 + FMA + F16C: 8 f32 lanes. Compiled with
// AVX2 flags (CMakeLists.txt); fast_quantize.cpp calls them only where the CPU has AVX2 and F16C.
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
  static constexpr int W = 8;
  using F = __m256;
  using U = __m256i;
  template <Src S>
  static F load(const void* p) {
    if constexpr (S == Src::kF32) {
      return _mm256_loadu_ps(static_cast<const float*>(p));
    } else if constexpr (S == Src::kBF16) {
      const __m128i h = _mm_loadu_si128(static_cast<const __m128i*>(p));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    }
  }
  static U bits(F x) { return _mm256_castps_si256(x); }
  static F fl(U x) { return _mm256_castsi256_ps(x); }
  static U set1u(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
  static F set1f(float v) { return _mm256_set1_ps(v); }
  static U and_(U a, U b) { return _mm256_and_si256(a, b); }
  static U or_(U a, U b) { return _mm256_or_si256(a, b); }
  static U xor_(U a, U b) { return _mm256_xor_si256(a, b); }
  static U add(U a, U b) { return _mm256_add_epi32(a, b); }
  static U sub(U a, U b) { return _mm256_sub_epi32(a, b); }
  static U max_u(U a, U b) { return _mm256_max_epu32(a, b); }
  static U max_i(U a, U b) { return _mm256_max_epi32(a, b); }
  template <int N> static U srl(U a) { return _mm256_srli_epi32(a, N); }
  template <int N> static U sll(U a) { return _mm256_slli_epi32(a, N); }
  template <int N> static U sra(U a) { return _mm256_srai_epi32(a, N); }
  static U sllv(U a, int n) { return _mm256_sll_epi32(a, _mm_cvtsi32_si128(n)); }
  static U srlv(U a, int n) { return _mm256_srl_epi32(a, _mm_cvtsi32_si128(n)); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F round_ne(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static U cvtt(F a) { return _mm256_cvttps_epi32(a); }
  static uint32_t ge_mask(F a, F b) { return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_GE_OQ))); }
  static void store_codes(uint8_t* out, U v) {
    const U low = _mm256_and_si256(v, _mm256_set1_epi32(0xFF));
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(low), _mm256_extracti128_si256(low, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(w, w));
  }
  static void store_f(float* out, F v) { _mm256_storeu_ps(out, v); }
  static uint32_t hmax(U v) {
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4E));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xB1));
    return static_cast<uint32_t>(_mm_cvtsi128_si32(m));
  }
};

#include "quant/fast_quant_kernels.inc"

}  // namespace

const Kernels kAvx2Kernels = {"avx2", block_amax_bits_impl, amax_bits_impl, encode_row_impl, pack_fp4_impl,
                              pack_fp6_impl};

}  // namespace qlinear::quant::fast
