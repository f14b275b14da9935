// x86_avx2_int8: the INT8 GEMM on AVX2, for machines without AVX-512 VNNI.
//
// Exact and simple: vpmaddubsw (u8 x s8 with a saturating s16 sum of pairs) would overflow for
// activations and weights near -128, so both operands are widened to s16 and multiplied with vpmaddwd
// (s16 x s16 -> s32 sum of pairs, exact). It reads the same VNNI panels as the AVX-512 kernel:
//   one 16-byte quarter of a 64-byte group = 4 columns x 4 k  -> vpmovsxbw -> 16 s16
//   activations a[4g..4g+3] as 4 s16, broadcast to every 64-bit chunk
//   vpmaddwd -> lanes (c0: k0k1, c0: k2k3, c1: k0k1, ...), folded pairwise (vphaddd) after the K loop.
// Register tile: MR (<= 2) rows x 16 columns = 8 accumulators.
#include <immintrin.h>

#include <cstring>

#include "backends/x86/int8_isa.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

constexpr int kMaxMr = 2;

template <int MR>
void ukernel(const uint8_t* a, int64_t lda, const int8_t* w, int64_t groups, int32_t* c) {
  __m256i acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int q = 0; q < 4; ++q) acc[r][q] = _mm256_setzero_si256();
  for (int64_t g = 0; g < groups; ++g) {
    __m256i wv[4];
    for (int q = 0; q < 4; ++q) {
      wv[q] = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(w + g * 64 + q * 16)));
    }
    for (int r = 0; r < MR; ++r) {
      int32_t a4;
      std::memcpy(&a4, a + r * lda + g * 4, 4);
      const __m256i av = _mm256_broadcastq_epi64(_mm_cvtepi8_epi16(_mm_cvtsi32_si128(a4)));
      for (int q = 0; q < 4; ++q) acc[r][q] = _mm256_add_epi32(acc[r][q], _mm256_madd_epi16(wv[q], av));
    }
  }
  for (int r = 0; r < MR; ++r) {
    // hadd gives (c0 c1 c4 c5 | c2 c3 c6 c7); 0xD8 puts the 64-bit chunks back in column order.
    const __m256i lo = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[r][0], acc[r][1]), 0xD8);
    const __m256i hi = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[r][2], acc[r][3]), 0xD8);
    _mm256_store_si256(reinterpret_cast<__m256i*>(c + r * 16), lo);
    _mm256_store_si256(reinterpret_cast<__m256i*>(c + r * 16 + 8), hi);
  }
}

void run_range(const Int8Gemm& g, int64_t m_begin, int64_t m_end, int64_t p_begin, int64_t p_end) {
  alignas(32) int32_t tile[kMaxMr * 16];
  const int64_t groups = g.k_pad / 4, pstride = 16 * g.k_pad;
  for (int64_t p = p_begin; p < p_end; ++p) {
    const int8_t* w = g.packed + p * pstride;
    const int64_t n0 = p * 16;
    const int64_t cols = g.epi.n - n0 < 16 ? g.epi.n - n0 : 16;
    for (int64_t m0 = m_begin; m0 < m_end; m0 += kMaxMr) {
      const int64_t mr = m_end - m0 < kMaxMr ? m_end - m0 : kMaxMr;
      if (mr == 2) {
        ukernel<2>(g.act + m0 * g.k_pad, g.k_pad, w, groups, tile);
      } else {
        ukernel<1>(g.act + m0 * g.k_pad, g.k_pad, w, groups, tile);
      }
      int8_epilogue_avx2(g.epi, tile, 16, m0, mr, n0, cols);
    }
  }
}

}  // namespace

void int8_gemm_avx2(const Int8Gemm& g) {
  if (g.m >= kInt8TiledMinM) return int8_gemm_avx2_tiled(g);
  const int64_t panels = g.n_pad / 16;
  const int nt = g.threads;
  if (panels >= 2 * nt || g.m < 2 * kMaxMr * nt) {  // an item per panel: each streams its weights once
    threads::parallel_for(panels, nt, [&](int64_t p) { run_range(g, 0, g.m, p, p + 1); });
  } else {  // few panels, many rows: items of whole row tiles
    const int64_t tiles = (g.m + kMaxMr - 1) / kMaxMr, items = 4 * static_cast<int64_t>(nt);
    threads::parallel_for(items, nt, [&](int64_t i) {
      const int64_t r0 = tiles * i / items * kMaxMr, r1 = tiles * (i + 1) / items * kMaxMr;
      if (r0 < g.m) run_range(g, r0, r1 < g.m ? r1 : g.m, 0, panels);
    });
  }
}

}  // namespace qlinear::x86
