// x86_avx2_{fp8_scaled_mm, fp8_block_scaled, fp8_weight_only, mxfp8, mxfp6, mxfp4, nvfp4} and their BF16-engine
// variants (x86_amx_bf16_*, x86_avx512bf16_*): checks, weight prepacking into code panels, scale preparation and
// the apply driver, baseline flags. Layout and numerics: fp_isa.hpp, amx_isa.hpp.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "backends/reference/reference_kernels.hpp"
#include "backends/x86/amx_isa.hpp"
#include "backends/x86/fp_isa.hpp"
#include "backends/x86/host_state_io.hpp"
#include "backends/x86/panel_block_scales.hpp"
#include "backends/x86/x86_kernels.hpp"
#include "core/threads.hpp"
#include "qlinear/quantize.hpp"

namespace qlinear::x86 {

namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

FpElem elem_of(DType d) {
  switch (d) {
    case DType::kF6E3M2: return FpElem::kE3M2;
    case DType::kF6E2M3: return FpElem::kE2M3;
    case DType::kF4E2M1: return FpElem::kE2M1;
    default: return FpElem::kE4M3;
  }
}

int record_bytes(FpElem e) { return e == FpElem::kE4M3 ? 16 : (e == FpElem::kE2M1 ? 8 : 12); }

struct FpState {
  int64_t n = 0, k = 0, n_pad = 0, k_pad = 0;
  DType wdtype = DType::kF8E4M3;
  FpElem elem = FpElem::kE4M3;
  AlignedBytes packed;               // code panels [n_pad/16][k_pad][record]
  FpGroupScale group_scale = FpGroupScale::kNone;
  int64_t group = 32;
  std::vector<uint8_t> grp;          // [n_pad/16][k_pad/group][16]
  std::vector<float> block_scale;    // 128x128: [n_pad/16][ceil(k/128)], per panel (panel_block_scales.hpp)
  int64_t block_cols = 0;
  float block_scale_lo = 0.0f, block_scale_hi = 0.0f;  // 128x128: the least and largest nonzero finite |scale|
                                                      // (derived at process and import, not stored)
  bool e4m3_f32_groups = false;      // MXFP8 whose every scale code is at most kFpE4m3F32MaxScale (derived, not stored)
  std::vector<float> col_scale;      // [n_pad], empty = 1
  std::vector<float> col_nan;        // [n_pad], empty = no NaN weight code
  float in_scale = 1.0f;             // fp8 static activations (max over shards, as vLLM)
  float in_global = 1.0f;            // nvfp4 activations' g (max over shards)
  bool use_reference = false;        // folded scales would not be exact: the reference runs the layer
};

// The least and largest nonzero finite magnitude of v (false: none).
bool nonzero_range(const float* v, size_t n, float& lo, float& hi) {
  lo = std::numeric_limits<float>::infinity();
  hi = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(v[i]);
    if (a > 0.0f && a < std::numeric_limits<float>::infinity()) {
      lo = std::min(lo, a);
      hi = std::max(hi, a);
    }
  }
  return hi > 0.0f;
}

// What the engine derives from the stored scales (after process and after import): block_scale_lo / hi from
// the panels' 128x128 scales, and whether an MXFP8 layer's E4M3 records can take the f32 decode route.
void set_derived(FpState& st) {
  if (!nonzero_range(st.block_scale.data(), st.block_scale.size(), st.block_scale_lo, st.block_scale_hi)) {
    st.block_scale_lo = st.block_scale_hi = 0.0f;
  }
  st.e4m3_f32_groups = st.elem == FpElem::kE4M3 && st.group_scale == FpGroupScale::kE8M0 &&
                       std::all_of(st.grp.begin(), st.grp.end(), [](uint8_t e) { return e <= kFpE4m3F32MaxScale; });
}

// Code panels: n_pad/16 panels of k_pad records (record(): a record holds one k of the panel's 16 columns).
int64_t packed_bytes(const FpState& st) { return st.n_pad / 16 * st.k_pad * record_bytes(st.elem); }

const FpState* state_of(const LinearLayer& layer) { return static_cast<const FpState*>(layer.kernel_state.get()); }

uint8_t* record(FpState& st, int64_t n, int64_t k) {
  const int rb = record_bytes(st.elem);
  return st.packed.get() + (n / 16) * st.k_pad * rb + k * rb;
}

const uint8_t* record(const FpState& st, int64_t n, int64_t k) {
  const int rb = record_bytes(st.elem);
  return st.packed.get() + (n / 16) * st.k_pad * rb + k * rb;
}

// Quad records (fp_isa.hpp), E2M1 and FP6: where the low nibble of (column n, k) is, and for FP6 its top
// two bits.
struct QuadSlot {
  int64_t nibble_byte;  // offset in packed
  int nibble_shift;     // 0 or 4
  int64_t top_byte;     // FP6: offset in packed
  int top_shift;        // FP6: 0, 2, 4 or 6
};

QuadSlot quad_slot(const FpState& st, int64_t n, int64_t k) {
  const int j = static_cast<int>(n % 16), kk = static_cast<int>(k % 4);
  const int64_t rec = (n / 16) * st.k_pad * record_bytes(st.elem) + (k / 4) * 4 * record_bytes(st.elem);
  QuadSlot s{};
  s.nibble_shift = 4 * (kk / 2);
  if (st.elem == FpElem::kE2M1) {
    s.nibble_byte = rec + 16 * ((j % 8) / 4) + 8 * (j / 8) + 2 * (j % 4) + kk % 2;
    return s;
  }
  const int i = 8 * (kk % 2) + j % 8;  // byte within a 128-bit lane
  s.nibble_byte = rec + 16 * (j / 8) + i;
  s.top_byte = rec + 32 + i;
  s.top_shift = 2 * (2 * (kk / 2) + j / 8);
  return s;
}

// Code panels (fp_isa.hpp): column j = n % 16 of record k.
void set_code(FpState& st, int64_t n, int64_t k, uint32_t code) {
  if (st.elem == FpElem::kE4M3) {
    record(st, n, k)[n % 16] = static_cast<uint8_t>(code);
    return;
  }
  const QuadSlot q = quad_slot(st, n, k);
  uint8_t& b = st.packed.get()[q.nibble_byte];
  b = static_cast<uint8_t>((b & ~(0x0F << q.nibble_shift)) | ((code & 0x0F) << q.nibble_shift));
  if (st.elem == FpElem::kE2M1) return;
  uint8_t& t = st.packed.get()[q.top_byte];
  t = static_cast<uint8_t>((t & ~(3 << q.top_shift)) | (((code >> 4) & 3) << q.top_shift));
}

uint32_t get_code(const FpState& st, int64_t n, int64_t k) {
  if (st.elem == FpElem::kE4M3) return record(st, n, k)[n % 16];
  const QuadSlot q = quad_slot(st, n, k);
  uint32_t c = (st.packed.get()[q.nibble_byte] >> q.nibble_shift) & 0x0Fu;
  if (st.elem != FpElem::kE2M1) c |= ((st.packed.get()[q.top_byte] >> q.top_shift) & 3u) << 4;
  return c;
}

// Per-column values of a per-tensor (per-shard) scalar tensor, or of a per-channel one.
std::vector<float> per_column(const LinearConfig& c, const Tensor& t, int64_t n_pad, bool per_channel) {
  const Tensor ct = t.contiguous();
  std::vector<float> v(static_cast<size_t>(n_pad), 0.0f);
  if (per_channel) {
    std::copy(ct.data<float>(), ct.data<float>() + c.n, v.begin());
    return v;
  }
  int64_t row = 0;
  for (int64_t s = 0; s < c.num_shards(); ++s) {
    const int64_t width = c.logical_widths.empty() ? c.n : c.logical_widths[s];
    std::fill(v.begin() + row, v.begin() + row + width, ct.data<float>()[ct.numel() == 1 ? 0 : s]);
    row += width;
  }
  return v;
}

float max_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return *std::max_element(c.data<float>(), c.data<float>() + c.numel());
}

// Smallest and largest nonzero magnitude of an element format.
double min_nonzero(DType d) { return traits(d).min_subnormal; }

}  // namespace

const FpAvx2Kernel kAvx2Fp8ScaledMM("x86_avx2_fp8_scaled_mm", Family::kFp8ScaledMM);
const FpAvx2Kernel kAvx2Fp8BlockScaled("x86_avx2_fp8_block_scaled", Family::kFp8BlockScaled);
const FpAvx2Kernel kAvx2Fp8WeightOnly("x86_avx2_fp8_weight_only", Family::kFp8WeightOnly);
const FpAvx2Kernel kAvx2Mxfp8("x86_avx2_mxfp8", Family::kMxfp8);
const FpAvx2Kernel kAvx2Mxfp6("x86_avx2_mxfp6", Family::kMxfp6);
const FpAvx2Kernel kAvx2Mxfp4("x86_avx2_mxfp4", Family::kMxfp4);
const FpAvx2Kernel kAvx2Nvfp4("x86_avx2_nvfp4", Family::kNvfp4);
const FpAvx2Kernel kAmxBf16Fp8ScaledMM("x86_amx_bf16_fp8_scaled_mm", Family::kFp8ScaledMM, Isa::kAmxBf16);
const FpAvx2Kernel kAmxBf16Mxfp8("x86_amx_bf16_mxfp8", Family::kMxfp8, Isa::kAmxBf16);
const FpAvx2Kernel kAmxBf16Mxfp6("x86_amx_bf16_mxfp6", Family::kMxfp6, Isa::kAmxBf16);
const FpAvx2Kernel kAmxBf16Mxfp4("x86_amx_bf16_mxfp4", Family::kMxfp4, Isa::kAmxBf16);
const FpAvx2Kernel kAmxBf16Nvfp4("x86_amx_bf16_nvfp4", Family::kNvfp4, Isa::kAmxBf16);
const FpAvx2Kernel kAvx512Bf16Fp8ScaledMM("x86_avx512bf16_fp8_scaled_mm", Family::kFp8ScaledMM, Isa::kAvx512Bf16Vbmi);
const FpAvx2Kernel kAvx512Bf16Fp8BlockScaled("x86_avx512bf16_fp8_block_scaled", Family::kFp8BlockScaled,
                                             Isa::kAvx512Bf16Vbmi);
const FpAvx2Kernel kAvx512Bf16Mxfp8("x86_avx512bf16_mxfp8", Family::kMxfp8, Isa::kAvx512Bf16Vbmi);
const FpAvx2Kernel kAvx512Bf16Mxfp6("x86_avx512bf16_mxfp6", Family::kMxfp6, Isa::kAvx512Bf16Vbmi);
const FpAvx2Kernel kAvx512Bf16Mxfp4("x86_avx512bf16_mxfp4", Family::kMxfp4, Isa::kAvx512Bf16Vbmi);
const FpAvx2Kernel kAvx512Bf16Nvfp4("x86_avx512bf16_nvfp4", Family::kNvfp4, Isa::kAvx512Bf16Vbmi);

namespace {
// Smallest M the AVX-512 BF16 NVFP4 kernel runs on register tiles (bf16_tiles_min_m says why).
constexpr int64_t kAvx512Bf16Nvfp4MinM = 4;
// The BF16 engines (amx_isa.hpp): AMX tiles, or without AMX vdpbf16ps register tiles; the AVX2 code has none.
bool bf16_engine(Isa isa) { return isa == Isa::kAmxBf16 || isa == Isa::kAvx512Bf16Vbmi; }
}  // namespace

std::string_view FpAvx2Kernel::summary() const {
  if (isa_ == Isa::kAvx512Bf16Vbmi) {
    switch (family_) {
      case Family::kFp8ScaledMM:
        return "FP8 W8A8 (per-tensor/channel weights, activations quantized as the reference), E4M3 decoded to BF16 "
               "by VBMI lookups, vdpbf16ps register tiles (products exact), f32 accumulation; M = 1: the same decode "
               "streamed through vdpbf16ps";
      case Family::kFp8BlockScaled:
        return "FP8 128x128 weights x dynamic 1x128 FP8 activations (quantized as the reference), E4M3 decoded to "
               "BF16 by VBMI lookups, vdpbf16ps register tiles (products exact), each 128-wide K block's f32 sum "
               "times its two scales into the f32 accumulator; M = 1: the same decode streamed through vdpbf16ps";
      case Family::kMxfp8:
        return "MXFP8 weights x MXFP8 (quantized as the reference) or BF16 activations, E4M3 decoded to BF16 with E8M0 "
               "folded (products exact), vdpbf16ps register tiles, f32 accumulation; M = 1: E8M0 on each block's sum";
      case Family::kMxfp6:
        return "MXFP6 E2M3/E3M2 weights x BF16 or MX activations (quantized as the reference), FP6 decoded to BF16 "
               "with E8M0 folded (products exact), vdpbf16ps register tiles, f32 accumulation";
      case Family::kMxfp4:
        return "MXFP4 weights x MX / static FP8 activations (quantized as the reference) or BF16, E2M1 decoded to "
               "BF16 with E8M0 folded (products exact), vdpbf16ps register tiles, f32 accumulation";
      default:
        return "NVFP4 weights x BF16 or NVFP4 activations (quantized as the reference), E2M1 times its E4M3 block "
               "scale decoded to BF16 (exact), vdpbf16ps register tiles, global scales in the epilogue; M = 1: the "
               "codes streamed, each 16-k block's sum times its scale";
    }
  }
  if (isa_ == Isa::kAmxBf16) {
    switch (family_) {
      case Family::kFp8ScaledMM:
        return "FP8 W8A8 (per-tensor/channel weights, activations quantized as the reference), AMX-BF16 tdpbf16ps "
               "on E4M3 decoded to BF16 tiles (products exact), f32 accumulation; M = 1: the same decode through "
               "vdpbf16ps";
      case Family::kMxfp8:
        return "MXFP8 weights x MXFP8 (quantized as the reference) or BF16 activations, AMX-BF16 tdpbf16ps on E4M3 "
               "decoded to BF16 tiles with E8M0 folded (products exact), f32 accumulation; M = 1: the same decode "
               "through vdpbf16ps, E8M0 on each block's sum";
      case Family::kMxfp6:
        return "MXFP6 E2M3/E3M2 weights x BF16 or MX activations (quantized as the reference), AMX-BF16 tdpbf16ps "
               "on FP6 decoded to BF16 tiles with E8M0 folded (products exact), f32 accumulation";
      case Family::kMxfp4:
        return "MXFP4 weights x MX / static FP8 activations (quantized as the reference) or BF16, AMX-BF16 "
               "tdpbf16ps on E2M1 decoded to BF16 tiles with E8M0 folded (products exact), f32 accumulation";
      default:
        return "NVFP4 weights x BF16 or NVFP4 activations (quantized as the reference), AMX-BF16 tdpbf16ps on E2M1 "
               "times its E4M3 block scale decoded to BF16 tiles (exact), global scales in the epilogue; M = 1: the "
               "codes through vdpbf16ps, each 16-k block's sum times its scale";
    }
  }
  switch (family_) {
    case Family::kFp8ScaledMM:
      return "FP8 W8A8 (per-tensor/channel weights, static or dynamic activations quantized as the reference), "
             "E4M3 decoded to f32, AVX2 FMA, f32 accumulation";
    case Family::kFp8BlockScaled:
      return "FP8 128x128 weights x dynamic 1x128 FP8 activations, E4M3 decoded to f32, AVX2 FMA, block scales on "
             "each 128-wide partial sum";
    case Family::kFp8WeightOnly:
      return "FP8 E4M3 weights (per-tensor/channel/128x128) x f32/bf16/f16 activations, AVX2 FMA, f32 accumulation";
    case Family::kMxfp8: return "MXFP8 weights (E8M0 folded) x f32/bf16/f16 or MXFP8 activations, AVX2 FMA, f32 sums";
    case Family::kMxfp6:
      return "MXFP6 E2M3/E3M2 weights (quad records, E8M0 on each group's f32 sum) x f32/bf16/f16 or MX activations, "
             "AVX2 FMA";
    case Family::kMxfp4:
      return "MXFP4 weights (vpshufb to BF16, E8M0 on each group's f32 sum) x f32/bf16/f16, MX or static FP8 "
             "activations, AVX2 FMA";
    default:
      return "NVFP4 weights (vpshufb to BF16, E4M3 scales on each group's f32 sum, global in the epilogue) x dense or "
             "NVFP4 activations, AVX2 FMA";
  }
}

Verdict FpAvx2Kernel::can_implement(const LinearConfig& c) const {
  if (c.family != family_) return Verdict::no("layer family is " + std::string(family_name(c.family)));
  if (bf16_engine(isa_) && !c.activation_key && c.input_dtype != DType::kBF16) {
    return Verdict::no("input dtype is " + std::string(qlinear::name(c.input_dtype)) +
                       ", not bf16 (" + (isa_ == Isa::kAmxBf16 ? "tdpbf16ps" : "vdpbf16ps") +
                       " multiplies bf16; rounding the input to bf16 would change the numerics)");
  }
  // Every key of the family's contract: check_config already holds them to it. Any N and K (padded); fused
  // 128x128 shards with their own block grids while each 16-column panel stays in one shard.
  return panels_take_block_grid(c);
}

Status FpAvx2Kernel::process_impl(LinearLayer& layer) const {
  const LinearConfig& c = layer.config;
  auto st = std::make_shared<FpState>();
  st->n = c.n;
  st->k = c.k;
  st->n_pad = round_up(c.n, 16);
  st->k_pad = round_up(c.k, 32);
  st->wdtype = c.weight_key.dtype;
  st->elem = elem_of(st->wdtype);
  const bool packed_fmt = is_packed(st->wdtype);
  const Tensor w = layer.params.at("weight").contiguous();
  const uint8_t* wp = w.data<uint8_t>();
  const int64_t row_bytes = packed_fmt ? storage_bytes(st->wdtype, c.k) : c.k;
  auto code = [&](int64_t n, int64_t k) -> uint32_t {
    return packed_fmt ? unpack_code(st->wdtype, wp + n * row_bytes, k) : wp[n * c.k + k];
  };
  const int64_t bytes = packed_bytes(*st);
  st->packed = weight_bytes(bytes);
  // Padding holds the code of +0.
  std::memset(st->packed.get(), 0, static_cast<size_t>(bytes));
  const bool e4m3 = st->elem == FpElem::kE4M3;
  std::vector<uint8_t> nan_col(static_cast<size_t>(c.n), 0);
  // One item per panel (its records share bytes); ~5 ns per code.
  threads::parallel_for(st->n_pad / 16, threads::threads_for(0, c.n * c.k * 5, 1.0), [&](int64_t p) {
    for (int64_t n = p * 16; n < std::min(c.n, p * 16 + 16); ++n) {
      for (int64_t k = 0; k < c.k; ++k) {
        const uint32_t v = code(n, k);
        if (e4m3 && (v & 0x7F) == 0x7F) nan_col[n] = 1;
        set_code(*st, n, k, v);
      }
    }
  });
  if (std::find(nan_col.begin(), nan_col.end(), 1) != nan_col.end()) {
    st->col_nan.assign(static_cast<size_t>(st->n_pad), 0.0f);
    for (int64_t n = 0; n < c.n; ++n) {
      if (nan_col[n]) st->col_nan[n] = std::numeric_limits<float>::quiet_NaN();
    }
  }

  const Tensor ws = layer.params.at("weight_scale").contiguous();
  const GroupShape g = c.weight_key.scale.group;
  const DType sd = c.weight_key.scale.dtype;
  if (sd == DType::kE8M0 || sd == DType::kF8E4M3) {
    const bool mx = sd == DType::kE8M0;
    st->group_scale = mx ? FpGroupScale::kE8M0 : FpGroupScale::kE4M3;
    st->group = mx ? 32 : 16;
    const int64_t kb = c.k / st->group, kb_pad = st->k_pad / st->group;
    const uint8_t* e = static_cast<const uint8_t*>(ws.raw());
    st->grp.assign(static_cast<size_t>(st->n_pad / 16 * kb_pad * 16), mx ? 127 : 0x38);  // 1.0: padding
    // Folded weights value * s must be exact f32: for MX, the decoder's multiplier 2^(kFpDecodeExp + e)
    // (fp_isa.hpp) must be a normal f32 and the block's values normal after scaling.
    const int off = kFpDecodeExp[static_cast<int>(st->elem)];
    const double vmin = min_nonzero(st->wdtype), vmax = traits(st->wdtype).max_finite;
    for (int64_t n = 0; n < c.n; ++n) {
      for (int64_t b = 0; b < kb; ++b) {
        const uint8_t sc = e[n * kb + b];
        bool any = false;
        for (int64_t k = b * st->group; k < (b + 1) * st->group; ++k) {
          const uint32_t v = code(n, k);
          any = any || (v & ((1u << (traits(st->wdtype).bits - 1)) - 1)) != 0;
        }
        uint8_t stored = sc;
        if (mx) {
          const int ex = static_cast<int>(sc) - 127, field = static_cast<int>(sc) + off;
          const bool ok = sc != 0xFF && field >= 1 && field <= 254 && std::ldexp(vmin, ex) >= 0x1p-126 &&
                          std::ldexp(vmax, ex) < 0x1p127;
          if (!ok && any) st->use_reference = true;
          if (!ok) stored = 127;
        } else if ((sc & 0x7F) == 0x7F) {  // an E4M3 NaN block scale: the reference's NaN
          if (any) st->use_reference = true;
          stored = 0x38;
        }
        st->grp[((n / 16) * kb_pad + b) * 16 + n % 16] = stored;
      }
    }
    if (!mx) {
      const Tensor gs = layer.params.at("weight_global_scale");
      std::vector<float> gcol = per_column(c, gs, st->n_pad, false);
      st->col_scale.assign(static_cast<size_t>(st->n_pad), 0.0f);
      for (int64_t n = 0; n < c.n; ++n) st->col_scale[n] = static_cast<float>(1.0 / gcol[n]);
    }
  } else if (g == kBlock128x128) {
    st->block_cols = (c.k + 127) / 128;
    st->block_scale = panel_block_scales(c, ws, st->n_pad);
  } else {
    st->col_scale = per_column(c, ws, st->n_pad, g.is_per_channel());
  }
  if (c.activation_key && c.activation_key->scale.is_static) st->in_scale = max_of(layer.params.at("input_scale"));
  if (c.activation_key && c.activation_key->scale2 && c.activation_key->scale2->is_static) {
    st->in_global = max_of(layer.params.at("input_global_scale"));
  }
  set_derived(*st);
  layer.kernel_state = st;
  layer.params.erase("weight");  // the panels replace it; row_major_weight rebuilds it
  return Status::ok();
}

// Processed layout version 4 (1 had FP4 records in column pairs, 2 per k with flipped codes and FP6 per k, 3 block
// scales per 128 rows): meta I64 [n, k, n_pad, k_pad, wdtype, group_scale, group, block_cols]; flags I64 [has col_nan,
// use_reference]; scalars F32 [in_scale, in_global]; packed U8 [panel bytes]; grp U8 [n_pad/16 * k_pad/group * 16]
// (MX, NVFP4); block_scale F32 [n_pad/16 * block_cols] (128x128, one row per panel);
// col_scale F32 [n_pad] (per-tensor / per-channel, NVFP4); col_nan F32 [n_pad] (when flagged).
namespace {

// Sizes and modes from the layer's config (the processed buffers are filled by import).
FpState planned_fp_state(const LinearConfig& c) {
  FpState st = planned_sizes<FpState>(c, 32);
  st.wdtype = c.weight_key.dtype;
  st.elem = elem_of(st.wdtype);
  const DType sd = c.weight_key.scale.dtype;
  if (sd == DType::kE8M0 || sd == DType::kF8E4M3) {
    st.group_scale = sd == DType::kE8M0 ? FpGroupScale::kE8M0 : FpGroupScale::kE4M3;
    st.group = sd == DType::kE8M0 ? 32 : 16;
  } else if (c.weight_key.scale.group == kBlock128x128) {
    st.block_cols = (c.k + 127) / 128;
  }
  return st;
}

// Per-column scales: NVFP4's global scale, or per-tensor / per-channel weight scales.
bool has_col_scale(const FpState& st) {
  return st.group_scale == FpGroupScale::kE4M3 || (st.group_scale == FpGroupScale::kNone && st.block_cols == 0);
}

const processed_io::StateSchema<FpState>& fp_schema() {
  namespace io = processed_io;
  using S = FpState;
  constexpr auto n_pad = [](const S& s) { return Shape{s.n_pad}; };
  static const io::StateSchema<S> schema{
      .i64_groups =
          {{"meta", size_fields_and<S>({{"wdtype", [](const S& s) { return static_cast<int64_t>(s.wdtype); }},
                                        {"group_scale", [](const S& s) { return static_cast<int64_t>(s.group_scale); }},
                                        {"group", [](const S& s) { return s.group; }},
                                        {"block_cols", [](const S& s) { return s.block_cols; }}})},
           {"flags",
            {{"has_col_nan", [](const S& s) -> int64_t { return s.col_nan.empty() ? 0 : 1; },
              [](S& s, int64_t v) { s.col_nan.assign(v != 0 ? static_cast<size_t>(s.n_pad) : 0, 0.0f); }},
             {"use_reference", [](const S& s) -> int64_t { return s.use_reference ? 1 : 0; },
              [](S& s, int64_t v) { s.use_reference = v != 0; }}}}},
      .f32_groups = {{"scalars",
                      {{"in_scale", [](const S& s) { return s.in_scale; }, [](S& s, float v) { s.in_scale = v; }},
                       {"in_global", [](const S& s) { return s.in_global; }, [](S& s, float v) { s.in_global = v; }}}}},
      .tensors = {
          packed_entry<S, DType::kU8, &packed_bytes>(),
          io::vector_entry<&S::grp, DType::kU8>(
              "grp", [](const S& s) { return Shape{s.n_pad / 16 * (s.k_pad / s.group) * 16}; },
              [](const S& s) { return s.group_scale != FpGroupScale::kNone; }),
          io::vector_entry<&S::block_scale, DType::kF32>(
              "block_scale", [](const S& s) { return Shape{s.n_pad / 16 * s.block_cols}; },
              [](const S& s) { return s.block_cols > 0; }),
          io::vector_entry<&S::col_scale, DType::kF32>("col_scale", n_pad, &has_col_scale),
          io::vector_entry<&S::col_nan, DType::kF32>("col_nan", n_pad, [](const S& s) { return !s.col_nan.empty(); }),
      }};
  return schema;
}

}  // namespace

Result<ProcessedWeights> FpAvx2Kernel::export_impl(const LinearLayer& layer) const {
  return export_host_state(fp_schema(), layer);
}

Status FpAvx2Kernel::import_impl(LinearLayer& layer, const ProcessedWeights& w) const {
  return import_host_state(fp_schema(), planned_fp_state(layer.config), w, layer, &set_derived);
}

Result<Tensor> FpAvx2Kernel::row_major_weight(const LinearLayer& layer) const {
  const FpState* st = state_of(layer);
  if (st == nullptr) return layer.get("weight");
  if (!is_packed(st->wdtype)) {
    Tensor w = Tensor::empty(st->wdtype, {st->n, st->k});
    for (int64_t n = 0; n < st->n; ++n) {
      for (int64_t k = 0; k < st->k; ++k) w.data<uint8_t>()[n * st->k + k] = static_cast<uint8_t>(get_code(*st, n, k));
    }
    return w;
  }
  const int64_t row_bytes = storage_bytes(st->wdtype, st->k);
  Tensor w = Tensor::zeros(DType::kU8, {st->n, row_bytes});
  for (int64_t n = 0; n < st->n; ++n) {
    for (int64_t k = 0; k < st->k; ++k) pack_code(st->wdtype, w.data<uint8_t>() + n * row_bytes, k, get_code(*st, n, k));
  }
  return w;
}

const LinearKernel& FpAvx2Kernel::reference_kernel() const {
  switch (family_) {
    case Family::kFp8ScaledMM: return reference::kFp8ScaledMM;
    case Family::kFp8BlockScaled: return reference::kFp8BlockScaled;
    case Family::kFp8WeightOnly: return reference::kFp8WeightOnly;
    case Family::kMxfp8: return reference::kMxfp8;
    case Family::kMxfp6: return reference::kMxfp6;
    case Family::kMxfp4: return reference::kMxfp4;
    default: return reference::kNvfp4;
  }
}

std::vector<MRoute> FpAvx2Kernel::m_routes(const LinearConfig& c) const {
  const std::string self(name());
  const std::string exact_path =
      "a layer whose block scales cannot be applied exactly in f32 (found when its weights are processed) runs " +
      std::string(reference_kernel().name()) + " instead, as does a call whose MX / NVFP4 activation scales leave "
      "f32's range";
  if (!bf16_engine(isa_)) return {MRoute{1, MRoute::kNoLimit, self, exact_path}};
  const std::string fallback = "activations with a value that is not a normal BF16 take the AVX2 code; " + exact_path;
  const int64_t tiles_from = bf16_tiles_min_m();
  const MRoute tiles{tiles_from, MRoute::kNoLimit, self,
                     (isa_ == Isa::kAmxBf16 ? "AMX-BF16 tiles; " : "AVX-512 BF16 register tiles (vdpbf16ps, 6 rows x 64 "
                                                                   "columns); ") + fallback};
  // The integer stream (amx_int_stream.cpp): E2M1 / E2M3 codes with MX or NVFP4 activations.
  const FpElem welem = elem_of(c.weight_key.dtype);
  const bool int_stream = c.activation_key && (welem == FpElem::kE2M1 || welem == FpElem::kE2M3) &&
                          (c.activation_key->scale.dtype == DType::kE8M0 || c.family == Family::kNvfp4);
  std::vector<MRoute> routes = {
      MRoute{1, kAmxBf16MinM - 1, self,
             std::string(int_stream ? "AVX-512 VBMI + VNNI weight streaming in integers (codes and each block's "
                                      "activations as small integers, vpdpbusd; bit-identical to the BF16 stream, "
                                      "which runs where the activations are not such integers): "
                                    : "AVX-512 VBMI + BF16 weight streaming (the tile path's decode, vdpbf16ps): ") +
                 (isa_ == Isa::kAmxBf16 ? "a 16-row tile would waste its rows; "
                                        : "one row's sums stay in registers over the whole K; ") + fallback}};
  if (tiles_from > kAmxBf16MinM) {
    routes.push_back({kAmxBf16MinM, tiles_from - 1, std::string(kAvx2Nvfp4.name()),
                      "the AVX2 code on the same packed weights: its in-register decode beats decoding the words "
                      "times their E4M3 scales for so few rows (4096 x 4096 on a 2-core Xeon: 1.25 vs 1.5 ms at M = 2); " +
                          exact_path});
  }
  routes.push_back(tiles);
  return routes;
}

int64_t FpAvx2Kernel::bf16_tiles_min_m() const {
  // NVFP4 on the register tiles decodes each word times its E4M3 block scale into L1 (a lookup by scale mantissa and
  // code, then an exponent add): at M = 2, 3 that costs more than the AVX2 kernel's register decode saves; from M = 4
  // the tiles are faster (measured, 4096 x 4096, 2 threads: 1.85 vs 2.3 ms at M = 4). The MX and FP8 words are
  // cheaper to decode and win from M = 2.
  return isa_ == Isa::kAvx512Bf16Vbmi && family_ == Family::kNvfp4 ? kAvx512Bf16Nvfp4MinM : kAmxBf16MinM;
}

bool FpAvx2Kernel::avx2_below_tiles(int64_t m) const { return m >= kAmxBf16MinM && m < bf16_tiles_min_m(); }

std::string_view FpAvx2Kernel::apply_route(const LinearLayer& layer, const Activation& x) const {
  const FpState* st = state_of(layer);
  if (st != nullptr && st->use_reference) return reference_kernel().name();
  return avx2_below_tiles(x.rows()) ? kAvx2Nvfp4.name() : name();
}

Status FpAvx2Kernel::reference_apply(const LinearLayer& layer, const Activation& x, const Tensor* bias,
                                     Tensor& out) const {
  const LinearKernel* ref = &reference_kernel();
  LinearLayer copy;
  copy.name = layer.name;
  copy.config = layer.config;
  copy.params = layer.params;
  QL_ASSIGN_OR_RETURN(copy.params["weight"], row_major_weight(layer));
  QL_RETURN_IF_ERROR(ref->process_weights_after_loading(copy));
  return ref->apply(copy, x, bias, out);
}

std::optional<QuantKey> FpAvx2Kernel::input_quant_key(const LinearConfig& c) const {
  if (c.activation_key && c.activation_key->scale.dtype == DType::kE8M0) return c.activation_key;
  return std::nullopt;
}

namespace {

// A pre-quantized MX activation (input_quant_key) as the f32 values code * 2^(e - 127), what
// fp_prepare_activations_avx2 makes of dense input; *inexact when one is not an f32 (or a scale is NaN).
// With int_codes / int_mult (an element of fp_act_int_shift >= 0): also the integer form of
// FpActQuant::int_codes.
void decode_mx_activation(const QuantizedTensor& xq, int64_t k_pad, float* act, int8_t* int_codes, float* int_mult,
                          uint8_t* inexact) {
  const DType elem = xq.key.dtype;
  const Tensor data = xq.data.contiguous(), scale = xq.scale.contiguous();
  const uint8_t* codes = static_cast<const uint8_t*>(data.raw());
  const uint8_t* e8m0 = static_cast<const uint8_t*>(scale.raw());
  const int64_t k = xq.cols, blocks = k / 32;
  const int shift = fp_act_int_shift(elem_of(elem));
  const int64_t row_bytes = is_packed(elem) ? storage_bytes(elem, k) : k;
  for (int64_t r = 0; r < xq.rows; ++r) {
    const uint8_t* row = codes + r * row_bytes;
    float* out = act + r * k_pad;
    for (int64_t i = 0; i < k; ++i) {
      const uint8_t e = e8m0[r * blocks + i / 32];
      const uint32_t code = is_packed(elem) ? unpack_code(elem, row, i) : row[i];
      const double c = decode(elem, code), v = std::ldexp(c, static_cast<int>(e) - 127);
      out[i] = static_cast<float>(v);
      if (e == 0xFF || static_cast<double>(out[i]) != v) *inexact = 1;
      if (int_codes) int_codes[r * k_pad + i] = static_cast<int8_t>(std::ldexp(c, shift));
    }
    std::fill(out + k, out + k_pad, 0.0f);
    if (int_codes) {  // padding: zero codes, zero multipliers
      std::fill(int_codes + r * k_pad + k, int_codes + (r + 1) * k_pad, int8_t{0});
      float* mult = int_mult + r * (k_pad / 32);
      std::fill(mult, mult + k_pad / 32, 0.0f);
      for (int64_t b = 0; b < blocks; ++b) mult[b] = static_cast<float>(std::ldexp(1.0, e8m0[r * blocks + b] - 127 - shift - 1));
    }
  }
}

// The integer form's codes as FpGemm::act_pairs: per dword j the codes of k = 2j, 2j + 1, twice.
std::vector<uint32_t> act_code_pairs(const std::vector<int8_t>& ints) {
  std::vector<uint32_t> pairs(ints.size() / 2);
  for (size_t j = 0; j < pairs.size(); ++j) {
    const uint32_t lo = static_cast<uint8_t>(ints[2 * j]), hi = static_cast<uint8_t>(ints[2 * j + 1]);
    pairs[j] = (lo | hi << 8) * 0x00010001u;
  }
  return pairs;
}

// 128x128 weight blocks x 1x128 activation groups: every kernel here multiplies the two scales in f32 (the
// AVX2 order). Where some product would leave f32's normal range -- a weight block scale below about 2^-84 or
// above 2^8 meeting an activation group scale near its floor (1e-10 / 448) or ceiling -- the rounded product
// would be a subnormal of few bits, zero or Inf (0 x Inf = NaN on an all-zero block), not the reference's
// value: the reference runs that call. The weights' range is the state's; only this call's activation
// scales are scanned (M x K / 128 of them).
bool block_scale_products_normal(const FpState& st, const std::vector<float>& act_block) {
  float alo, ahi;
  if (st.block_scale_hi == 0.0f || !nonzero_range(act_block.data(), act_block.size(), alo, ahi)) return true;
  return static_cast<double>(st.block_scale_lo) * alo >= 0x1p-126 &&
         static_cast<double>(st.block_scale_hi) * ahi < 0x1p128;
}

}  // namespace

Status FpAvx2Kernel::apply_impl(const LinearLayer& layer, const Activation& x, const Tensor* bias, Tensor& out) const {
  const FpState& st = *state_of(layer);
  const LinearConfig& c = layer.config;
  if (st.use_reference) return reference_apply(layer, x, bias, out);
  const int64_t m = x.rows();
  const int64_t block_cols = (c.k + 127) / 128;

  FpActQuant q;
  q.m = m;
  q.k = c.k;
  if (!x.is_quantized()) {
    const Tensor& xd = x.dense_tensor();
    q.x = xd.raw();
    q.x_kind = static_cast<FloatKind>(float_kind_of(xd.dtype()));
    q.ldx = xd.strides()[0];
  }
  if (c.activation_key) {
    const QuantKey& ak = *c.activation_key;
    if (c.family == Family::kFp8BlockScaled) {
      q.mode = FpActMode::kFp8Dyn1x128;
    } else if (c.family == Family::kNvfp4) {
      q.mode = FpActMode::kNvfp4Dyn;
      q.global_scale = st.in_global;
      q.dynamic_global = ak.scale2 && !ak.scale2->is_static;
    } else if (ak.scale.dtype == DType::kE8M0) {
      q.mode = FpActMode::kMxDyn;
      q.elem = elem_of(ak.dtype);
      q.mx_rule = default_mx_rule(ak) == MxScaleRule::kQuarkEven ? FpMxRule::kQuarkEven : FpMxRule::kCeilOverMax;
    } else {  // FP8 per tensor / per token (fp8_scaled_mm, and MXFP4 weights with static FP8 input)
      q.mode = ak.scale.is_static ? FpActMode::kFp8Static
               : ak.scale.group.is_per_token() ? FpActMode::kFp8DynToken
                                               : FpActMode::kFp8DynTensor;
      q.static_scale = st.in_scale;
    }
  }
  std::vector<float> row_scale(static_cast<size_t>(m), 1.0f);
  std::vector<float> act_block(q.mode == FpActMode::kFp8Dyn1x128 ? static_cast<size_t>(m * block_cols) : 0);
  const std::vector<float> b = bias_as_f32(bias, c.n);
  FpGemm g;
  g.packed = st.packed.get();
  g.elem = st.elem;
  g.n = st.n;
  g.n_pad = st.n_pad;
  g.k_pad = st.k_pad;
  g.group_scale = st.group_scale;
  g.e4m3_f32_groups = st.e4m3_f32_groups;
  g.grp = st.grp.data();
  g.group = st.group;
  g.block_scale = st.block_scale.empty() ? nullptr : st.block_scale.data();
  g.block_cols = st.block_cols;
  g.act_block_scale = act_block.empty() ? nullptr : act_block.data();
  const bool any_row_scale = q.mode != FpActMode::kDense && q.mode != FpActMode::kFp8Dyn1x128 && q.mode != FpActMode::kMxDyn;
  g.row_scale = any_row_scale ? row_scale.data() : nullptr;
  g.col_scale = st.col_scale.empty() ? nullptr : st.col_scale.data();
  g.bias = b.empty() ? nullptr : b.data();
  g.col_nan = st.col_nan.empty() ? nullptr : st.col_nan.data();
  g.lda = st.k_pad;
  g.m = m;
  g.out = out.raw();
  g.out_kind = static_cast<FloatKind>(float_kind_of(out.dtype()));
  g.threads = threads::threads_for(packed_bytes(st), 2 * m * st.n_pad * st.k_pad);
  q.k_pad = st.k_pad;
  q.row_scale = row_scale.data();
  q.block_scale = act_block.data();
  // AMX: the OS grant is asked here too (cached), so a kernel applied without is_supported never faults.
  const bool bf16 = !avx2_below_tiles(m) &&
                    (isa_ == Isa::kAvx512Bf16Vbmi || (isa_ == Isa::kAmxBf16 && amx_tile_permission_refusal().empty()));
  const Bf16Mma mma = isa_ == Isa::kAmxBf16 ? Bf16Mma::kAmxTiles : Bf16Mma::kAvx512Registers;
  if (bf16 && !x.is_quantized()) {  // BF16 rows or quantized activations made straight into the tiles' BF16 rows
    AlignedBytes act16 = aligned_bytes(amx_bf16_act_rows(m) * st.k_pad * 2);
    uint16_t* a16 = reinterpret_cast<uint16_t*>(act16.get());
    if (amx_prepare_bf16_activations(q, a16)) {
      if (!act_block.empty() && !block_scale_products_normal(st, act_block)) return reference_apply(layer, x, bias, out);
      fp_records_gemm_bf16_rows(g, a16, mma);
      return Status::ok();
    }
  }

  AlignedBytes act = aligned_bytes(m * st.k_pad * 4);
  uint8_t bad = 0, inexact = 0;
  q.act = reinterpret_cast<float*>(act.get());
  q.bad_input = &bad;
  q.inexact = &inexact;
  // E2M1 weights with E2M1 / E2M3 activations: their integer form too (the integer path of fp_quad_avx2.cpp).
  const bool int_act = x.is_quantized() ? fp_act_int_shift(elem_of(x.quantized_tensor().key.dtype)) >= 0
                                        : q.mode == FpActMode::kNvfp4Dyn ||
                                              (q.mode == FpActMode::kMxDyn && fp_act_int_shift(q.elem) >= 0);
  const int64_t act_group = q.mode == FpActMode::kNvfp4Dyn ? 16 : 32;
  std::vector<int8_t> int_codes;
  std::vector<float> int_mult;
  if (st.elem == FpElem::kE2M1 && int_act && st.group == act_group) {
    int_codes.resize(static_cast<size_t>(m * st.k_pad));
    int_mult.resize(static_cast<size_t>(m * (st.k_pad / st.group)));
    q.int_codes = int_codes.data();
    q.int_mult = int_mult.data();
  }
  // Dense rows convert at ~1 element/ns; the quantizing modes round in double, 4 at a time (~3-4 ns an element
  // on a Zen 3 core).
  q.threads = threads::threads_for(0, m * c.k * (q.mode == FpActMode::kDense ? 1 : 4), 1.0);
  if (x.is_quantized()) {
    decode_mx_activation(x.quantized_tensor(), st.k_pad, q.act, q.int_codes, q.int_mult, &inexact);
  } else {
    fp_prepare_activations_avx2(q);
  }
  if (bad) return Status::error(std::string(name()) + ": the activation holds Inf or NaN (it cannot be quantized)");
  if (inexact) return reference_apply(layer, x, bias, out);  // MX / NVFP4 activation scales beyond f32's range
  if (!act_block.empty() && !block_scale_products_normal(st, act_block)) return reference_apply(layer, x, bias, out);
  g.act = q.act;
  std::vector<uint32_t> pairs;
  if (q.int_codes) {
    pairs = act_code_pairs(int_codes);
    g.act_pairs = pairs.data();
    g.act_mult = int_mult.data();
  }
  if (!bf16 || !fp_records_gemm_bf16(g, mma)) fp_gemm_avx2(g);
  return Status::ok();
}

}  // namespace qlinear::x86
