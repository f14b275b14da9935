// INT8 W8A8 kernels (x86_avx512vnni_int8, x86_avx2_int8): checks, weight prepacking and the apply
// driver, baseline flags. The layout and the u8 x s8 correction are described in int8_isa.hpp.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backends/x86/amx_isa.hpp"
#include "backends/x86/int8_isa.hpp"
#include "backends/x86/host_state_io.hpp"
#include "backends/x86/x86_kernels.hpp"
#include "core/threads.hpp"

namespace qlinear::x86 {

namespace {

// |sum_k (q + 128) w| <= 255 * 128 * K stays below 2^31: int32 sums never wrap.
constexpr int64_t kMaxK = 65536;

struct Int8State {
  int64_t n = 0, k = 0, n_pad = 0, k_pad = 0;
  AlignedBytes packed;          // VNNI panels [n_pad/16][k_pad/4][16][4]
  std::vector<int32_t> colsum;  // [n_pad]
  int32_t colsum_absmax = 0;
  std::vector<float> w_scale;   // [n_pad]
  float in_scale = 1.0f;        // static activation keys
  int32_t in_zp = 0;
};

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

int64_t packed_offset(int64_t k_pad, int64_t n, int64_t k) {
  return (n / 16) * 16 * k_pad + (k / 4) * 64 + (n % 16) * 4 + (k % 4);
}

float max_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const float* p = c.data<float>();
  return *std::max_element(p, p + c.numel());
}

const Int8State* state_of(const LinearLayer& layer) { return static_cast<const Int8State*>(layer.kernel_state.get()); }

// max |colsum|, from the column sums.
void set_colsum_absmax(Int8State& st) {
  for (int32_t s : st.colsum) st.colsum_absmax = std::max(st.colsum_absmax, s < 0 ? -s : s);
}

}  // namespace

const Int8Kernel kAvx512VnniInt8("x86_avx512vnni_int8", Isa::kAvx512Vnni);
const Int8Kernel kAvx2Int8("x86_avx2_int8", Isa::kAvx2);
const Int8Kernel kAmxInt8("x86_amx_int8", Isa::kAmxInt8);

std::string_view Int8Kernel::summary() const {
  if (isa_ == Isa::kAmxInt8) {
    return "INT8 W8A8, AMX-INT8 tdpbusd 32x32 blocks for M >= 8 (16x64 up to 16 rows; smaller M: the AVX-512 VNNI "
           "kernel) on prepacked "
           "[N/16][K/4][16][4] weights, exact int32 sums";
  }
  return isa_ == Isa::kAvx512Vnni
             ? "INT8 W8A8, AVX-512 VNNI vpdpbusd on prepacked [N/16][K/4][16][4] weights, exact int32 sums"
             : "INT8 W8A8, AVX2 vpmaddwd on prepacked [N/16][K/4][16][4] weights, exact int32 sums";
}

Verdict Int8Kernel::can_implement(const LinearConfig& c) const {
  if (c.family != Family::kInt8ScaledMM) return Verdict::no("layer family is " + std::string(family_name(c.family)));
  if (!c.activation_key) return Verdict::no("needs quantized INT8 activations (W8A8)");
  if (c.k > kMaxK) {
    return Verdict::no("K=" + std::to_string(c.k) + " exceeds " + std::to_string(kMaxK) +
                       " (int32 sums of u8 x s8 products could wrap)");
  }
  return Verdict::yes();  // any N and K: both are padded at prepack
}

Status Int8Kernel::process_impl(LinearLayer& layer) const {
  const LinearConfig& c = layer.config;
  auto st = std::make_shared<Int8State>(planned_sizes<Int8State>(c, k_align()));
  const Tensor w = layer.params.at("weight").contiguous();
  const int8_t* wp = w.data<int8_t>();
  st->packed = weight_bytes(st->n_pad * st->k_pad);
  int8_t* dst = reinterpret_cast<int8_t*>(st->packed.get());
  std::memset(dst, 0, static_cast<size_t>(st->n_pad * st->k_pad));
  st->colsum.assign(static_cast<size_t>(st->n_pad), 0);
  threads::parallel_for(c.n, threads::threads_for(2 * c.n * c.k, 0), [&](int64_t n) {
    int32_t sum = 0;
    for (int64_t k = 0; k < c.k; ++k) {
      const int8_t v = wp[n * c.k + k];
      dst[packed_offset(st->k_pad, n, k)] = v;
      sum += v;
    }
    st->colsum[n] = sum;
  });
  set_colsum_absmax(*st);

  // Weight scales, one per output column: per-channel as stored, per-tensor from the column's shard.
  const Tensor ws = layer.params.at("weight_scale").contiguous();
  st->w_scale.assign(static_cast<size_t>(st->n_pad), 0.0f);
  if (c.weight_key.scale.group.is_per_channel()) {
    std::copy(ws.data<float>(), ws.data<float>() + c.n, st->w_scale.begin());
  } else {
    int64_t row = 0;
    for (int64_t s = 0; s < c.num_shards(); ++s) {
      const int64_t width = c.logical_widths.empty() ? c.n : c.logical_widths[s];
      const float v = ws.data<float>()[ws.numel() == 1 ? 0 : s];
      std::fill(st->w_scale.begin() + row, st->w_scale.begin() + row + width, v);
      row += width;
    }
  }
  for (int64_t n = 0; n < c.n; ++n) {
    if (!std::isfinite(st->w_scale[n]) || st->w_scale[n] < 0) {
      return Status::error("weight_scale for column " + std::to_string(n) + " is " + std::to_string(st->w_scale[n]) +
                           " (scales must be finite and >= 0)");
    }
  }
  const QuantKey& ak = *c.activation_key;
  if (ak.scale.is_static) {
    st->in_scale = max_of(layer.params.at("input_scale"));  // fused shards share the largest (vLLM)
    if (!std::isfinite(st->in_scale) || st->in_scale <= 0) {
      return Status::error("input_scale is " + std::to_string(st->in_scale) + " (must be finite and > 0)");
    }
    if (!ak.symmetric) st->in_zp = layer.params.at("input_zero_point").contiguous().data<int32_t>()[0];
  }
  layer.kernel_state = st;
  layer.params.erase("weight");  // the packed copy replaces it; row_major_weight rebuilds it
  return Status::ok();
}

// Processed layout version 1: meta I64 [n, k, n_pad, k_pad]; packed I8 [n_pad * k_pad] (the VNNI panels);
// colsum I32 [n_pad]; w_scale F32 [n_pad]; in_scale F32 [1]; in_zp I32 [1].
namespace {

int64_t packed_bytes(const Int8State& s) { return s.n_pad * s.k_pad; }

const processed_io::StateSchema<Int8State>& int8_schema() {
  namespace io = processed_io;
  using S = Int8State;
  constexpr auto n_pad = [](const S& s) { return Shape{s.n_pad}; };
  static const io::StateSchema<S> schema{
      .i64_groups = {{"meta", size_fields_and<S>()}},
      .f32_groups = {},
      .tensors = {
          packed_entry<S, DType::kI8, &packed_bytes>(),
          io::vector_entry<&S::colsum, DType::kI32>("colsum", n_pad),
          io::vector_entry<&S::w_scale, DType::kF32>("w_scale", n_pad),
          {"in_scale", nullptr, [](const S&) { return DType::kF32; }, [](const S&) { return Shape{1}; }, nullptr,
           [](const S& s) { return io::copy_1d(&s.in_scale, DType::kF32, 1); },
           [](S& s, const Tensor& t) { s.in_scale = t.data<float>()[0]; }},
          {"in_zp", nullptr, [](const S&) { return DType::kI32; }, [](const S&) { return Shape{1}; }, nullptr,
           [](const S& s) { return io::copy_1d(&s.in_zp, DType::kI32, 1); },
           [](S& s, const Tensor& t) { s.in_zp = t.data<int32_t>()[0]; }},
      }};
  return schema;
}

}  // namespace

Result<ProcessedWeights> Int8Kernel::export_impl(const LinearLayer& layer) const {
  return export_host_state(int8_schema(), layer);
}

Status Int8Kernel::import_impl(LinearLayer& layer, const ProcessedWeights& w) const {
  return import_host_state(int8_schema(), planned_sizes<Int8State>(layer.config, k_align()), w, layer, &set_colsum_absmax);
}

Result<Tensor> Int8Kernel::row_major_weight(const LinearLayer& layer) const {
  const Int8State* st = state_of(layer);
  if (st == nullptr) return layer.get("weight");
  Tensor w = Tensor::empty(DType::kI8, {st->n, st->k});
  const int8_t* src = reinterpret_cast<const int8_t*>(st->packed.get());
  for (int64_t n = 0; n < st->n; ++n) {
    for (int64_t k = 0; k < st->k; ++k) w.data<int8_t>()[n * st->k + k] = src[packed_offset(st->k_pad, n, k)];
  }
  return w;
}

Status Int8Kernel::apply_impl(const LinearLayer& layer, const Activation& x, const Tensor* bias, Tensor& out) const {
  const Int8State& st = *state_of(layer);
  const LinearConfig& c = layer.config;
  const int64_t m = x.rows();
  const bool offset128 = isa_ != Isa::kAvx2;
  // The OS grant is asked here too (cached): a kernel applied without is_supported must not fault.
  const bool amx = isa_ == Isa::kAmxInt8 && m >= kAmxInt8MinM && amx_tile_permission_refusal().empty();
  // AMX reads whole 16-row tiles, stored tile by tile (Int8ActQuant::amx_tiles): the rows past m are padding
  // codes whose sums are never stored.
  const int64_t m_rows = amx ? round_up(m, 16) : m;
  AlignedBytes codes = aligned_bytes(m_rows * st.k_pad);
  if (m_rows > m) {
    uint8_t* last = codes.get() + (m_rows - 16) * st.k_pad;  // the last 16-row block; rows m % 16 .. 15 of each chunk
    for (int64_t c = 0; c < st.k_pad / 64; ++c) {
      std::memset(last + c * 1024 + m % 16 * 64, 0x80, static_cast<size_t>((16 - m % 16) * 64));
    }
  }
  // Where code (r, k) goes: the row order, or Int8ActQuant::amx_tiles's.
  const auto code_at = [&](int64_t r, int64_t k) {
    return amx ? codes.get() + r / 16 * 16 * st.k_pad + k / 64 * 1024 + r % 16 * 64 + k % 64
               : codes.get() + r * st.k_pad + k;
  };
  // The int8 kernels multiply ~4x faster than f32 FMA (vpmaddwd / vpdpbusd).
  const int gemm_threads =
      threads::threads_for(st.n_pad * st.k_pad, 2 * m * st.n_pad * st.k_pad, 4 * threads::kF32FlopsPerNs);
  std::vector<float> a_scale(static_cast<size_t>(m));
  std::vector<int32_t> a_zp(static_cast<size_t>(m), 0);

  if (x.is_quantized()) {
    // Pre-quantized with this layer's key (checked by apply): its own codes, scales and zero points.
    const QuantizedTensor& q = x.quantized_tensor();
    const Tensor data = q.data.contiguous(), scale = q.scale.contiguous();
    const Tensor zp = q.zero_point.defined() ? q.zero_point.contiguous() : Tensor();
    const uint8_t flip = offset128 ? 0x80 : 0x00;
    for (int64_t r = 0; r < m; ++r) {
      const uint8_t* src = data.data<uint8_t>() + r * c.k;
      for (int64_t k = 0; k < c.k; ++k) *code_at(r, k) = src[k] ^ flip;
      for (int64_t k = c.k; k < st.k_pad; ++k) *code_at(r, k) = flip;
      a_scale[r] = scale.data<float>()[scale.numel() == 1 ? 0 : r];
      if (zp.defined()) a_zp[r] = zp.data<int32_t>()[zp.numel() == 1 ? 0 : r];
    }
  } else {
    const Tensor& xd = x.dense_tensor();
    const QuantKey& ak = *c.activation_key;
    std::vector<uint8_t> bad(static_cast<size_t>(m), 0);
    Int8ActQuant q;
    q.x = xd.raw();
    q.x_kind = static_cast<FloatKind>(float_kind_of(xd.dtype()));
    q.m = m;
    q.k = c.k;
    q.ldx = xd.strides()[0];
    q.dynamic = !ak.scale.is_static;
    q.symmetric = ak.symmetric;
    q.static_scale = st.in_scale;
    q.static_zp = st.in_zp;
    q.offset128 = offset128;
    q.codes = codes.get();
    q.k_pad = st.k_pad;
    q.amx_tiles = amx;
    q.scale = a_scale.data();
    q.zp = a_zp.data();
    q.bad_row = bad.data();
    // ~2 ns per element (amax pass, then round); and at least the GEMM's threads, which it wakes anyway: 6144 x
    // 4096 at M = 16 on the 2-core Xeon (AMX, 2 threads, best median of 8 interleaved runs) 0.91 -> 0.88 ms.
    q.threads = std::max(threads::threads_for(0, m * c.k * 2, 1.0), gemm_threads);
    int8_quantize_activations_avx2(q);
    for (int64_t r = 0; r < m; ++r) {
      if (bad[r]) return Status::error("activation row " + std::to_string(r) + " holds Inf or NaN");
    }
  }

  const std::vector<float> b = bias_as_f32(bias, c.n);
  Int8Gemm g;
  g.packed = reinterpret_cast<const int8_t*>(st.packed.get());
  g.n_pad = st.n_pad;
  g.k_pad = st.k_pad;
  g.act = codes.get();
  g.m = m;
  g.threads = gemm_threads;
  g.epi.w_scale = st.w_scale.data();
  g.epi.colsum = st.colsum.data();
  g.epi.colsum_absmax = st.colsum_absmax;
  g.epi.bias = b.empty() ? nullptr : b.data();
  g.epi.a_scale = a_scale.data();
  g.epi.a_zp = a_zp.data();
  g.epi.offset = offset128 ? 128 : 0;
  g.epi.out = out.raw();
  g.epi.out_kind = static_cast<FloatKind>(float_kind_of(out.dtype()));
  g.epi.n = c.n;
  if (amx) {
    int8_gemm_amx(g);
  } else if (isa_ != Isa::kAvx2) {
    int8_gemm_avx512vnni(g);
  } else {
    int8_gemm_avx2(g);
  }
  return Status::ok();
}

}  // namespace qlinear::x86
