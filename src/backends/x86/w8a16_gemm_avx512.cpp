// FP8 (E4M3, MXFP8) weights x BF16 activations on AVX-512 BF16: decode a chunk of weight panels to BF16
// in L1, then vdpbf16ps (2 BF16 products per f32 lane, f32 accumulation) over every m-tile of the batch.
//
// Per thread, for each block of NV = 4 panels (64 output columns):
//   for each K chunk (128 k for 128x128 block scales, else 256 k):
//     decode  NV x chunk FP8 bytes -> BF16 scratch [NV][chunk/2][16][2] (32 KiB at most, stays in L1)
//     for each m-tile of MR <= 6 rows: 24 f32 accumulators, per k pair 4 weight loads from the scratch,
//       MR dword broadcasts of activation pairs, MR * NV vdpbf16ps; the chunk's sums go to an f32 tile
//       C[M][64] (added, or fma'd with the 128x128 block scale)
//   epilogue: y = C * s[n] + bias[n], rounded to the output type.
// The decode is amortized over M rows; at M = 1 it is the only work besides streaming the weights.
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "backends/x86/w8a16_isa.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

constexpr int kMaxMr = kBf16TileRows;
constexpr int kNv = kBf16TilePanels;
constexpr int64_t kChunk = 256;
constexpr int64_t kDirectMaxM = 4;

// E4M3 byte -> BF16 (hi, lo) bytes, 64 codes at once, then interleaved into the two k-pair zmm.
//   normal (exponent field e4 > 0):  hi = s | ((e4 + 120) >> 1),  lo = (e4 & 1) << 7 | m << 4
//   subnormal (e4 = 0): m * 2^-9 normalized, from a vpshufb table over m
struct Decoder {
  __m512i m7 = _mm512_set1_epi8(0x07);
  __m512i m78 = _mm512_set1_epi8(0x78);
  __m512i mf0 = _mm512_set1_epi8(static_cast<char>(0xF0));
  __m512i m80 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i bias60 = _mm512_set1_epi8(60);
  __m512i sub_hi = _mm512_broadcast_i32x4(_mm_setr_epi8(0x00, 0x3B, 0x3B, 0x3B, 0x3C, 0x3C, 0x3C, 0x3C, 0, 0, 0, 0, 0, 0, 0, 0));
  __m512i sub_lo = _mm512_broadcast_i32x4(_mm_setr_epi8(0x00, 0x00, static_cast<char>(0x80), static_cast<char>(0xC0),
                                                        0x00, 0x20, 0x40, 0x60, 0, 0, 0, 0, 0, 0, 0, 0));

  void decode(const uint8_t* src, __m512i& a, __m512i& b) const {
    const __m512i x = _mm512_load_si512(src);
    const __m512i idx = _mm512_and_si512(x, m7);
    const __m512i hs = _mm512_shuffle_epi8(sub_hi, idx);
    const __m512i ls = _mm512_shuffle_epi8(sub_lo, idx);
    const __m512i hn = _mm512_add_epi8(_mm512_and_si512(_mm512_srli_epi16(x, 4), m7), bias60);
    const __m512i ln = _mm512_and_si512(_mm512_slli_epi16(x, 4), mf0);
    const __mmask64 sub = _mm512_testn_epi8_mask(x, m78);
    __m512i hi = _mm512_mask_blend_epi8(sub, hn, hs);
    const __m512i lo = _mm512_mask_blend_epi8(sub, ln, ls);
    hi = _mm512_ternarylogic_epi32(hi, x, m80, 0xF8);  // hi | (x & 0x80): the sign
    a = _mm512_unpacklo_epi8(lo, hi);
    b = _mm512_unpackhi_epi8(lo, hi);
  }

  // E2M1: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (code bit 3 is the sign), as BF16 (hi, lo) bytes.
  __m512i m0f = _mm512_set1_epi8(0x0F);
  __m512i fp4_hi = _mm512_broadcast_i32x4(_mm_setr_epi8(0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40,
                                                        static_cast<char>(0x80), static_cast<char>(0xBF),
                                                        static_cast<char>(0xBF), static_cast<char>(0xBF),
                                                        static_cast<char>(0xC0), static_cast<char>(0xC0),
                                                        static_cast<char>(0xC0), static_cast<char>(0xC0)));
  __m512i fp4_lo = _mm512_broadcast_i32x4(_mm_setr_epi8(0x00, 0x00, static_cast<char>(0x80), static_cast<char>(0xC0),
                                                        0x00, 0x40, static_cast<char>(0x80), static_cast<char>(0xC0),
                                                        0x00, 0x00, static_cast<char>(0x80), static_cast<char>(0xC0),
                                                        0x00, 0x40, static_cast<char>(0x80), static_cast<char>(0xC0)));

  void decode_fp4(const uint8_t* src, __m512i& a, __m512i& b) const {
    const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(src));
    const __m256i lo4 = _mm256_and_si256(x, _mm512_castsi512_si256(m0f));
    const __m256i hi4 = _mm256_and_si256(_mm256_srli_epi16(x, 4), _mm512_castsi512_si256(m0f));
    const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(lo4), hi4, 1);
    const __m512i hi = _mm512_shuffle_epi8(fp4_hi, idx);
    const __m512i lo = _mm512_shuffle_epi8(fp4_lo, idx);
    a = _mm512_unpacklo_epi8(lo, hi);
    b = _mm512_unpackhi_epi8(lo, hi);
  }

  void decode_any(const W8A16Gemm& g, int64_t p, int64_t q, __m512i& a, __m512i& b) const {
    if (g.elem == W8Elem::kE2M1) {
      decode_fp4(g.packed + p * 8 * g.k_pad + q * 32, a, b);
    } else {
      decode(g.packed + p * 16 * g.k_pad + q * 64, a, b);
    }
  }
};

// Word offsets (e - 127) << 7 for the 16 columns of one MX block, duplicated for the two k of a pair.
__m512i mx_offsets(const uint8_t* e16) {
  const __m512i w = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e16))));
  const __m512i dup_idx = _mm512_setr_epi32(0x00000000, 0x00010001, 0x00020002, 0x00030003, 0x00040004, 0x00050005,
                                            0x00060006, 0x00070007, 0x00080008, 0x00090009, 0x000A000A, 0x000B000B,
                                            0x000C000C, 0x000D000D, 0x000E000E, 0x000F000F);
  const __m512i d = _mm512_permutexvar_epi16(dup_idx, w);
  return _mm512_slli_epi16(_mm512_sub_epi16(d, _mm512_set1_epi16(127)), 7);
}

__m512i add_exponent(__m512i w, __m512i off) {
  const __mmask32 nonzero = _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x7FFF));
  return _mm512_mask_add_epi16(w, nonzero, w, off);
}

constexpr int64_t kW8PrefetchBytes = 2048;  // as the AMX decoders' kDecodePrefetchBytes

// Decodes quads [q0, q1) of panels p0 .. p0+nv-1 into scratch[v][pair][32 words].
void decode_chunk(const W8A16Gemm& g, const Decoder& dec, int64_t p0, int nv, int64_t q0, int64_t q1,
                  uint16_t* scratch) {
  const int64_t pairs = 2 * (q1 - q0);
  for (int v = 0; v < nv; ++v) {
    const int64_t p = p0 + v;
    uint16_t* dst = scratch + v * pairs * 32;
    __m512i off = _mm512_setzero_si512();
    // Each panel's weights are read once, sequentially: prefetch kDecodePrefetchBytes ahead, since the
    // hardware prefetchers stop at 4 KiB pages and the decode keeps too few loads in flight to cover DRAM.
    const uint8_t* src = g.elem == W8Elem::kE2M1 ? g.packed + p * 8 * g.k_pad : g.packed + p * 16 * g.k_pad;
    const int64_t quad_bytes = g.elem == W8Elem::kE2M1 ? 32 : 64;
    for (int64_t q = q0; q < q1; ++q) {
      _mm_prefetch(reinterpret_cast<const char*>(src + q * quad_bytes + kW8PrefetchBytes), _MM_HINT_T0);
      if (g.mode == W8ScaleMode::kMx && (q % 8 == 0 || q == q0)) {
        const uint8_t* codes = g.mx_scale + (p * (g.k_pad / 32) + q / 8) * 16;
        _mm_prefetch(reinterpret_cast<const char*>(codes + 256), _MM_HINT_T0);
        off = mx_offsets(codes);
      }
      __m512i a, b;
      dec.decode_any(g, p, q, a, b);
      if (g.mode == W8ScaleMode::kMx) {
        a = add_exponent(a, off);
        b = add_exponent(b, off);
      }
      _mm512_store_si512(dst + (q - q0) * 64, a);
      _mm512_store_si512(dst + (q - q0) * 64 + 32, b);
    }
  }
}

// C[r][v*16..] (+)= sum over the chunk's k pairs; scale[r][v] multiplies the chunk's sums when given.
template <int MR, int NV>
void ukernel(const uint16_t* a, int64_t lda, const uint16_t* w, int64_t pairs, float* c, int64_t ldc, bool first,
             const float* scale) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t pp = 0; pp < pairs; ++pp) {
    __m512i wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = _mm512_load_si512(w + (v * pairs + pp) * 32);
    for (int r = 0; r < MR; ++r) {
      int32_t x2;
      std::memcpy(&x2, a + r * lda + 2 * pp, 4);
      const __m512i av = _mm512_set1_epi32(x2);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)av, (__m512bh)wv[v]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) {
      float* dst = c + r * ldc + v * 16;
      __m512 x = acc[r][v];
      if (scale != nullptr) {
        const __m512 s = _mm512_set1_ps(scale[r * kBf16TilePanels + v]);
        x = first ? _mm512_mul_ps(x, s) : _mm512_fmadd_ps(x, s, _mm512_load_ps(dst));
      } else if (!first) {
        x = _mm512_add_ps(x, _mm512_load_ps(dst));
      }
      _mm512_store_ps(dst, x);
    }
  }
}

template <int MR>
constexpr Bf16PanelUkernel row_of(int nv) {
  return nv == 1 ? ukernel<MR, 1> : nv == 2 ? ukernel<MR, 2> : nv == 3 ? ukernel<MR, 3> : ukernel<MR, 4>;
}

}  // namespace

Bf16PanelUkernel bf16_panel_ukernel(int mr, int nv) {
  switch (mr) {
    case 1: return row_of<1>(nv);
    case 2: return row_of<2>(nv);
    case 3: return row_of<3>(nv);
    case 4: return row_of<4>(nv);
    case 5: return row_of<5>(nv);
    default: return row_of<6>(nv);
  }
}

namespace {

// One quad of NV panels into the accumulators (acc: the first k pair; acc2: the second, or acc too).
// kAddExp: the MX scale added to every decoded weight's exponent first (off: the panels' word offsets).
template <int MR, int NV, bool kSplit, bool kAddExp>
__attribute__((always_inline)) inline void direct_quad(const W8A16Gemm& g, const Decoder& dec, const uint16_t* a,
                                                       int64_t lda, int64_t p0, int64_t q, __m512 (&acc)[MR][NV],
                                                       __m512 (&acc2)[MR][NV], __m512i (&off)[NV]) {
  int32_t x01[MR], x23[MR];
  for (int r = 0; r < MR; ++r) {
    std::memcpy(&x01[r], a + r * lda + 4 * q, 4);
    std::memcpy(&x23[r], a + r * lda + 4 * q + 2, 4);
  }
  for (int v = 0; v < NV; ++v) {
    // As decode_chunk: the weights kW8PrefetchBytes ahead of the decode, which keeps too few loads in flight
    // to cover DRAM on its own once a stream crosses a 4 KiB page.
    const uint8_t* src = g.elem == W8Elem::kE2M1 ? g.packed + (p0 + v) * 8 * g.k_pad + q * 32
                                                  : g.packed + (p0 + v) * 16 * g.k_pad + q * 64;
    _mm_prefetch(reinterpret_cast<const char*>(src + kW8PrefetchBytes), _MM_HINT_T0);
    if constexpr (kAddExp) {
      if (q % 8 == 0) {
        const uint8_t* codes = g.mx_scale + ((p0 + v) * (g.k_pad / 32) + q / 8) * 16;
        _mm_prefetch(reinterpret_cast<const char*>(codes + 256), _MM_HINT_T0);
        off[v] = mx_offsets(codes);
      }
    }
    __m512i w01, w23;
    if (g.elem == W8Elem::kE2M1) {
      dec.decode_fp4(src, w01, w23);
    } else {
      dec.decode(src, w01, w23);
    }
    if constexpr (kAddExp) {
      w01 = add_exponent(w01, off[v]);
      w23 = add_exponent(w23, off[v]);
    }
    for (int r = 0; r < MR; ++r) {
      acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)_mm512_set1_epi32(x01[r]), (__m512bh)w01);
      if constexpr (kSplit) {
        acc2[r][v] = _mm512_dpbf16_ps(acc2[r][v], (__m512bh)_mm512_set1_epi32(x23[r]), (__m512bh)w23);
      } else {
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)_mm512_set1_epi32(x23[r]), (__m512bh)w23);
      }
    }
  }
}

// Small M (decode): no scratch round trip. Each quad of each of the NV panels is decoded in registers and
// multiplied at once; the sums of the whole K stay in registers (per-column and MX scales only: the
// 128x128 mode needs per-block partial sums and takes the scratch path). At one or two rows the two k pairs
// of a quad go to separate accumulators: two chains of dot products per column block instead of one, where
// the chain's latency, not the decode, set the pace. MXFP4: each 32-k group's sums (of the codes' values)
// are multiplied by the group's E8M0 scale in f32 (exact: a power of two) and added to the accumulators,
// where adding the scale to every decoded weight's exponent cost four instructions per quad and panel
// (2-core EPYC Zen 4, 4096 x 4096 at M = 1: 0.39 -> 0.28 ms); MXFP8 keeps the exponent add (the group sums
// measured slower there: 0.56 -> 0.62 ms).
template <int MR, int NV>
void ukernel_direct(const W8A16Gemm& g, const Decoder& dec, const uint16_t* a, int64_t lda, int64_t p0, float* c,
                    int64_t ldc) {
  constexpr bool kSplit = MR <= 2;
  __m512 acc[MR][NV], acc2[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = acc2[r][v] = _mm512_setzero_ps();
  const int64_t quads = g.k_pad / 4;
  __m512i off[NV];
  for (int v = 0; v < NV; ++v) off[v] = _mm512_setzero_si512();
  if (g.mode != W8ScaleMode::kMx) {
    for (int64_t q = 0; q < quads; ++q) direct_quad<MR, NV, kSplit, false>(g, dec, a, lda, p0, q, acc, acc2, off);
  } else if (g.elem != W8Elem::kE2M1) {
    for (int64_t q = 0; q < quads; ++q) direct_quad<MR, NV, kSplit, true>(g, dec, a, lda, p0, q, acc, acc2, off);
  } else {
    const int64_t groups = g.k_pad / 32;
    for (int64_t grp = 0; grp < groups; ++grp) {
      __m512 s[MR][NV], s2[MR][NV];
      for (int r = 0; r < MR; ++r)
        for (int v = 0; v < NV; ++v) s[r][v] = s2[r][v] = _mm512_setzero_ps();
      for (int64_t q = 8 * grp; q < 8 * grp + 8; ++q) {
        direct_quad<MR, NV, kSplit, false>(g, dec, a, lda, p0, q, s, s2, off);
      }
      for (int v = 0; v < NV; ++v) {
        // The 16 columns' E8M0 bytes as f32 powers of two (byte 0, 2^-127, as zero: below f32's normals).
        const uint8_t* codes = g.mx_scale + ((p0 + v) * groups + grp) * 16;
        _mm_prefetch(reinterpret_cast<const char*>(codes + 256), _MM_HINT_T0);
        const __m512 sv = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes))), 23));
        for (int r = 0; r < MR; ++r) {
          acc[r][v] = _mm512_fmadd_ps(s[r][v], sv, acc[r][v]);
          if constexpr (kSplit) acc2[r][v] = _mm512_fmadd_ps(s2[r][v], sv, acc2[r][v]);
        }
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) {
      _mm512_store_ps(c + r * ldc + v * 16, kSplit ? _mm512_add_ps(acc[r][v], acc2[r][v]) : acc[r][v]);
    }
  }
}

using DirectUkernel = void (*)(const W8A16Gemm&, const Decoder&, const uint16_t*, int64_t, int64_t, float*, int64_t);

DirectUkernel pick_direct(int mr, int nv) {
  static const DirectUkernel table[4][2] = {{ukernel_direct<1, 1>, ukernel_direct<1, 2>},
                                            {ukernel_direct<2, 1>, ukernel_direct<2, 2>},
                                            {ukernel_direct<3, 1>, ukernel_direct<3, 2>},
                                            {ukernel_direct<4, 1>, ukernel_direct<4, 2>}};
  return table[mr - 1][nv - 1];
}

void store_row(const W8A16Gemm& g, int64_t m, int64_t n0, int64_t cols, const float* c, const float* col_scale) {
  for (int64_t j = 0; j < cols; j += 16) {
    const int64_t len = cols - j < 16 ? cols - j : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << len) - 1);
    __m512 y = _mm512_load_ps(c + j);
    const __m512 b = g.bias ? _mm512_maskz_loadu_ps(mask, g.bias + n0 + j) : _mm512_setzero_ps();
    y = col_scale ? _mm512_fmadd_ps(y, _mm512_maskz_loadu_ps(mask, col_scale + n0 + j), b) : _mm512_add_ps(y, b);
    const int64_t o = m * g.n + n0 + j;
    switch (g.out_kind) {
      case FloatKind::kF32: _mm512_mask_storeu_ps(static_cast<float*>(g.out) + o, mask, y); break;
      case FloatKind::kBF16:
        _mm256_mask_storeu_epi16(static_cast<uint16_t*>(g.out) + o, mask, (__m256i)_mm512_cvtneps_pbh(y));
        break;
      case FloatKind::kF16:
        _mm256_mask_storeu_epi16(static_cast<uint16_t*>(g.out) + o, mask,
                                 _mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        break;
    }
  }
}

struct Buffers {
  uint16_t* scratch = nullptr;  // [kNv][kChunk/2][32]
  float* c = nullptr;           // [rows][kNv * 16]
};

void run_range(const W8A16Gemm& g, const Buffers& buf, int64_t m_begin, int64_t m_end, int64_t b_begin,
               int64_t b_end) {
  const Decoder dec;
  const int64_t panels = g.n_pad / 16, quads = g.k_pad / 4;
  const int64_t chunk_quads = (g.mode == W8ScaleMode::kBlock128 ? 128 : kChunk) / 4;
  const int64_t ldc = kNv * 16;
  for (int64_t blk = b_begin; blk < b_end; ++blk) {
    const int64_t p0 = blk * kNv;
    const int nv = static_cast<int>(panels - p0 < kNv ? panels - p0 : kNv);
    const int64_t n0 = p0 * 16;
    const int64_t cols = g.n - n0 < nv * 16 ? g.n - n0 : nv * 16;
    const int64_t rows = m_end - m_begin;
    if (rows <= kDirectMaxM && g.mode != W8ScaleMode::kBlock128) {
      for (int v = 0; v < nv; v += 2) {
        pick_direct(static_cast<int>(rows), nv - v < 2 ? 1 : 2)(g, dec, g.act + m_begin * g.lda, g.lda, p0 + v,
                                                                buf.c + v * 16, ldc);
      }
    } else {
    for (int64_t q0 = 0; q0 < quads; q0 += chunk_quads) {
      const int64_t q1 = q0 + chunk_quads < quads ? q0 + chunk_quads : quads;
      decode_chunk(g, dec, p0, nv, q0, q1, buf.scratch);
      float scales[kMaxMr * kNv];  // [row][panel]: every row of a panel has its block's scale
      const float* scale = nullptr;
      if (g.mode == W8ScaleMode::kBlock128) {
        for (int v = 0; v < nv; ++v) {
          for (int r = 0; r < kMaxMr; ++r) scales[r * kNv + v] = g.block_scale[(p0 + v) * g.block_cols + q0 * 4 / 128];
        }
        scale = scales;
      }
      for (int64_t m0 = m_begin; m0 < m_end; m0 += kMaxMr) {
        const int mr = static_cast<int>(m_end - m0 < kMaxMr ? m_end - m0 : kMaxMr);
        bf16_panel_ukernel(mr, nv)(g.act + m0 * g.lda + q0 * 4, g.lda, buf.scratch, 2 * (q1 - q0), buf.c + (m0 - m_begin) * ldc,
                     ldc, q0 == 0, scale);
      }
    }
    }
    const float* col_scale = g.mode == W8ScaleMode::kPerColumn ? g.col_scale : nullptr;
    for (int64_t m = m_begin; m < m_end; ++m) store_row(g, m, n0, cols, buf.c + (m - m_begin) * ldc, col_scale);
  }
}

}  // namespace

void bf16_tile_parallel(int64_t m, int64_t blocks, int nt, Bf16TileRange run, void* ctx) {
  // Items: column blocks (each streams its weights once), or, with few columns and many rows, row ranges
  // of whole m-tiles.
  const bool by_columns = blocks >= 2 * nt || m < 2 * kMaxMr * nt;
  const int64_t tiles = (m + kMaxMr - 1) / kMaxMr, row_items = 4 * static_cast<int64_t>(nt);
  threads::parallel_for(by_columns ? blocks : row_items, nt, [&](int64_t item) {
    int64_t m0 = 0, m1 = m, b0 = item, b1 = item + 1;
    if (!by_columns) {
      b0 = 0;
      b1 = blocks;
      m0 = tiles * item / row_items * kMaxMr;
      m1 = tiles * (item + 1) / row_items * kMaxMr;
      m1 = m1 < m ? m1 : m;
    }
    if (m1 > m0) run(ctx, m0, m1, b0, b1);
  });
}

void w8a16_gemm_avx512bf16(const W8A16Gemm& g) {
  const int64_t blocks = (g.n_pad / 16 + kNv - 1) / kNv;
  // Scratch and C tiles are the claiming thread's (threads::scratch).
  bf16_tile_parallel(g.m, blocks, g.threads, [](void* ctx, int64_t m0, int64_t m1, int64_t b0, int64_t b1) {
    const W8A16Gemm& g = *static_cast<const W8A16Gemm*>(ctx);
    Buffers buf;
    buf.scratch = static_cast<uint16_t*>(threads::scratch(0, kNv * kChunk / 2 * 64));
    buf.c = static_cast<float*>(threads::scratch(1, (m1 - m0) * kNv * 16 * 4));
    run_range(g, buf, m0, m1, b0, b1);
  }, const_cast<W8A16Gemm*>(&g));
}

}  // namespace qlinear::x86
