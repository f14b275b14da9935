// x86_avx2_int8 for M >= kInt8TiledMinM: a register-tiled GEMM on AVX2 vpmaddwd (s16 x s16 -> exact s32 sum
// of pairs), for CPUs without AVX-512 VNNI.
//
// Why vpmaddwd rather than vpmaddubsw: vpmaddubsw's s16 sum of two u8 x s8 products saturates for codes near
// +-127 (2 * 255 * 127 > 32767), so FBGEMM quantizes activations to 7 bits to avoid it; qlinear's codes are
// the reference quantizer's full 8 bits, and the sums must be exact. vpmaddwd does 16 exact MACs per
// instruction, as many as vpmaddubsw followed by the vpmaddwd that widens its s16 sums.
//
// Per work item (up to 8 panels of 16 output columns, a range of rows), for each K chunk of kKc, each panel:
//   widen the panel's int8 codes (VNNI panels, int8_isa.hpp) once into an L1 buffer of s16 k-pairs:
//       wbuf[kp][h][2j + t] = W[16p + 8h + j][k0 + 2kp + t]      (h: columns 0-7 / 8-15, 32 bytes each)
//   then every row tile of MR <= 6 rows runs over it: per k pair, 2 weight vectors, MR 32-bit broadcasts of
//   the rows' s16 activation pairs (pre-widened once per call: act16[m][k_pad]), 2 * MR vpmaddwd + vpaddd,
//   accumulators acc[MR][2] (12 ymm at MR = 6). The chunk's sums are added to an int32 C tile [rows][16].
// The int32 sums are the same exact integers as the small-M kernel's, so outputs are bit-identical to it.
#include <immintrin.h>

#include <cstring>

#include "backends/x86/int8_isa.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

constexpr int kMr = 6;
constexpr int64_t kKc = 256;  // K per widened chunk: 16 KiB of s16 weights per panel (L1)

int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Groups [g0, g0 + groups) of panel `panel` (64 bytes = 16 columns x 4 k each) as s16 k-pairs in wbuf.
void widen_chunk(const int8_t* panel, int64_t g0, int64_t groups, int16_t* wbuf) {
  // Within a 128-bit lane (4 columns x 4 k, byte 4c + t): k-pair 0 of the 4 columns to the low 8 bytes,
  // k-pair 1 to the high 8 bytes.
  const __m256i pairs = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  for (int64_t g = 0; g < groups; ++g) {
    const int8_t* src = panel + (g0 + g) * 64;
    int16_t* dst = wbuf + g * 64;  // k pairs 2g, 2g + 1: [pair][h][16 s16]
    for (int h = 0; h < 2; ++h) {
      const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(src + 32 * h));  // columns 8h..8h+7
      // lanes (columns 8h..+3, 8h+4..+7), each [pair 0 | pair 1]; 0xD8 gathers pair 0 low, pair 1 high.
      const __m256i y = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(x, pairs), 0xD8);
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 16 * h), _mm256_cvtepi8_epi16(_mm256_castsi256_si128(y)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 32 + 16 * h),
                         _mm256_cvtepi8_epi16(_mm256_extracti128_si256(y, 1)));
    }
  }
}

// c[r][0..15] += sum over k pairs of a16[r][2kp..2kp+1] . wbuf[kp], MR rows (any MR; the 6- and 4-row
// tiles, which do almost all the work, are written out below).
template <int MR>
void ukernel(const int16_t* a, int64_t lda, const int16_t* wbuf, int64_t kpairs, int32_t* c) {
  __m256i acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  for (int64_t kp = 0; kp < kpairs; ++kp) {
    const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wbuf + kp * 32));
    const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(wbuf + kp * 32 + 16));
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * kp, 4);
      const __m256i av = _mm256_set1_epi32(pair);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(av, w0));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(av, w1));
    }
  }
  for (int r = 0; r < MR; ++r) {
    __m256i* cr = reinterpret_cast<__m256i*>(c + r * 16);
    _mm256_store_si256(cr, _mm256_add_epi32(_mm256_load_si256(cr), acc[r][0]));
    _mm256_store_si256(cr + 1, _mm256_add_epi32(_mm256_load_si256(cr + 1), acc[r][1]));
  }
}

// The 6- and 4-row tiles in inline assembly: GCC 12 spills or copies the intrinsic version's accumulators
// every iteration (12 accumulators + 2 weights + a broadcast + a product are exactly the 16 ymm registers),
// which cost half the speed. Per k pair: 2 weight loads, per row a 32-bit broadcast, 2 vpmaddwd, 2 vpaddd.
// Accumulators in the asm operands; ymm12/13 weights, ymm14 the broadcast, ymm15 the product.
#define QL_INT8_ROW(addr, A, B)            \
  "vpbroadcastd " addr ", %%ymm14\n\t"     \
  "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n\t" \
  "vpaddd %%ymm15, %" A ", %" A "\n\t"     \
  "vpmaddwd %%ymm13, %%ymm14, %%ymm14\n\t" \
  "vpaddd %%ymm14, %" B ", %" B "\n\t"

void add_tile(const __m256i* acc, int n, int32_t* c) {
  for (int i = 0; i < n; ++i) {
    __m256i* cr = reinterpret_cast<__m256i*>(c) + i;
    _mm256_store_si256(cr, _mm256_add_epi32(_mm256_load_si256(cr), acc[i]));
  }
}

void ukernel6(const int16_t* a, int64_t lda, const int16_t* wbuf, int64_t kpairs, int32_t* c) {
  __m256i c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11;
  c0 = c1 = c2 = c3 = c4 = c5 = c6 = c7 = c8 = c9 = c10 = c11 = _mm256_setzero_si256();
  const int64_t ldb = lda * 2;  // bytes
  const char* p0 = reinterpret_cast<const char*>(a);
  const char* w = reinterpret_cast<const char*>(wbuf);
  const char* wend = w + kpairs * 64;
  if (kpairs > 0) {
    asm volatile(  // rows 0-2 at p0 + {0, 1, 2} ld, rows 3-5 at r11 = p0 + 3 ld + {0, 1, 2} ld
        "lea (%[p0],%[ld],2), %%r11\n\t"
        "add %[ld], %%r11\n\t"
        "1:\n\t"
        "vmovdqa (%[w]), %%ymm12\n\t"
        "vmovdqa 32(%[w]), %%ymm13\n\t"
        QL_INT8_ROW("(%[p0])", "0", "1")
        QL_INT8_ROW("(%[p0],%[ld])", "2", "3")
        QL_INT8_ROW("(%[p0],%[ld],2)", "4", "5")
        QL_INT8_ROW("(%%r11)", "6", "7")
        QL_INT8_ROW("(%%r11,%[ld])", "8", "9")
        QL_INT8_ROW("(%%r11,%[ld],2)", "10", "11")
        "add $64, %[w]\n\t"
        "add $4, %[p0]\n\t"
        "add $4, %%r11\n\t"
        "cmp %[wend], %[w]\n\t"
        "jb 1b\n\t"
        : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5), "+x"(c6), "+x"(c7), "+x"(c8), "+x"(c9),
          "+x"(c10), "+x"(c11), [w] "+r"(w), [p0] "+r"(p0)
        : [ld] "r"(ldb), [wend] "r"(wend)
        : "xmm12", "xmm13", "xmm14", "xmm15", "r11", "cc", "memory");
  }
  const __m256i acc[12] = {c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11};
  add_tile(acc, 12, c);
}

void ukernel4(const int16_t* a, int64_t lda, const int16_t* wbuf, int64_t kpairs, int32_t* c) {
  __m256i c0, c1, c2, c3, c4, c5, c6, c7;
  c0 = c1 = c2 = c3 = c4 = c5 = c6 = c7 = _mm256_setzero_si256();
  const int64_t ldb = lda * 2;
  const char* p0 = reinterpret_cast<const char*>(a);
  const char* w = reinterpret_cast<const char*>(wbuf);
  const char* wend = w + kpairs * 64;
  if (kpairs > 0) {
    asm volatile(  // rows 0-2 at p0 + {0, 1, 2} ld, row 3 at r11 = p0 + 3 ld
        "lea (%[p0],%[ld],2), %%r11\n\t"
        "add %[ld], %%r11\n\t"
        "1:\n\t"
        "vmovdqa (%[w]), %%ymm12\n\t"
        "vmovdqa 32(%[w]), %%ymm13\n\t"
        QL_INT8_ROW("(%[p0])", "0", "1")
        QL_INT8_ROW("(%[p0],%[ld])", "2", "3")
        QL_INT8_ROW("(%[p0],%[ld],2)", "4", "5")
        QL_INT8_ROW("(%%r11)", "6", "7")
        "add $64, %[w]\n\t"
        "add $4, %[p0]\n\t"
        "add $4, %%r11\n\t"
        "cmp %[wend], %[w]\n\t"
        "jb 1b\n\t"
        : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5), "+x"(c6), "+x"(c7), [w] "+r"(w),
          [p0] "+r"(p0)
        : [ld] "r"(ldb), [wend] "r"(wend)
        : "xmm12", "xmm13", "xmm14", "xmm15", "r11", "cc", "memory");
  }
  const __m256i acc[8] = {c0, c1, c2, c3, c4, c5, c6, c7};
  add_tile(acc, 8, c);
}
#undef QL_INT8_ROW

void run_rows(int mr, const int16_t* a, int64_t lda, const int16_t* wbuf, int64_t kpairs, int32_t* c) {
  switch (mr) {
    case 6: ukernel6(a, lda, wbuf, kpairs, c); break;
    case 5: ukernel<5>(a, lda, wbuf, kpairs, c); break;
    case 4: ukernel4(a, lda, wbuf, kpairs, c); break;
    case 3: ukernel<3>(a, lda, wbuf, kpairs, c); break;
    case 2: ukernel<2>(a, lda, wbuf, kpairs, c); break;
    default: ukernel<1>(a, lda, wbuf, kpairs, c); break;
  }
}

// Rows of the next tile when `rest` rows remain: 6, but 4 + 4 for 8 and 4 + 3 for 7 (the written-out tiles).
int tile_rows(int64_t rest) { return rest >= 9 || rest == 6 ? 6 : rest >= 7 ? 4 : static_cast<int>(rest); }

// Rows [m0, m1) of panels [p0, p1): K chunk outer, panels inner, so the rows' activation chunk (rows x kKc
// s16: 64 KiB at 128 rows) stays in L2 across the group's panels instead of streaming every row from L3 once
// per panel (which cost a 4096 x 14336 layer at M = 128 a third of its speed). C tiles c[panel][rows][16].
void run_item(const Int8Gemm& g, const int16_t* act16, int64_t p0, int64_t p1, int64_t m0, int64_t m1) {
  const int64_t rows = m1 - m0, panels = p1 - p0;
  int16_t* wbuf = static_cast<int16_t*>(threads::scratch(0, kKc * 16 * 2 + panels * rows * 16 * 4));
  int32_t* c = reinterpret_cast<int32_t*>(wbuf + kKc * 16);
  std::memset(c, 0, static_cast<size_t>(panels * rows * 16) * sizeof(int32_t));
  for (int64_t k0 = 0; k0 < g.k_pad; k0 += kKc) {
    const int64_t len = min64(kKc, g.k_pad - k0);  // a multiple of 4
    for (int64_t p = p0; p < p1; ++p) {
      widen_chunk(g.packed + p * 16 * g.k_pad, k0 / 4, len / 4, wbuf);
      int32_t* cp = c + (p - p0) * rows * 16;
      for (int64_t r = m0; r < m1;) {
        const int mr = tile_rows(m1 - r);
        run_rows(mr, act16 + r * g.k_pad + k0, g.k_pad, wbuf, len / 2, cp + (r - m0) * 16);
        r += mr;
      }
    }
  }
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n0 = p * 16;
    int8_epilogue_avx2(g.epi, c + (p - p0) * rows * 16, 16, m0, rows, n0, min64(16, g.epi.n - n0));
  }
}

}  // namespace

void int8_gemm_avx2_tiled(const Int8Gemm& g) {
  // The activation codes widened to s16 once (a 32-bit broadcast then carries a k pair).
  const int64_t elems = g.m * g.k_pad;
  int16_t* act16 = static_cast<int16_t*>(threads::scratch(1, elems * 2));
  const int8_t* codes = reinterpret_cast<const int8_t*>(g.act);
  int64_t i = 0;
  for (; i + 16 <= elems; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(act16 + i),
                        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i))));
  }
  for (; i < elems; ++i) act16[i] = codes[i];

  const int64_t panels = g.n_pad / 16;
  const int nt = g.threads;
  // Items: groups of up to kPanelGroup panels (C tiles up to 64 KiB at 128 rows), at least 4 items per thread
  // when there are panels for it; rows split into blocks (multiples of kMr) only when the panels alone cannot
  // feed every thread.
  constexpr int64_t kPanelGroup = 8;
  const int64_t fit = min64(kPanelGroup, panels / (4 * nt));
  const int64_t per_group = fit > 1 ? fit : 1;
  const int64_t groups = (panels + per_group - 1) / per_group;
  int64_t mblocks = 1;
  if (groups < 2 * nt) mblocks = min64((2 * nt + groups - 1) / groups, (g.m + kMr - 1) / kMr);
  const int64_t mb = ((g.m + mblocks - 1) / mblocks + kMr - 1) / kMr * kMr;
  mblocks = (g.m + mb - 1) / mb;
  threads::parallel_for(groups * mblocks, nt, [&](int64_t item) {
    const int64_t pg = item / mblocks, m0 = (item % mblocks) * mb;
    const int64_t p0 = pg * per_group;
    if (m0 < g.m) run_item(g, act16, p0, min64(panels, p0 + per_group), m0, min64(g.m, m0 + mb));
  });
}

}  // namespace qlinear::x86
