// FP8 / MXFP8 weight-only kernels (x86_avx512bf16_fp8_w8a16, x86_avx512bf16_mxfp8_w8a16): checks, weight
// prepacking, the exact scalar path and the apply driver, baseline flags. Layout and numerics: w8a16_isa.hpp.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backends/x86/amx_isa.hpp"
#include "backends/x86/w8a16_isa.hpp"
#include "backends/x86/host_state_io.hpp"
#include "backends/x86/panel_block_scales.hpp"
#include "backends/x86/x86_kernels.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// E8M0 exponents whose folded BF16 weights stay normal for every nonzero magnitude of the element format:
// E4M3 [2^-9, 448], E2M1 [0.5, 6].
constexpr int kMinFoldExp[2] = {-117, -125};
constexpr int kMaxFoldExp[2] = {119, 125};

struct W8A16State {
  int64_t n = 0, k = 0, n_pad = 0, k_pad = 0;
  W8Elem elem = W8Elem::kE4M3;
  AlignedBytes packed;
  W8ScaleMode mode = W8ScaleMode::kPerColumn;
  std::vector<float> col_scale;    // [n_pad]
  std::vector<float> block_scale;  // [n_pad/16 * ceil(k/128)], per panel (panel_block_scales.hpp)
  int64_t block_cols = 0;
  std::vector<uint8_t> mx_scale;   // [n_pad/16][k_pad/32][16]
  // Exact scalar path: NaN weight codes, or MX scales that would push folded BF16 weights out of range.
  bool exact_path = false;
  std::vector<uint8_t> mx_raw;     // [n][k/32] as the checkpoint stored it (exact path)
};

// Swizzled position of W[n][k] inside its quad's 64 codes (w8a16_isa.hpp).
int64_t swizzle(int64_t n, int64_t k) {
  const int64_t j = n % 16, t = k % 4;
  return 16 * (j / 4) + 8 * (t / 2) + 2 * (j % 4) + t % 2;
}

// Byte offset of W[n][k] in the E4M3 panels.
int64_t packed_offset(int64_t k_pad, int64_t n, int64_t k) { return (n / 16) * 16 * k_pad + (k / 4) * 64 + swizzle(n, k); }

uint8_t code_at(const W8A16State& st, int64_t n, int64_t k) {
  if (st.elem == W8Elem::kE4M3) return st.packed.get()[packed_offset(st.k_pad, n, k)];
  const int64_t s = swizzle(n, k);
  const uint8_t byte = st.packed.get()[(n / 16) * 8 * st.k_pad + (k / 4) * 32 + s % 32];
  return s < 32 ? (byte & 0x0F) : (byte >> 4);
}

void set_code(W8A16State& st, int64_t n, int64_t k, uint8_t code) {
  if (st.elem == W8Elem::kE4M3) {
    st.packed.get()[packed_offset(st.k_pad, n, k)] = code;
    return;
  }
  const int64_t s = swizzle(n, k);
  uint8_t& byte = st.packed.get()[(n / 16) * 8 * st.k_pad + (k / 4) * 32 + s % 32];
  byte = s < 32 ? static_cast<uint8_t>((byte & 0xF0) | code) : static_cast<uint8_t>((byte & 0x0F) | (code << 4));
}

DType elem_dtype(W8Elem e) { return e == W8Elem::kE4M3 ? DType::kF8E4M3 : DType::kF4E2M1; }

const W8A16State* state_of(const LinearLayer& layer) {
  return static_cast<const W8A16State*>(layer.kernel_state.get());
}

double weight_value(const W8A16State& st, int64_t n, int64_t k) {
  const double v = decode(elem_dtype(st.elem), code_at(st, n, k));
  switch (st.mode) {
    case W8ScaleMode::kPerColumn: return v * st.col_scale[n];
    case W8ScaleMode::kBlock128: return v * st.block_scale[(n / 16) * st.block_cols + k / 128];
    case W8ScaleMode::kMx: return std::ldexp(v, static_cast<int>(st.mx_raw[n * (st.k / 32) + k / 32]) - 127);
  }
  return v;
}

// The reference's numerics, scalar: FP64 products and sum, one rounding.
void exact_apply(const W8A16State& st, const uint16_t* x, int64_t lda, int64_t m, const float* bias, Tensor& out) {
  std::vector<double> w(static_cast<size_t>(st.n * st.k));
  for (int64_t n = 0; n < st.n; ++n)
    for (int64_t k = 0; k < st.k; ++k) w[n * st.k + k] = weight_value(st, n, k);
  const DType od = out.dtype();
  // An item per 64 outputs of a row; ~1 ns per multiply-add in double.
  const int64_t blocks = (st.n + 63) / 64;
  threads::parallel_for(m * blocks, threads::threads_for(0, m * st.n * st.k, 1.0), [&](int64_t item) {
    const int64_t i = item / blocks, n0 = item % blocks * 64;
    for (int64_t n = n0; n < std::min(st.n, n0 + 64); ++n) {
      double acc = 0;
      for (int64_t k = 0; k < st.k; ++k) acc += static_cast<double>(bf16_to_float(x[i * lda + k])) * w[n * st.k + k];
      if (bias) acc += bias[n];
      const int64_t o = i * st.n + n;
      if (od == DType::kF32) {
        out.data<float>()[o] = static_cast<float>(acc);
      } else {
        out.data<uint16_t>()[o] = static_cast<uint16_t>(encode(od, acc, Overflow::kNonSaturating));
      }
    }
  });
}

}  // namespace

const W8A16Kernel kAvx512Bf16Fp8W8A16("x86_avx512bf16_fp8_w8a16", Family::kFp8WeightOnly);
const W8A16Kernel kAvx512Bf16Mxfp8W8A16("x86_avx512bf16_mxfp8_w8a16", Family::kMxfp8);
const W8A16Kernel kAvx512Bf16Mxfp4W4A16("x86_avx512bf16_mxfp4_w4a16", Family::kMxfp4);
const W8A16Kernel kAmxBf16Fp8W8A16("x86_amx_bf16_fp8_w8a16", Family::kFp8WeightOnly, Isa::kAmxBf16);
const W8A16Kernel kAmxBf16Mxfp8W8A16("x86_amx_bf16_mxfp8_w8a16", Family::kMxfp8, Isa::kAmxBf16);
const W8A16Kernel kAmxBf16Mxfp4W4A16("x86_amx_bf16_mxfp4_w4a16", Family::kMxfp4, Isa::kAmxBf16);

std::string_view W8A16Kernel::summary() const {
  if (isa_ == Isa::kAmxBf16) {
    return family_ == Family::kMxfp4
               ? "MXFP4 weights x BF16 activations, AMX-BF16 tdpbf16ps for M >= 2 on weights decoded to BF16 tiles "
                 "(E8M0 folded), f32 accumulation; M = 1: the same decode through vdpbf16ps, E8M0 on each block's sum"
           : family_ == Family::kMxfp8
               ? "MXFP8 weights x BF16 activations, AMX-BF16 tdpbf16ps for M >= 2 on weights decoded to BF16 tiles "
                 "(E8M0 folded), f32 accumulation; M = 1: the same decode through vdpbf16ps, E8M0 on each block's sum"
               : "FP8 E4M3 weights (per-tensor/channel scales) x BF16 activations, AMX-BF16 tdpbf16ps for M >= 2, "
                 "f32 accumulation; M = 1: the same decode through vdpbf16ps";
  }
  if (family_ == Family::kMxfp4) {
    return "MXFP4 weights x BF16 activations, E2M1->BF16 by vpshufb with the E8M0 scale folded, vdpbf16ps, f32 "
           "accumulation; M <= 4: E8M0 on each block's sum";
  }
  return family_ == Family::kMxfp8
             ? "MXFP8 weights x BF16 activations, E4M3->BF16 in registers with the E8M0 scale folded, vdpbf16ps, "
               "f32 accumulation"
             : "FP8 E4M3 weights (per-tensor/channel/128x128 scales) x BF16 activations, vdpbf16ps, f32 accumulation";
}

Verdict W8A16Kernel::is_supported(const Platform& platform) const {
  return isa_supported(platform, isa_);
}

std::vector<MRoute> W8A16Kernel::m_routes(const LinearConfig& config) const {
  if (isa_ != Isa::kAmxBf16) return LinearKernel::m_routes(config);
  const std::string self(name());
  return {MRoute{1, kAmxBf16MinM - 1, self,
                 "AVX-512 VBMI + BF16 weight streaming (the tile path's decode, vdpbf16ps): a 16-row tile would waste "
                 "its rows"},
          MRoute{kAmxBf16MinM, MRoute::kNoLimit, self, "AMX-BF16 tiles"}};
}

Verdict W8A16Kernel::can_implement(const LinearConfig& c) const {
  if (c.family != family_) return Verdict::no("layer family is " + std::string(family_name(c.family)));
  if (c.activation_key) {
    return Verdict::no("activations are quantized (" + key_name(*c.activation_key) +
                       "); this kernel is weight-only (A16)");
  }
  if (c.input_dtype != DType::kBF16) {
    return Verdict::no("input dtype is " + std::string(qlinear::name(c.input_dtype)) +
                       ", not bf16 (vdpbf16ps multiplies bf16; rounding the input to bf16 would change the numerics)");
  }
  if (isa_ == Isa::kAmxBf16 && c.weight_key.scale.dtype != DType::kE8M0 && c.weight_key.scale.group == kBlock128x128) {
    return Verdict::no("128x128 block weight scales (the AMX kernel takes per-tensor/channel or MX scales; the "
                       "AVX-512 kernel runs them)");
  }
  return panels_take_block_grid(c);  // any N and K: padded at prepack
}

Status W8A16Kernel::process_impl(LinearLayer& layer) const {
  const LinearConfig& c = layer.config;
  auto st = std::make_shared<W8A16State>();
  st->n = c.n;
  st->k = c.k;
  st->n_pad = round_up(c.n, 16);
  st->k_pad = round_up(c.k, 32);
  st->elem = c.family == Family::kMxfp4 ? W8Elem::kE2M1 : W8Elem::kE4M3;
  const bool fp4 = st->elem == W8Elem::kE2M1;
  const Tensor w = layer.params.at("weight").contiguous();
  const uint8_t* wp = w.data<uint8_t>();
  const int64_t row_bytes = fp4 ? storage_bytes(DType::kF4E2M1, c.k) : c.k;
  // Checkpoint code of W[n][k] (FP4: two per byte, low nibble first).
  auto code = [&](int64_t n, int64_t k) -> uint8_t {
    return fp4 ? static_cast<uint8_t>(unpack_code(DType::kF4E2M1, wp + n * row_bytes, k)) : wp[n * c.k + k];
  };
  const int64_t bytes = st->n_pad * st->k_pad / (fp4 ? 2 : 1);
  st->packed = weight_bytes(bytes);
  std::memset(st->packed.get(), 0, static_cast<size_t>(bytes));
  std::atomic<bool> nan_code{false};
  // An item per 16 rows (FP4: a panel's 16 rows fill its bytes); ~5 ns per code.
  threads::parallel_for((c.n + 15) / 16, threads::threads_for(0, c.n * c.k * 5, 1.0), [&](int64_t p) {
    bool nan = false;
    for (int64_t r = p * 16; r < std::min(p * 16 + 16, c.n); ++r) {
      for (int64_t k = 0; k < c.k; ++k) {
        const uint8_t v = code(r, k);
        nan = nan || (!fp4 && (v & 0x7F) == 0x7F);
        set_code(*st, r, k, v);
      }
    }
    if (nan) nan_code.store(true, std::memory_order_relaxed);
  });
  st->exact_path = nan_code.load();

  const Tensor ws = layer.params.at("weight_scale").contiguous();
  const GroupShape g = c.weight_key.scale.group;
  if (c.weight_key.scale.dtype == DType::kE8M0) {
    st->mode = W8ScaleMode::kMx;
    const int64_t kb = c.k / 32, kb_pad = st->k_pad / 32;
    const uint8_t* e = static_cast<const uint8_t*>(ws.raw());
    st->mx_raw.assign(e, e + c.n * kb);
    st->mx_scale.assign(static_cast<size_t>(st->n_pad / 16 * kb_pad * 16), 127);
    for (int64_t n = 0; n < c.n; ++n) {
      for (int64_t b = 0; b < kb; ++b) {
        const uint8_t ecode = e[n * kb + b];
        if (ecode == 0xFF) return Status::error("weight_scale[" + std::to_string(n) + ", " + std::to_string(b) + "] is 255, the E8M0 NaN");
        st->mx_scale[((n / 16) * kb_pad + b) * 16 + n % 16] = ecode;
        const int d = static_cast<int>(ecode) - 127;
        if (d < kMinFoldExp[fp4] || d > kMaxFoldExp[fp4]) {
          bool any = false;
          for (int64_t k = b * 32; k < b * 32 + 32; ++k) any = any || (code(n, k) & (fp4 ? 0x07 : 0x7F)) != 0;
          st->exact_path = st->exact_path || any;
        }
      }
    }
  } else if (g == kBlock128x128) {
    st->mode = W8ScaleMode::kBlock128;
    st->block_cols = (c.k + 127) / 128;
    st->block_scale = panel_block_scales(c, ws, st->n_pad);
  } else {
    st->mode = W8ScaleMode::kPerColumn;
    st->col_scale.assign(static_cast<size_t>(st->n_pad), 0.0f);
    if (g.is_per_channel()) {
      std::copy(ws.data<float>(), ws.data<float>() + c.n, st->col_scale.begin());
    } else {
      int64_t row = 0;
      for (int64_t s = 0; s < c.num_shards(); ++s) {
        const int64_t width = c.logical_widths.empty() ? c.n : c.logical_widths[s];
        std::fill(st->col_scale.begin() + row, st->col_scale.begin() + row + width,
                  ws.data<float>()[ws.numel() == 1 ? 0 : s]);
        row += width;
      }
    }
  }
  layer.kernel_state = st;
  layer.params.erase("weight");  // the packed copy replaces it; row_major_weight rebuilds it
  return Status::ok();
}

// Processed layout version 2 (1 had block scales per 128 rows): meta I64 [n, k, n_pad, k_pad, elem, mode,
// block_cols]; exact_path I64 [1]; packed U8 [panel bytes]; then by scale mode: col_scale F32 [n_pad] |
// block_scale F32 [n_pad/16 * block_cols] | mx_scale U8 [n_pad/16 * k_pad/32 * 16] and mx_raw U8 [n * k/32].
namespace {

// Sizes and modes from the layer's config (the processed buffers are filled by import).
W8A16State planned_w8a16_state(const LinearConfig& c) {
  W8A16State s = planned_sizes<W8A16State>(c, 32);
  s.elem = c.family == Family::kMxfp4 ? W8Elem::kE2M1 : W8Elem::kE4M3;
  s.mode = c.weight_key.scale.dtype == DType::kE8M0   ? W8ScaleMode::kMx
           : c.weight_key.scale.group == kBlock128x128 ? W8ScaleMode::kBlock128
                                                       : W8ScaleMode::kPerColumn;
  s.block_cols = s.mode == W8ScaleMode::kBlock128 ? (c.k + 127) / 128 : 0;
  return s;
}

int64_t packed_bytes(const W8A16State& s) { return s.n_pad * s.k_pad / (s.elem == W8Elem::kE2M1 ? 2 : 1); }

const processed_io::StateSchema<W8A16State>& w8a16_schema() {
  namespace io = processed_io;
  using S = W8A16State;
  constexpr auto mx = [](const S& s) { return s.mode == W8ScaleMode::kMx; };
  static const io::StateSchema<S> schema{
      .i64_groups =
          {{"meta", size_fields_and<S>({{"elem", [](const S& s) { return static_cast<int64_t>(s.elem); }},
                                        {"mode", [](const S& s) { return static_cast<int64_t>(s.mode); }},
                                        {"block_cols", [](const S& s) { return s.block_cols; }}})},
           {"exact_path",
            {{"exact_path", [](const S& s) -> int64_t { return s.exact_path ? 1 : 0; },
              [](S& s, int64_t v) { s.exact_path = v != 0; }}}}},
      .f32_groups = {},
      .tensors = {
          packed_entry<S, DType::kU8, &packed_bytes>(),
          io::vector_entry<&S::col_scale, DType::kF32>(
              "col_scale", [](const S& s) { return Shape{s.n_pad}; },
              [](const S& s) { return s.mode == W8ScaleMode::kPerColumn; }),
          io::vector_entry<&S::block_scale, DType::kF32>(
              "block_scale", [](const S& s) { return Shape{s.n_pad / 16 * s.block_cols}; },
              [](const S& s) { return s.mode == W8ScaleMode::kBlock128; }),
          io::vector_entry<&S::mx_scale, DType::kU8>(
              "mx_scale", [](const S& s) { return Shape{s.n_pad / 16 * (s.k_pad / 32) * 16}; }, mx),
          io::vector_entry<&S::mx_raw, DType::kU8>("mx_raw", [](const S& s) { return Shape{s.n * (s.k / 32)}; }, mx),
      }};
  return schema;
}

}  // namespace

Result<ProcessedWeights> W8A16Kernel::export_impl(const LinearLayer& layer) const {
  return export_host_state(w8a16_schema(), layer);
}

Status W8A16Kernel::import_impl(LinearLayer& layer, const ProcessedWeights& w) const {
  return import_host_state(w8a16_schema(), planned_w8a16_state(layer.config), w, layer);
}

Result<Tensor> W8A16Kernel::row_major_weight(const LinearLayer& layer) const {
  const W8A16State* st = state_of(layer);
  if (st == nullptr) return layer.get("weight");
  if (st->elem == W8Elem::kE2M1) {
    const int64_t row_bytes = storage_bytes(DType::kF4E2M1, st->k);
    Tensor w = Tensor::zeros(DType::kU8, {st->n, row_bytes});
    for (int64_t n = 0; n < st->n; ++n) {
      for (int64_t k = 0; k < st->k; ++k) pack_code(DType::kF4E2M1, w.data<uint8_t>() + n * row_bytes, k, code_at(*st, n, k));
    }
    return w;
  }
  Tensor w = Tensor::empty(DType::kF8E4M3, {st->n, st->k});
  for (int64_t n = 0; n < st->n; ++n) {
    for (int64_t k = 0; k < st->k; ++k) w.data<uint8_t>()[n * st->k + k] = code_at(*st, n, k);
  }
  return w;
}

Status W8A16Kernel::apply_impl(const LinearLayer& layer, const Activation& x, const Tensor* bias, Tensor& out) const {
  const W8A16State& st = *state_of(layer);
  const Tensor& xd = x.dense_tensor();
  if (xd.dtype() != DType::kBF16) {
    return Status::error(std::string(name()) + " takes bf16 activations, got " + xd.describe());
  }
  const int64_t m = xd.size(0);
  const std::vector<float> b = bias_as_f32(bias, st.n);
  // Rows padded with zeros to k_pad (the padded weights are zero, but 0 * NaN garbage would not be).
  const uint16_t* act = xd.data<uint16_t>();
  int64_t lda = xd.strides()[0];
  AlignedBytes padded;
  // AMX reads whole 16-row tiles: rows past m are zeros whose sums are never stored.
  // The OS grant is asked here too (cached): a kernel applied without is_supported must not fault.
  const bool amx = isa_ == Isa::kAmxBf16 && !st.exact_path && amx_tile_permission_refusal().empty();
  const int64_t m_rows = amx ? amx_bf16_act_rows(m) : m;
  if (st.k_pad != st.k || m_rows != m) {
    padded = aligned_bytes(m_rows * st.k_pad * 2);
    uint16_t* p = reinterpret_cast<uint16_t*>(padded.get());
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(p + i * st.k_pad, act + i * lda, static_cast<size_t>(st.k) * 2);
      std::memset(p + i * st.k_pad + st.k, 0, static_cast<size_t>(st.k_pad - st.k) * 2);
    }
    std::memset(p + m * st.k_pad, 0, static_cast<size_t>((m_rows - m) * st.k_pad * 2));
    act = p;
    lda = st.k_pad;
  }
  if (st.exact_path) {
    exact_apply(st, act, lda, m, b.empty() ? nullptr : b.data(), out);
    return Status::ok();
  }
  W8A16Gemm g;
  g.packed = st.packed.get();
  g.elem = st.elem;
  g.n = st.n;
  g.n_pad = st.n_pad;
  g.k_pad = st.k_pad;
  g.mode = st.mode;
  g.col_scale = st.col_scale.data();
  g.block_scale = st.block_scale.data();
  g.block_cols = st.block_cols;
  g.mx_scale = st.mx_scale.data();
  g.act = act;
  g.lda = lda;
  g.m = m;
  g.bias = b.empty() ? nullptr : b.data();
  g.out = out.raw();
  g.out_kind = static_cast<FloatKind>(float_kind_of(out.dtype()));
  g.threads = threads::threads_for(st.n_pad * st.k_pad / (st.elem == W8Elem::kE2M1 ? 2 : 1), 2 * m * st.n_pad * st.k_pad);
  if (amx) {
    w8a16_gemm_amx(g);
  } else {
    w8a16_gemm_avx512bf16(g);
  }
  return Status::ok();
}

}  // namespace qlinear::x86
