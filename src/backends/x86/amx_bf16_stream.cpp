// The AMX-BF16 kernels' route below their tile range (g.m < kAmxBf16MinM, amx_isa.hpp): weight streaming on AVX-512
// BF16 + VBMI, no tiles. Compiled with the AMX translation units' flags for VBMI (it issues no AMX instruction),
// reached only through the AMX kernels and their AVX-512 BF16 variants for CPUs without AMX (fp_gemm_avx512bf16.cpp;
// both require VBMI). Every weight layout of the tile path, decoded by the same QuadDecoder (amx_bf16_decode.hpp:
// vpermb / vpermw / vpermi2b lookups, 2 BF16 rows per 64 codes), so the decoded words are the tile path's, bit for
// bit (NVFP4: its codes, the block scales applied per block).
//
// Per item of kPanelsPerItem panels (16 columns each), kNv panels side by side over the whole K:
//   per quad (4 k) of each panel: decode -> rows a (k pair 2q) and b (2q + 1), then
//     s[v] = dp(s[v], (x[4q], x[4q + 1]), a);  s[v] = dp(s[v], (x[4q + 2], x[4q + 3]), b)
//   per-column scales: s is the whole-K accumulator (the AVX-512 BF16 kernel's order at M = 1, so FP8
//   weight-only rows are its bits). MX / NVFP4 / 128x128: s sums one block (32 / 16 / 128 k) of unscaled codes,
//   then acc = fma(s, scale, acc): one FMA per block instead of the tiles' exponent add on every decoded word (a
//   test and a masked add per 32 words: 17-20% of the stream's time at M = 1 for MXFP8 / MXFP6 / MXFP4;
//   NVFP4's per-16 E4M3 scale made its stream slower than the AVX2 code before). The kNv independent
//   chains overlap vdpbf16ps's latency. Each panel's weights are read sequentially, prefetched
//   kDecodePrefetchBytes ahead (amx_bf16_decode.hpp says why), one prefetch per 64-byte line, and past a panel's
//   end into the next group's panels, as amx_int_stream.cpp does. On the 2-core Xeon, M = 1, 2 threads, 4096 x
//   4096, best of 2 interleaved rounds: W4A16 MXFP4 0.458 -> 0.406 ms, W8A16 MXFP8 0.632 -> 0.590, W6A16 E2M3
//   0.564 -> 0.573 (noise); 4096 x 14336 unchanged (1.44 / 1.91 / 2.01-2.10 ms): there the stream is bound by
//   its decode and vdpbf16ps, not by the memory.
// Cost per 64 codes at M = 1 (2-core Xeon, one thread, TSC cycles at the nominal 2.6 GHz, 4 panels over L2): 2
// vdpbf16ps alone ~4.5 (the instruction retires ~0.45 per cycle here); with the decode E2M1 5.7-6.0, FP6 7.7-8.0,
// so the decode's shuffles, not vdpbf16ps, set the pace. Two multiplies on the AMX tiles instead measured no
// faster: the tile path's 16-row tiles, and a per-block tdpbf16ps with a one-row activation tile (C one row of 16
// f32, stored and scaled per block) at 5.9-6.4 for E2M1. From memory the FP6 stream runs ~10 cycles per 64 codes
// on one thread (12.6 GB/s, INT8 ~16): a decoding loop keeps fewer lines in flight, and prefetch distances of
// 0.5-8 KiB or a second, L2-only prefetch further ahead did not change that.
#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // amx_w8a16_gemm.cpp says why

#include <cstdint>
#include <cstring>

#include "backends/x86/amx_bf16_decode.hpp"
#include "backends/x86/amx_bf16_job.hpp"
#include "backends/x86/amx_isa.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

int32_t load_pair(const uint16_t* x) {
  int32_t v;
  std::memcpy(&v, x, 4);
  return v;
}

// Items of 32 panels, prefetches one per line and into the next group: amx_int_stream.cpp says why.
constexpr int64_t kPanelsPerItem = 32;
constexpr int kNv = 4;

// Panels p0 .. p0 + NV - 1 -> c[v * 16 ..] (row 0 of the activations). next_group: prefetch past the panels'
// ends into panels p0 + NV .. (the caller's next group), else not at all.
template <Layout L, int NV>
void stream_panels(const Bf16Job& g, QuadDecoder<L>& dec, int64_t p0, bool next_group, float* c) {
  constexpr int64_t bpk = layout_bytes_per_k(L);
  // Quads per step, whole 64-byte lines of each panel: E2M1 2 (1 line), FP6 4 (3), E4M3 1 (1).
  using Prefetch = PanelLinePrefetch<bpk, NV>;
  constexpr int64_t kLineQuads = Prefetch::kLineQuads;
  const int64_t quads = g.k_pad / 4;  // k_pad % 32 == 0: whole MX blocks, every block a multiple of kLineQuads
  const int64_t panel_bytes = bpk * g.k_pad;
  const Prefetch prefetch(panel_bytes, next_group);
  const uint8_t* src[NV];
  __m512 acc[NV];
  for (int v = 0; v < NV; ++v) {
    src[v] = g.packed + (p0 + v) * panel_bytes;
    acc[v] = _mm512_setzero_ps();
  }
  // s[v] += the products of quads [q0, q1) of panel v with row 0.
  auto dot = [&](int64_t q0, int64_t q1, __m512* s) {
    for (int64_t q = q0; q < q1; q += kLineQuads) {
      prefetch.step(src, q);
      for (int64_t u = q; u < q + kLineQuads; ++u) {
        const __m512i x01 = _mm512_set1_epi32(load_pair(g.act + 4 * u));
        const __m512i x23 = _mm512_set1_epi32(load_pair(g.act + 4 * u + 2));
        for (int v = 0; v < NV; ++v) {
          __m512i a, b;
          dec.quad(src[v] + u * 4 * bpk, a, b);
          s[v] = _mm512_dpbf16_ps(s[v], (__m512bh)x01, (__m512bh)a);
          s[v] = _mm512_dpbf16_ps(s[v], (__m512bh)x23, (__m512bh)b);
        }
      }
    }
  };
  if (g.mx_scale == nullptr && g.nv_scale == nullptr && g.block_scale == nullptr) {
    dot(0, quads, acc);
  } else {
    // Block scales: each block (MX: 32 k = 8 quads, E8M0; NVFP4: 16 k = 4 quads, E4M3; 128x128: 128 k = 32
    // quads, the last one shorter where K is, times its 1x128 activation scale) summed alone on the unscaled
    // codes, then acc = fma(sum, scale, acc) per column. MX: exact (a power of two; process keeps every scaled
    // value normal); NVFP4 and 128x128: the FMA's one rounding, as the AVX2 code's per-group f32 sums.
    const bool nv = g.nv_scale != nullptr, mx = g.mx_scale != nullptr;
    const int64_t qb = nv ? 4 : mx ? 8 : 32;
    for (int64_t q0 = 0; q0 < quads; q0 += qb) {
      __m512 blk[NV];
      for (int v = 0; v < NV; ++v) blk[v] = _mm512_setzero_ps();
      dot(q0, q0 + qb < quads ? q0 + qb : quads, blk);
      for (int v = 0; v < NV; ++v) {
        __m512 scale;
        if (nv || mx) {
          const int64_t scale_bytes = quads / qb * 16, so = q0 / qb * 16;
          const uint8_t* codes = (nv ? g.nv_scale : g.mx_scale) + (p0 + v) * scale_bytes + so;
          if (so + 256 < scale_bytes || next_group) {  // 16 blocks ahead, past the end into the next group's
            _mm_prefetch(reinterpret_cast<const char*>(codes + 256 + (so + 256 < scale_bytes ? 0 : (NV - 1) * scale_bytes)),
                         _MM_HINT_T0);
          }
          scale = nv ? e4m3_scale_f32(codes) : mx_scale_f32(codes);
        } else {
          const int64_t kb = q0 / 32;
          const float ws = g.block_scale[(p0 + v) * g.block_cols + kb];
          scale = _mm512_set1_ps(g.act_block_scale != nullptr ? g.act_block_scale[kb] * ws : ws);
        }
        acc[v] = _mm512_fmadd_ps(blk[v], scale, acc[v]);
      }
    }
  }
  for (int v = 0; v < NV; ++v) _mm512_store_ps(c + v * 16, acc[v]);
}

template <Layout L>
void stream_item(const Bf16Job& g, int64_t item) {
  static_assert(kAmxBf16MinM == 2, "the stream computes one row");
  QuadDecoder<L> dec;
  alignas(64) float c[kNv * 16];
  const int64_t panels = g.n_pad / 16;
  const int64_t p_end = (item + 1) * kPanelsPerItem < panels ? (item + 1) * kPanelsPerItem : panels;
  for (int64_t p = item * kPanelsPerItem; p < p_end; p += kNv) {
    const int nv = static_cast<int>(p_end - p < kNv ? p_end - p : kNv);
    const bool next = p + kNv < p_end;
    switch (nv) {
      case 1: stream_panels<L, 1>(g, dec, p, next, c); break;
      case 2: stream_panels<L, 2>(g, dec, p, next, c); break;
      case 3: stream_panels<L, 3>(g, dec, p, next, c); break;
      default: stream_panels<L, 4>(g, dec, p, next, c); break;
    }
    const int64_t n0 = p * 16;
    bf16_job_epilogue(g, c, kNv * 16, 0, 1, n0, g.n - n0 < nv * 16 ? g.n - n0 : nv * 16);
  }
}

using StreamItem = void (*)(const Bf16Job&, int64_t);

StreamItem stream_of(Layout l) {
  switch (l) {
    case Layout::kQuadE4M3: return stream_item<Layout::kQuadE4M3>;
    case Layout::kQuadE2M1: return stream_item<Layout::kQuadE2M1>;
    case Layout::kRecordE4M3: return stream_item<Layout::kRecordE4M3>;
    case Layout::kRecordE2M1: return stream_item<Layout::kRecordE2M1>;
    case Layout::kRecordE2M3: return stream_item<Layout::kRecordE2M3>;
    case Layout::kRecordE3M2: break;
    case Layout::kRecordE2M1Nv: return stream_item<Layout::kRecordE2M1>;  // the codes alone; scales per block
  }
  return stream_item<Layout::kRecordE3M2>;
}

thread_local int64_t tl_streams = 0;

}  // namespace

int64_t amx_bf16_streams_on_this_thread() { return tl_streams; }

void bf16_job_stream(const Bf16Job& g) {
  ++tl_streams;
  if (bf16_job_int_stream(g)) return;  // the same sums in integers, where the codes and activations allow
  const StreamItem run = stream_of(g.layout);
  const int64_t items = (g.n_pad / 16 + kPanelsPerItem - 1) / kPanelsPerItem;
  threads::parallel_for(items, g.threads, [&](int64_t item) { run(g, item); });
}

}  // namespace qlinear::x86
