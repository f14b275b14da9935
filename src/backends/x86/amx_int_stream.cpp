// The weight stream at M = 1 (amx_bf16_stream.cpp) in integers, where the products allow it: E2M1 (MXFP4, NVFP4)
// and E2M3 (MXFP6) codes are small integers (2x and 8x their values), and so, per scale block, are the
// activations that MX and NVFP4 quantize (W4A4, W4A6, W6A6: code x a power of two, or code x an E4M3 scale):
// x = i * 2^E with |i| < 256, E the exponent of the block's largest |x| minus 7. One vpdpbusd then multiplies
// 64 code pairs where vdpbf16ps multiplies 32 (and retires about one per 2 cycles on the Xeons measured, vpdpbusd
// one per cycle), and the lookup that decodes a code gives its integer directly. Per quad (4 k of a 16-column
// panel) and panel: a vpermb and vpmultishiftqb that put column j's 4 codes into dword j (FP6: twice, and a
// vpternlogd), an XOR that flips a code's sign where the activation is negative (vpdpbusd multiplies unsigned
// activation bytes by signed weight bytes), a vpermb lookup to the signed integer, a vpdpbusd.
//
// Bit-identical to the BF16 stream: a block's integer sum times the activation step 2^E / code scale is exactly
// the f32 block sum the BF16 stream forms (every partial sum there is a multiple of that step below 2^24 of
// it, so exact; the step is kept normal and the sum finite), and both add it to the accumulator by the same
// fma with the block's weight scale. Rows whose activations are not such integers (dense BF16, FP8, MXFP6
// E3M2 or MXFP8 activations, K blocks beyond the step's range) take the BF16 stream; nothing else differs.
// Compiled with the AMX translation units' flags (it issues no AMX instruction); used by CPUs with AVX-512
// VNNI besides the BF16 engines' BF16 + VBMI.
#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // amx_w8a16_gemm.cpp says why

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "backends/x86/amx_bf16_decode.hpp"
#include "backends/x86/amx_bf16_job.hpp"
#include "backends/x86/amx_isa.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

// Codes' sign bit and integer scale (integer = value * scale) by layout.
constexpr int sign_bit(Layout l) { return l == Layout::kRecordE2M3 ? 5 : 3; }
constexpr float code_scale(Layout l) { return l == Layout::kRecordE2M3 ? 8.0f : 2.0f; }

// Gathers in dword order: byte 4j + i of the result <- column j's code at k = 4q + i (fp_isa.hpp's records;
// the quad-order tables of amx_bf16_decode.hpp, with column j and record i in place of the quad byte's).
struct IntTables {
  alignas(64) uint8_t e2m1_idx[64], e2m1_shift[64];
  alignas(64) uint8_t fp6_nib_idx[64], fp6_nib_shift[64], fp6_top_idx[64], fp6_top_shift[64];
  alignas(64) int8_t e2m1_int[64], e2m3_int[64];  // code (low 4 / 6 bits of the index) -> value * 2 / * 8
  constexpr IntTables()
      : e2m1_idx(), e2m1_shift(), fp6_nib_idx(), fp6_nib_shift(), fp6_top_idx(), fp6_top_shift(), e2m1_int(), e2m3_int() {
    for (int d = 0; d < 64; ++d) {
      const int c = d / 4, kk = d % 4, base = 8 * (d % 8);
      e2m1_idx[d] = static_cast<uint8_t>(16 * ((c % 8) / 4) + 8 * (c / 8) + 2 * (c % 4) + kk % 2);
      e2m1_shift[d] = static_cast<uint8_t>(base + 4 * (kk / 2));
      fp6_nib_idx[d] = static_cast<uint8_t>(16 * (c / 8) + 8 * (kk % 2) + c % 8);
      fp6_nib_shift[d] = static_cast<uint8_t>(base + 4 * (kk / 2));
      fp6_top_idx[d] = static_cast<uint8_t>(32 + 8 * (kk % 2) + c % 8);
      fp6_top_shift[d] = static_cast<uint8_t>((base + 2 * (2 * (kk / 2) + c / 8) + 60) % 64);
      const int v2[8] = {0, 1, 2, 3, 4, 6, 8, 12};
      const int e1 = d & 15;
      e2m1_int[d] = static_cast<int8_t>((e1 & 8) != 0 ? -v2[e1 & 7] : v2[e1 & 7]);
      const int e = (d >> 3) & 3, m = d & 7;
      const int mag = e == 0 ? m : (8 + m) << (e - 1);
      e2m3_int[d] = static_cast<int8_t>((d & 32) != 0 ? -mag : mag);
    }
  }
};
inline constexpr IntTables kInt;

static_assert(kInt.e2m1_int[0x7] == 12 && kInt.e2m1_int[0x9] == -1 && kInt.e2m1_int[0x17] == 12, "E2M1 6, -0.5");
static_assert(kInt.e2m3_int[0x1F] == 60 && kInt.e2m3_int[0x01] == 1 && kInt.e2m3_int[0x28] == -8, "E2M3 7.5, 1/8, -1");

// The activation row as integers: per quad q, |i| of k = 4q .. 4q + 3 (a byte each) and their signs at the
// code's sign bit of each byte; per block, the step 2^E / code scale. False when a block's values are not such
// integers, or its step or sums would leave f32's normal range.
struct IntRow {
  std::vector<uint32_t> mag, sign;
  std::vector<float> step;
};

bool int_row(const Bf16Job& g, int64_t block, int sbit, float cscale, IntRow& r) {
  const int64_t quads = g.k_pad / 4, blocks = g.k_pad / block;
  r.mag.resize(static_cast<size_t>(quads));
  r.sign.resize(static_cast<size_t>(quads));
  r.step.resize(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    const uint16_t* x = g.act + b * block;
    uint16_t amax = 0;
    for (int64_t i = 0; i < block; ++i) amax = std::max<uint16_t>(amax, x[i] & 0x7FFF);
    if (amax == 0) {
      std::memset(&r.mag[b * block / 4], 0, block);
      std::memset(&r.sign[b * block / 4], 0, block);
      r.step[b] = 0.0f;
      continue;
    }
    const int field = amax >> 7;
    if (field == 0 || field == 0xFF) return false;  // subnormal largest value, or Inf / NaN
    const int e = field - 127 - 7;                   // |x| / 2^e < 256
    // The step 2^e / cscale normal, the block's integer sums (< 2^24) times it finite.
    if (e - 3 < -126 || e + 24 > 127) return false;
    float inv;
    const uint32_t inv_bits = static_cast<uint32_t>(127 - e) << 23;
    std::memcpy(&inv, &inv_bits, 4);
    for (int64_t i = 0; i < block; i += 16) {
      const __m512 f = _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))), 16));
      const __m512 t = _mm512_mul_ps(f, _mm512_set1_ps(inv));  // exact: a power of two, the result normal or an integer
      // Not an integer; or a nonzero value scaled below f32's range to 0 (the check above cannot see it).
      if (_mm512_cmp_ps_mask(t, _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT), _CMP_NEQ_UQ) != 0 ||
          (_mm512_cmp_ps_mask(t, _mm512_setzero_ps(), _CMP_EQ_OQ) & _mm512_cmp_ps_mask(f, _mm512_setzero_ps(), _CMP_NEQ_OQ)) != 0) {
        return false;
      }
      const __m512i iv = _mm512_cvtps_epi32(t);
      const __m128i mag = _mm512_cvtepi32_epi8(_mm512_abs_epi32(iv));
      const __mmask16 neg = _mm512_cmplt_epi32_mask(iv, _mm512_setzero_si512()) |
                            _mm512_test_epi32_mask(_mm512_castps_si512(f), _mm512_set1_epi32(INT32_MIN));
      const __m128i sgn = _mm_maskz_mov_epi8(neg, _mm_set1_epi8(static_cast<char>(1 << sbit)));
      std::memcpy(&r.mag[(b * block + i) / 4], &mag, 16);
      std::memcpy(&r.sign[(b * block + i) / 4], &sgn, 16);
    }
    float step;
    const uint32_t step_bits = static_cast<uint32_t>(e + 127) << 23;
    std::memcpy(&step, &step_bits, 4);
    r.step[b] = step / cscale;
  }
  return true;
}

// Column j's codes of quad `src` (k = 4q + i in byte 4j + i), the code's own bits at the bottom of each byte.
template <Layout L>
__m512i dword_codes(const uint8_t* src) {
  if constexpr (L == Layout::kRecordE2M3) {
    const __m512i x = _mm512_maskz_loadu_epi8(0x0000FFFFFFFFFFFFull, src);  // 48 bytes
    const __m512i nib = _mm512_multishift_epi64_epi8(_mm512_load_si512(kInt.fp6_nib_shift),
                                                     _mm512_permutexvar_epi8(_mm512_load_si512(kInt.fp6_nib_idx), x));
    const __m512i top = _mm512_multishift_epi64_epi8(_mm512_load_si512(kInt.fp6_top_shift),
                                                     _mm512_permutexvar_epi8(_mm512_load_si512(kInt.fp6_top_idx), x));
    return _mm512_ternarylogic_epi32(_mm512_set1_epi8(0x0F), nib, top, 0xCA);  // nib : top
  } else {
    const __m512i x = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
    return _mm512_multishift_epi64_epi8(_mm512_load_si512(kInt.e2m1_shift),
                                        _mm512_permutexvar_epi8(_mm512_load_si512(kInt.e2m1_idx), x));
  }
}

// The memory side. At M = 1 the decode takes ~40% of a core's time per byte (35 GB/s over L2, one thread), so the
// stream is bound by how many weight lines a core keeps in flight: the reorder window holds ~2 KiB of this
// loop's loads (INT8's VNNI loop ~13 KiB), and a stripped loop (load + vpdpbusd, nothing decoded) streamed only
// 14.1 GB/s where INT8 streams 16.3 (one thread, 4096 x 14336, cold weights): the prefetches are the lever, not the
// decode. So: one prefetch per 64-byte line of each panel (a step of kLineQuads quads covers whole lines) instead
// of one per quad; the block scales prefetched too (their 4 streams cross a page every 256 blocks and a demand miss
// there stalls the loop); and prefetches that run past a panel's end go to the start of the same panel of the next
// group, so a group starts on warm lines (every 64 KiB of weights at K = 4096). Items of 32 panels (8 groups) keep
// that hand-over inside an item. Measured on the 2-core Xeon, W4A4 MXFP4, M = 1, 2 threads, best of 3 interleaved
// rounds against INT8 in the same run (GB/s of weights): 4096 x 4096 21.8 -> 28.0 (INT8 32.6), 4096 x 14336
// 26.5 -> 28.5-29.0 (32.1), 28672 x 4096 25.4 -> 28.5 (31.4). Tried, no better within the noise: NV = 2, 6, 8;
// prefetch 1, 3 or 4 KiB ahead; T1 / T2 hints (NTA: 1.7x slower); each thread one contiguous range of panels.
constexpr int64_t kPanelsPerItem = 32;
constexpr int kNv = 4;
constexpr int64_t kScalePrefetchBytes = 256;  // 16 blocks of 16 columns' scales

// Panels p0 .. p0 + NV - 1 -> c[v * 16 ..] (row 0), each scale block's integer sums scaled as the BF16 stream does.
// next_group: prefetch past the panels' ends into panels p0 + NV .. (the caller's next group), else not at all.
template <Layout L, int NV>
void int_panels(const Bf16Job& g, const IntRow& a, int64_t p0, bool next_group, float* c) {
  constexpr int64_t bpk = layout_bytes_per_k(L);
  using Prefetch = PanelLinePrefetch<bpk, NV>;
  constexpr int64_t kLineQuads = Prefetch::kLineQuads;  // E2M1: 2 quads = 1 line; E2M3: 4 = 3
  const bool nv = g.nv_scale != nullptr;
  const int64_t quads = g.k_pad / 4, qb = nv ? 4 : 8;  // a block: 16 / 32 k; a multiple of kLineQuads
  const int64_t panel_bytes = bpk * g.k_pad, scale_bytes = quads / qb * 16;
  // The scale prefetches past a panel's end go to the next group as the weights' do (PanelLinePrefetch).
  const Prefetch prefetch(panel_bytes, next_group);
  const int64_t scale_skip = next_group ? (NV - 1) * scale_bytes : 0, spf_end = next_group ? INT64_MAX : scale_bytes;
  const __m512i lut = _mm512_load_si512(L == Layout::kRecordE2M3 ? kInt.e2m3_int : kInt.e2m1_int);
  const uint8_t* src[NV];
  const uint8_t* scales[NV];
  __m512 acc[NV];
  for (int v = 0; v < NV; ++v) {
    src[v] = g.packed + (p0 + v) * panel_bytes;
    scales[v] = (nv ? g.nv_scale : g.mx_scale) + (p0 + v) * scale_bytes;
    acc[v] = _mm512_setzero_ps();
  }
  for (int64_t q0 = 0; q0 < quads; q0 += qb) {
    __m512i s[NV];
    for (int v = 0; v < NV; ++v) s[v] = _mm512_setzero_si512();
    for (int64_t q = q0; q < q0 + qb; q += kLineQuads) {
      prefetch.step(src, q);
      for (int64_t u = q; u < q + kLineQuads; ++u) {
        const __m512i am = _mm512_set1_epi32(static_cast<int>(a.mag[u]));
        const __m512i sg = _mm512_set1_epi32(static_cast<int>(a.sign[u]));
        for (int v = 0; v < NV; ++v) {
          const __m512i w = _mm512_permutexvar_epi8(_mm512_xor_si512(dword_codes<L>(src[v] + u * 4 * bpk), sg), lut);
          s[v] = _mm512_dpbusd_epi32(s[v], am, w);
        }
      }
    }
    const __m512 step = _mm512_set1_ps(a.step[q0 / qb]);
    const int64_t so = q0 / qb * 16, spf = so + kScalePrefetchBytes;
    for (int v = 0; v < NV; ++v) {
      if (spf < spf_end) {
        _mm_prefetch(reinterpret_cast<const char*>(scales[v] + (spf < scale_bytes ? spf : spf + scale_skip)), _MM_HINT_T0);
      }
      const __m512 scale = nv ? e4m3_scale_f32(scales[v] + so) : mx_scale_f32(scales[v] + so);
      acc[v] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s[v]), step), scale, acc[v]);
    }
  }
  for (int v = 0; v < NV; ++v) _mm512_store_ps(c + v * 16, acc[v]);
}

template <Layout L>
void int_item(const Bf16Job& g, const IntRow& a, int64_t item) {
  alignas(64) float c[kNv * 16];
  const int64_t panels = g.n_pad / 16;
  const int64_t p_end = (item + 1) * kPanelsPerItem < panels ? (item + 1) * kPanelsPerItem : panels;
  for (int64_t p = item * kPanelsPerItem; p < p_end; p += kNv) {
    const int nv = static_cast<int>(p_end - p < kNv ? p_end - p : kNv);
    const bool next = p + kNv < p_end;
    switch (nv) {
      case 1: int_panels<L, 1>(g, a, p, next, c); break;
      case 2: int_panels<L, 2>(g, a, p, next, c); break;
      case 3: int_panels<L, 3>(g, a, p, next, c); break;
      default: int_panels<L, 4>(g, a, p, next, c); break;
    }
    const int64_t n0 = p * 16;
    bf16_job_epilogue(g, c, kNv * 16, 0, 1, n0, g.n - n0 < nv * 16 ? g.n - n0 : nv * 16);
  }
}

thread_local int64_t tl_int_streams = 0;
// QLINEAR_X86_INT_STREAM=0 turns it off (an A/B switch for benchmarks).
std::atomic<bool> g_int_stream_enabled{[] {
  const char* e = std::getenv("QLINEAR_X86_INT_STREAM");
  return e == nullptr || std::string_view(e) != "0";
}()};

}  // namespace

int64_t amx_int_streams_on_this_thread() { return tl_int_streams; }
void set_int_stream_enabled(bool on) { g_int_stream_enabled.store(on); }

bool bf16_job_int_stream(const Bf16Job& g) {
  const Layout l = g.layout == Layout::kRecordE2M1Nv ? Layout::kRecordE2M1 : g.layout;
  const bool blocks = (g.mx_scale != nullptr) != (g.nv_scale != nullptr) && g.block_scale == nullptr;
  if (g.m != 1 || !blocks || (l != Layout::kRecordE2M1 && l != Layout::kRecordE2M3) ||
      (l == Layout::kRecordE2M3 && g.nv_scale != nullptr) || !g_int_stream_enabled.load(std::memory_order_relaxed)) {
    return false;
  }
  static const bool vnni = __builtin_cpu_supports("avx512vnni");
  if (!vnni) return false;
  IntRow a;
  if (!int_row(g, g.nv_scale != nullptr ? 16 : 32, sign_bit(l), code_scale(l), a)) return false;
  ++tl_int_streams;
  const int64_t items = (g.n_pad / 16 + kPanelsPerItem - 1) / kPanelsPerItem;
  if (l == Layout::kRecordE2M3) {
    threads::parallel_for(items, g.threads, [&](int64_t item) { int_item<Layout::kRecordE2M3>(g, a, item); });
  } else {
    threads::parallel_for(items, g.threads, [&](int64_t item) { int_item<Layout::kRecordE2M1>(g, a, item); });
  }
  return true;
}

}  // namespace qlinear::x86
