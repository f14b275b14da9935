// x86_avx512vnni_int8: the INT8 GEMM on AVX-512 VNNI (vpdpbusd: u8 x s8 -> s32, 64 MACs per instruction).
//
// Register tile: MR rows x NV panels (16 columns each), MR * NV int32 accumulators, MR <= 6, NV <= 4:
//   per K group of 4:  NV weight loads (one zmm per panel), MR dword broadcasts of activations,
//                      MR * NV vpdpbusd        (6 x 4: 24 vpdpbusd for 10 loads)
// Blocking: threads split the N panels (blocks of 4 panels = 64 columns); inside a block the m-tiles run
// over all of K with the weight block (64 x K bytes) hot in L1/L2, so each weight byte comes from DRAM
// once per call. Small N with many rows splits rows across threads instead.
// Accumulation is exact int32 (see int8_isa.hpp); the epilogue (scales, zero point, bias, rounding to the
// output type) runs on each finished tile while it is in L1.
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "backends/x86/int8_isa.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

constexpr int kMaxMr = 6;
constexpr int kMaxNv = 4;

// Bytes ahead of the current weight group to prefetch (0: none). Small M streams weights from DRAM once.
int prefetch_distance(int64_t m) {
  static const int env = [] {
    const char* s = std::getenv("QLINEAR_X86_PREFETCH");
    return s ? std::atoi(s) : -1;
  }();
  if (env >= 0) return env;
  (void)m;
  return 0;  // measured: hardware prefetch alone streams best at M = 1 (1024: -10%)
}

// acc += u8 a x s8 w (vpdpbusd) in place. The intrinsic leaves gcc 12 copying each accumulator into a
// scratch register and back (and spilling some) on every K group; the accumulator as a read-write asm
// operand keeps it in its register.
inline __m512i dpbusd(__m512i acc, __m512i a, __m512i w) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(w));
  return acc;
}

// PF: prefetch `pf` bytes ahead. A template parameter, not a branch in the loop: with the branch, gcc 12
// kept the 24 accumulators of the 6 x 4 tile in memory and stored them all on every K group (18 zmm stores
// per 24 vpdpbusd), which bounded the tile at about 60% of the VNNI rate.
template <int MR, int NV, bool PF>
void ukernel_pf(const uint8_t* a, int64_t lda, const int8_t* w, int64_t pstride, int64_t groups, int pf,
                int32_t* c, int64_t ldc) {
  __m512i acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_si512();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = _mm512_load_si512(w + v * pstride + g * 64);
    if constexpr (PF) {
      for (int v = 0; v < NV; ++v) _mm_prefetch(reinterpret_cast<const char*>(w + v * pstride + g * 64 + pf), _MM_HINT_T0);
    }
    for (int r = 0; r < MR; ++r) {
      int32_t a4;
      std::memcpy(&a4, a + r * lda + g * 4, 4);
      const __m512i av = _mm512_set1_epi32(a4);
      for (int v = 0; v < NV; ++v) acc[r][v] = dpbusd(acc[r][v], av, wv[v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) _mm512_store_si512(c + r * ldc + v * 16, acc[r][v]);
}

template <int MR, int NV>
void ukernel(const uint8_t* a, int64_t lda, const int8_t* w, int64_t pstride, int64_t groups, int pf, int32_t* c,
             int64_t ldc) {
  if (pf != 0) {
    ukernel_pf<MR, NV, true>(a, lda, w, pstride, groups, pf, c, ldc);
  } else {
    ukernel_pf<MR, NV, false>(a, lda, w, pstride, groups, pf, c, ldc);
  }
}

using Ukernel = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int64_t, int, int32_t*, int64_t);

template <int MR>
constexpr Ukernel row_of(int nv) {
  return nv == 1 ? ukernel<MR, 1> : nv == 2 ? ukernel<MR, 2> : nv == 3 ? ukernel<MR, 3> : ukernel<MR, 4>;
}

Ukernel pick(int mr, int nv) {
  switch (mr) {
    case 1: return row_of<1>(nv);
    case 2: return row_of<2>(nv);
    case 3: return row_of<3>(nv);
    case 4: return row_of<4>(nv);
    case 5: return row_of<5>(nv);
    default: return row_of<6>(nv);
  }
}

// Rows [m_begin, m_end) x column blocks [b_begin, b_end) (a block is up to kMaxNv panels).
void run_range(const Int8Gemm& g, int64_t m_begin, int64_t m_end, int64_t b_begin, int64_t b_end, int pf) {
  alignas(64) int32_t tile[kMaxMr * kMaxNv * 16];
  const int64_t panels = g.n_pad / 16, groups = g.k_pad / 4, pstride = 16 * g.k_pad;
  for (int64_t b = b_begin; b < b_end; ++b) {
    const int nv = static_cast<int>(panels - b * kMaxNv < kMaxNv ? panels - b * kMaxNv : kMaxNv);
    const int8_t* w = g.packed + b * kMaxNv * pstride;
    const int64_t n0 = b * kMaxNv * 16;
    const int64_t cols = g.epi.n - n0 < nv * 16 ? g.epi.n - n0 : nv * 16;
    for (int64_t m0 = m_begin; m0 < m_end; m0 += kMaxMr) {
      const int mr = static_cast<int>(m_end - m0 < kMaxMr ? m_end - m0 : kMaxMr);
      pick(mr, nv)(g.act + m0 * g.k_pad, g.k_pad, w, pstride, groups, pf, tile, kMaxNv * 16);
      int8_epilogue_avx2(g.epi, tile, kMaxNv * 16, m0, mr, n0, cols);
    }
  }
}

}  // namespace

void int8_gemm_avx512vnni(const Int8Gemm& g) {
  const int64_t panels = g.n_pad / 16;
  const int64_t blocks = (panels + kMaxNv - 1) / kMaxNv;
  const int pf = prefetch_distance(g.m);
  const int nt = g.threads;
  if (blocks >= 2 * nt || g.m < 2 * kMaxMr * nt) {
    // An item per column block: every block's weights are streamed once, by whichever thread claims it.
    threads::parallel_for(blocks, nt, [&](int64_t b) { run_range(g, 0, g.m, b, b + 1, pf); });
  } else {
    // Few columns, many rows: items of whole m-tiles.
    const int64_t tiles = (g.m + kMaxMr - 1) / kMaxMr, items = 4 * static_cast<int64_t>(nt);
    threads::parallel_for(items, nt, [&](int64_t i) {
      const int64_t r0 = tiles * i / items * kMaxMr, r1 = tiles * (i + 1) / items * kMaxMr;
      if (r0 < g.m) run_range(g, r0, r1 < g.m ? r1 : g.m, 0, blocks, pf);
    });
  }
}

}  // namespace qlinear::x86
