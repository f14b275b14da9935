#pragma once
// Activation loads shared by the AVX2 translation units (include only from *_avx2.cpp: the functions use
// AVX2/F16C instructions). BF16 and F16 widen to f32 exactly.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/x86/int8_isa.hpp"  // FloatKind

namespace qlinear::x86::avx2 {

inline float bf16_bits_to_f32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Element i of an activation row.
inline float load1(const void* x, FloatKind kind, int64_t i) {
  switch (kind) {
    case FloatKind::kF32: return static_cast<const float*>(x)[i];
    case FloatKind::kBF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(x)[i]);
    case FloatKind::kF16: return _cvtsh_ss(static_cast<const uint16_t*>(x)[i]);
  }
  return 0.0f;
}

// 8 elements starting at i (all in range).
inline __m256 load8(const void* x, FloatKind kind, int64_t i) {
  switch (kind) {
    case FloatKind::kF32: return _mm256_loadu_ps(static_cast<const float*>(x) + i);
    case FloatKind::kBF16: {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(x) + i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case FloatKind::kF16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(x) + i)));
  }
  return _mm256_setzero_ps();
}

}  // namespace qlinear::x86::avx2
