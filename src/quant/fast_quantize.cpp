// quantize_fast (quantize.hpp): the reference quantizers' results, bit for bit, from vectorized row kernels
// (fast_quant_isa.hpp says how a code is made and when the reference's own formula decides) run over the
// thread pool in chunks of rows. Scales are derived exactly as the reference derives them (the same rules,
// in double, from the same per-group maxima); only the per-element work differs.
//
//   FP8, symmetric INT8 (any group grid)  1. per row, the max |x| of each column group (parallel over rows)
//                                         2. the groups' maxima and scales (resolve_scales_from, as the reference)
//                                         3. per row, codes of x * (1/s) (parallel over rows)
//   MX (computed exponents)               per row: 1x32 maxima, shared exponents, codes of x * 2^-e
//   NVFP4 (block scales computed)         the tensor's max |x| first when g is computed; then per row: 1x16
//                                         maxima, E4M3 block scales (amax * g/6), codes of x * (g / sf)
//
// Anything else (F64 input, asymmetric INT8, given MX / NVFP4 block scales, an input holding Inf or NaN,
// an empty operand) goes to the reference quantizer, which also words every error.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <new>

#include "core/threads.hpp"
#include "qlinear/platform.hpp"
#include "quant/fast_quant_isa.hpp"
#include "quant/quant_internal.hpp"

namespace qlinear {
namespace quant {

namespace {

using fast::Src;

constexpr uint32_t kNonFiniteBits = 0x7F800000u;
constexpr int64_t kItemElements = int64_t{1} << 16;  // ~64 K elements a work item

float bits_to_float(uint32_t b) { return std::bit_cast<float>(b); }

// ---- output buffers (QuantizeBufferReuse) ---------------------------------------------------------------

constexpr int64_t kReuseMinBytes = int64_t{8} << 20;
constexpr size_t kReuseKept = 2;

struct ReusePool {
  std::mutex mutex;
  int active = 0;                                  // QuantizeBufferReuse objects alive
  std::vector<std::pair<void*, int64_t>> free;     // kept buffers and their capacities
};
ReusePool& reuse_pool() {
  static ReusePool* pool = new ReusePool;  // never destroyed: tensors may be freed during static teardown
  return *pool;
}

void give_back(void* p, int64_t capacity) {
  ReusePool& pool = reuse_pool();
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    if (pool.active > 0 && pool.free.size() < kReuseKept) {
      pool.free.emplace_back(p, capacity);
      return;
    }
  }
  std::free(p);
}

// Tensor::empty, or a kept buffer while a QuantizeBufferReuse lives (contents unspecified either way).
Tensor output_tensor(DType dtype, Shape shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const int64_t bytes = storage_bytes(dtype, numel);
  ReusePool& pool = reuse_pool();
  void* p = nullptr;
  int64_t capacity = 0;
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    if (pool.active == 0 || bytes < kReuseMinBytes) return Tensor::empty(dtype, std::move(shape));
    // The smallest kept buffer that fits.
    auto best = pool.free.end();
    for (auto it = pool.free.begin(); it != pool.free.end(); ++it) {
      if (it->second >= bytes && (best == pool.free.end() || it->second < best->second)) best = it;
    }
    if (best != pool.free.end()) {
      p = best->first;
      capacity = best->second;
      pool.free.erase(best);
    }
  }
  if (p == nullptr) {
    capacity = (bytes + 4095) / 4096 * 4096;
    p = std::aligned_alloc(4096, static_cast<size_t>(capacity));
    if (p == nullptr) throw std::bad_alloc();
  }
  std::shared_ptr<void> owner(p, [capacity](void* q) { give_back(q, capacity); });
  return Tensor::from_blob(p, dtype, std::move(shape), std::move(owner));
}

fast::Grid grid_of(DType elem) {
  const FormatTraits& t = traits(elem);
  fast::Grid g;
  if (elem == DType::kI8) {
    g.integer = true;
    g.mbits = 0;
    g.emin = 0;
    g.sign_bit = 7;
    g.max = 127.0f;
    return g;
  }
  g.mbits = t.mantissa_bits;
  g.emin = 1 - t.exponent_bias;
  g.sign_bit = t.bits - 1;
  g.max = static_cast<float>(t.max_finite);
  return g;
}

// The operand as the kernels see it: contiguous rows of a float type.
struct Operand {
  const uint8_t* base = nullptr;
  Src src = Src::kBF16;
  int64_t rows = 0, cols = 0, esize = 2;
  const void* row(int64_t r) const { return base + r * cols * esize; }
};

// Runs fn(r0, r1) over row ranges of about kItemElements elements on the pool.
template <class Fn>
void for_row_chunks(const Operand& x, Fn&& fn) {
  const int64_t rows_per_item = std::max<int64_t>(1, kItemElements / std::max<int64_t>(x.cols, 1));
  const int64_t items = (x.rows + rows_per_item - 1) / rows_per_item;
  const int threads = static_cast<int>(std::min<int64_t>(threads::max_threads(), std::max<int64_t>(items, 1)));
  threads::parallel_for(items, threads, [&](int64_t i) {
    const int64_t r0 = i * rows_per_item;
    fn(r0, std::min(x.rows, r0 + rows_per_item));
  });
}

// Per-thread buffers of one row's work (threads::scratch slot 0, carved up).
struct RowScratch {
  uint32_t* amax;
  float* mul;
  uint8_t* codes;
  int32_t* exps;
  double* scales;
};
RowScratch row_scratch(int64_t cols, int64_t blocks) {
  const int64_t b = (blocks + 15) / 16 * 16, c = (cols + 63) / 64 * 64;
  auto* p = static_cast<uint8_t*>(threads::scratch(0, b * (4 + 4 + 4 + 8) + c));
  RowScratch s;
  s.scales = reinterpret_cast<double*>(p);
  s.amax = reinterpret_cast<uint32_t*>(p + b * 8);
  s.mul = reinterpret_cast<float*>(p + b * 12);
  s.exps = reinterpret_cast<int32_t*>(p + b * 16);
  s.codes = p + b * 20;
  return s;
}

// ---- exact per-element formulas (the reference's, in double) -------------------------------------------

// formats::encode (round to nearest even, saturating) of a double onto `g`, by the kernels' method in double:
// clamp |v| to the largest value, y = |v| * 2^(M - max(exponent, emin)) exactly, the magnitude
// ((e - emin) << M) + RNE(y). (Tested against encode() through every quantize_fast comparison.)
// Nearest integer of y >= 0, ties to even, independent of the rounding mode (formats.cpp's round_half_even).
uint32_t round_half_even(double y) {
  const double whole = std::floor(y);
  const double fraction = y - whole;  // exact
  auto n = static_cast<uint32_t>(whole);
  if (fraction > 0.5 || (fraction == 0.5 && (n & 1) != 0)) ++n;
  return n;
}

uint32_t encode_on_grid(double v, const fast::Grid& g) {
  const bool negative = std::signbit(v);
  double a = std::fabs(v);
  if (g.integer) {
    a = std::min(a, negative ? 128.0 : 127.0);
    const auto m = static_cast<int32_t>(round_half_even(a));
    return static_cast<uint32_t>(negative ? -m : m) & 0xFFu;
  }
  a = std::min(a, static_cast<double>(g.max));
  if (a == 0) return negative ? 1u << g.sign_bit : 0u;
  const int e = std::max(static_cast<int>((std::bit_cast<uint64_t>(a) >> 52) & 0x7FF) - 1023, g.emin);
  const double y = a * std::bit_cast<double>(static_cast<uint64_t>(1023 + g.mbits - e) << 52);
  const auto mag = (static_cast<uint32_t>(e - g.emin) << g.mbits) + round_half_even(y);
  return mag | (negative ? 1u << g.sign_bit : 0u);
}

struct DivideCtx {  // FP8 / INT8: encode(elem, x / s[block])
  fast::Grid grid;
  const double* scales;
};
uint32_t exact_divide(const void* ctx, int64_t block, float x) {
  const auto* c = static_cast<const DivideCtx*>(ctx);
  return encode_on_grid(static_cast<double>(x) / c->scales[block], c->grid);
}

struct Pow2Ctx {  // MX: encode(elem, x * 2^-e[block]), saturating
  fast::Grid grid;
  const int32_t* exps;
};
uint32_t exact_pow2(const void* ctx, int64_t block, float x) {
  const auto* c = static_cast<const Pow2Ctx*>(ctx);
  return encode_on_grid(std::ldexp(static_cast<double>(x), -c->exps[block]), c->grid);
}

struct Nvfp4Ctx {  // NVFP4 elements: encode(E2M1, x * g / sf[block]); block scales: encode(E4M3, amax / 6 * g)
  double g;
  const double* sf;
  fast::Grid e2m1, e4m3;
};
uint32_t exact_nvfp4_element(const void* ctx, int64_t block, float x) {
  const auto* c = static_cast<const Nvfp4Ctx*>(ctx);
  const double sf = c->sf[block];
  return sf == 0 ? 0 : encode_on_grid(static_cast<double>(x) * c->g / sf, c->e2m1);
}
uint32_t exact_nvfp4_scale(const void* ctx, int64_t, float amax) {
  const auto* c = static_cast<const Nvfp4Ctx*>(ctx);
  return encode_on_grid(static_cast<double>(amax) / 6.0 * c->g, c->e4m3);
}

// ---- MX shared exponents on f32 bits (mx_quant.cpp's rules, there evaluated with frexp) ---------------

int mx_exponent(uint32_t amax_bits, DType elem, MxScaleRule rule) {
  // Zero and f32 subnormals: every rule lands at or below -127.
  if (amax_bits < 0x00800000u) return -127;
  const int e_field = static_cast<int>(amax_bits >> 23);
  const uint32_t max_bits = std::bit_cast<uint32_t>(static_cast<float>(traits(elem).max_finite));
  const int max_field = static_cast<int>(max_bits >> 23);
  int e = 0;
  switch (rule) {
    case MxScaleRule::kCeilOverMax:  // the smallest e with amax <= max * 2^e
      e = e_field - max_field + ((amax_bits & 0x7FFFFF) > (max_bits & 0x7FFFFF) ? 1 : 0);
      break;
    case MxScaleRule::kFloorLog2: e = e_field - 127; break;
    case MxScaleRule::kOcp: e = e_field - max_field; break;
    case MxScaleRule::kQuarkEven: {
      const int mbits = traits(elem).mantissa_bits;
      const int field = static_cast<int>(((amax_bits + (1u << (22 - mbits))) >> 23) & 0xFF);
      e = field == 0xFF ? 127 : field - max_field;
      break;
    }
  }
  return std::clamp(e, -127, 127);
}

// ---- families ------------------------------------------------------------------------------------------

// FP8 and symmetric INT8 on any group grid. nullopt: the input holds Inf or NaN, or something only the
// reference words (a scale beyond f32).
//   Scales computed per row or per stripe of rows (per-token, per-channel, 1xG, 128x128): each work item
//   takes whole stripes, finds their maxima and scales and writes their codes while the rows are in cache.
//   Per-tensor scales, or scales given: every row's maxima first (the Inf / NaN check), then the codes.
std::optional<Result<QuantizedTensor>> quantize_f32_scaled(const fast::Kernels& k, const Operand& x,
                                                           const QuantKey& key, const QuantizeOptions& options,
                                                           Family family) {
  const GroupShape& group = key.scale.group;
  const GroupGrid grid = group_grid(group, x.rows, x.cols);
  const DType elem = family == Family::kFp8 ? DType::kF8E4M3 : DType::kI8;
  const fast::Grid g = grid_of(elem);
  const auto rule = family == Family::kFp8 ? fp8_scale_rule(key, options) : int8_scale_rule();
  QuantizedTensor q;
  q.key = key;
  q.rows = x.rows;
  q.cols = x.cols;
  q.data = output_tensor(elem, {x.rows, x.cols});
  q.scale = Tensor::empty(DType::kF32, scale_shape(group, x.rows, x.cols));
  auto* data = static_cast<uint8_t*>(q.data.raw());
  float* scale_out = q.scale.data<float>();
  std::atomic<bool> refused{false};
  // Codes of rows [r0, r1); scales / inverse hold the groups of grid rows from g_first on.
  const auto encode_rows = [&](int64_t r0, int64_t r1, const double* scales, const float* inverse, int64_t g_first) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t first = (r / grid.row_extent - g_first) * grid.grid_cols;
      const DivideCtx ctx{g, scales + first};
      fast::EncodeRow job;
      job.x = x.row(r);
      job.src = x.src;
      job.cols = x.cols;
      job.block = grid.col_extent;
      job.mul = inverse + first;
      job.grid = g;
      job.check_ties = true;
      job.exact = {exact_divide, &ctx};
      job.codes = data + r * x.cols;
      k.encode_row(job);
    }
  };

  const bool computed = !options.static_scale.defined();
  // A static per-token or 1xG key without scales is the reference's error.
  if (computed && grid.grid_rows > 1 && !(key.scale.is_static && group.row == 1)) {
    const int64_t stripe = grid.row_extent;
    const int64_t stripes_per_item = std::max<int64_t>(1, kItemElements / std::max<int64_t>(stripe * x.cols, 1));
    const int64_t items = (grid.grid_rows + stripes_per_item - 1) / stripes_per_item;
    const int threads = static_cast<int>(std::min<int64_t>(threads::max_threads(), items));
    threads::parallel_for(items, threads, [&](int64_t item) {
      std::vector<uint32_t> row_bits(static_cast<size_t>(grid.grid_cols));
      std::vector<uint32_t> bits(static_cast<size_t>(grid.grid_cols));
      const int64_t g0 = item * stripes_per_item, g1 = std::min(grid.grid_rows, g0 + stripes_per_item);
      std::vector<double> scales(static_cast<size_t>((g1 - g0) * grid.grid_cols));
      std::vector<float> inverse(scales.size());
      for (int64_t gr = g0; gr < g1; ++gr) {
        const int64_t r0 = gr * stripe, r1 = std::min(x.rows, r0 + stripe);
        std::fill(bits.begin(), bits.end(), 0u);
        for (int64_t r = r0; r < r1; ++r) {
          k.block_amax_bits(x.row(r), x.src, x.cols, grid.col_extent, row_bits.data());
          for (int64_t gc = 0; gc < grid.grid_cols; ++gc) bits[gc] = std::max(bits[gc], row_bits[gc]);
        }
        for (int64_t gc = 0; gc < grid.grid_cols; ++gc) {
          const size_t i = static_cast<size_t>((gr - g0) * grid.grid_cols + gc);
          const double s = bits[gc] < kNonFiniteBits ? rule(bits_to_float(bits[gc])) : HUGE_VAL;
          if (!std::isfinite(s)) {
            refused.store(true, std::memory_order_relaxed);
            return;
          }
          scales[i] = s;
          inverse[i] = static_cast<float>(1.0 / s);  // may be Inf (a subnormal s): then the exact formula
          scale_out[gr * grid.grid_cols + gc] = static_cast<float>(s);
        }
        encode_rows(r0, r1, scales.data(), inverse.data(), g0);
      }
    });
    if (refused.load()) return std::nullopt;
    return Result<QuantizedTensor>(std::move(q));
  }

  // Every row's maxima, then the scales (computed over all rows, or given), then the codes.
  std::vector<uint32_t> row_amax(static_cast<size_t>(x.rows * grid.grid_cols));
  for_row_chunks(x, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      uint32_t* out = row_amax.data() + r * grid.grid_cols;
      k.block_amax_bits(x.row(r), x.src, x.cols, grid.col_extent, out);
      for (int64_t gc = 0; gc < grid.grid_cols; ++gc) {
        if (out[gc] >= kNonFiniteBits) refused.store(true, std::memory_order_relaxed);
      }
    }
  });
  if (refused.load()) return std::nullopt;
  const auto group_amax = [&] {
    std::vector<uint32_t> bits(static_cast<size_t>(grid.size()), 0);
    for (int64_t r = 0; r < x.rows; ++r) {
      for (int64_t gc = 0; gc < grid.grid_cols; ++gc) {
        uint32_t& m = bits[static_cast<size_t>((r / grid.row_extent) * grid.grid_cols + gc)];
        m = std::max(m, row_amax[static_cast<size_t>(r * grid.grid_cols + gc)]);
      }
    }
    std::vector<double> amax(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) amax[i] = bits_to_float(bits[i]);
    return amax;
  };
  auto scales = resolve_scales_from(x.rows, x.cols, key, options, group_amax, rule);
  if (!scales) return Result<QuantizedTensor>(scales.status());
  const std::vector<double>& s = *scales;
  std::vector<float> inverse(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    inverse[i] = static_cast<float>(1.0 / s[i]);
    scale_out[i] = static_cast<float>(s[i]);
  }
  for_row_chunks(x, [&](int64_t r0, int64_t r1) { encode_rows(r0, r1, s.data(), inverse.data(), 0); });
  return Result<QuantizedTensor>(std::move(q));
}

std::optional<Result<QuantizedTensor>> quantize_mx_fast(const fast::Kernels& k, const Operand& x,
                                                        const QuantKey& key, const QuantizeOptions& options) {
  constexpr int64_t kBlock = 32;
  const DType elem = key.dtype;
  const int64_t blocks = x.cols / kBlock;
  const MxScaleRule rule = options.mx_rule.value_or(default_mx_rule(key));
  const bool packed = is_packed(elem);
  const int64_t row_bytes = packed ? storage_bytes(elem, x.cols) : x.cols;
  QuantizedTensor q;
  q.key = key;
  q.rows = x.rows;
  q.cols = x.cols;
  q.data = packed ? output_tensor(DType::kU8, {x.rows, row_bytes}) : output_tensor(elem, {x.rows, x.cols});
  q.scale = Tensor::empty(DType::kU8, {x.rows, blocks});
  auto* data = static_cast<uint8_t*>(q.data.raw());
  uint8_t* scale = q.scale.data<uint8_t>();
  const fast::Grid g = grid_of(elem);
  std::atomic<bool> non_finite{false};
  for_row_chunks(x, [&](int64_t r0, int64_t r1) {
    const RowScratch w = row_scratch(x.cols, blocks);
    for (int64_t r = r0; r < r1; ++r) {
      k.block_amax_bits(x.row(r), x.src, x.cols, kBlock, w.amax);
      for (int64_t b = 0; b < blocks; ++b) {
        if (w.amax[b] >= kNonFiniteBits) {
          non_finite.store(true, std::memory_order_relaxed);
          return;
        }
        const int e = mx_exponent(w.amax[b], elem, rule);
        w.exps[b] = e;
        w.mul[b] = std::ldexp(1.0f, -e);  // exact: 2^127 .. 2^-127 are all f32 values
        scale[r * blocks + b] = static_cast<uint8_t>(e + 127);
      }
      const Pow2Ctx ctx{g, w.exps};
      fast::EncodeRow job;
      job.x = x.row(r);
      job.src = x.src;
      job.cols = x.cols;
      job.block = kBlock;
      job.mul = w.mul;
      job.grid = g;
      job.check_ties = false;  // x * 2^-e is exact in f32 where it matters (fast_quant_isa.hpp)
      job.exact = {exact_pow2, &ctx};
      job.codes = packed ? w.codes : data + r * row_bytes;
      k.encode_row(job);
      if (elem == DType::kF4E2M1) k.pack_fp4(w.codes, x.cols, data + r * row_bytes);
      else if (packed) k.pack_fp6(w.codes, x.cols, data + r * row_bytes);
    }
  });
  if (non_finite.load()) return std::nullopt;
  return Result<QuantizedTensor>(std::move(q));
}

std::optional<Result<QuantizedTensor>> quantize_nvfp4_fast(const fast::Kernels& k, const Operand& x,
                                                           const QuantKey& key, const QuantizeOptions& options) {
  constexpr int64_t kBlock = 16;
  const int64_t blocks = x.cols / kBlock;
  std::atomic<bool> non_finite{false};
  double g = 0;
  if (options.nvfp4_global_scale) {
    g = *options.nvfp4_global_scale;
  } else {
    std::vector<uint32_t> chunk_amax((x.rows + 0) > 0 ? static_cast<size_t>(x.rows) : 1, 0);
    for_row_chunks(x, [&](int64_t r0, int64_t r1) {
      chunk_amax[static_cast<size_t>(r0)] = k.amax_bits(x.row(r0), x.src, (r1 - r0) * x.cols);
    });
    const uint32_t amax_bits = *std::max_element(chunk_amax.begin(), chunk_amax.end());
    if (amax_bits >= kNonFiniteBits) return std::nullopt;
    const double amax = bits_to_float(amax_bits);
    // nvfp4_quant.cpp: g = f32(448 * 6 / amax), 1 for zeros, the largest f32 where the quotient overflows.
    g = amax > 0 ? to_f32(kFp8E4M3Max * 6.0 / amax) : 1.0;
    if (!std::isfinite(g)) g = static_cast<double>(std::numeric_limits<float>::max());
  }
  QuantizedTensor q;
  q.key = key;
  q.rows = x.rows;
  q.cols = x.cols;
  const int64_t row_bytes = storage_bytes(DType::kF4E2M1, x.cols);
  q.data = output_tensor(DType::kU8, {x.rows, row_bytes});
  q.scale = Tensor::empty(DType::kF8E4M3, {x.rows, blocks});
  q.scale2 = Tensor::empty(DType::kF32, {1});
  q.scale2.data<float>()[0] = static_cast<float>(g);
  auto* data = q.data.data<uint8_t>();
  auto* scale = static_cast<uint8_t*>(q.scale.raw());
  const fast::Grid e4m3 = grid_of(DType::kF8E4M3), e2m1 = grid_of(DType::kF4E2M1);
  const float g_over_6 = static_cast<float>(g / 6.0);
  for_row_chunks(x, [&](int64_t r0, int64_t r1) {
    const RowScratch w = row_scratch(x.cols, blocks);
    for (int64_t r = r0; r < r1; ++r) {
      k.block_amax_bits(x.row(r), x.src, x.cols, kBlock, w.amax);
      for (int64_t b = 0; b < blocks; ++b) {
        if (w.amax[b] >= kNonFiniteBits) {
          non_finite.store(true, std::memory_order_relaxed);
          return;
        }
      }
      // Block scales: encode(E4M3, amax / 6 * g), the maxima being one f32 row of `blocks` values.
      Nvfp4Ctx ctx{g, w.scales, e2m1, e4m3};
      fast::EncodeRow sf_job;
      sf_job.x = w.amax;
      sf_job.src = Src::kF32;
      sf_job.cols = blocks;
      sf_job.block = blocks;
      sf_job.mul = &g_over_6;
      sf_job.grid = e4m3;
      sf_job.check_ties = true;
      sf_job.exact = {exact_nvfp4_scale, &ctx};
      sf_job.codes = scale + r * blocks;
      k.encode_row(sf_job);
      for (int64_t b = 0; b < blocks; ++b) {
        const double sf = decode(DType::kF8E4M3, scale[r * blocks + b]);
        w.scales[b] = sf;
        w.mul[b] = sf == 0 ? 0.0f : static_cast<float>(g / sf);  // 0: the block's codes are 0
      }
      fast::EncodeRow job;
      job.x = x.row(r);
      job.src = x.src;
      job.cols = x.cols;
      job.block = kBlock;
      job.mul = w.mul;
      job.grid = e2m1;
      job.check_ties = true;
      job.exact = {exact_nvfp4_element, &ctx};
      job.codes = w.codes;
      k.encode_row(job);
      k.pack_fp4(w.codes, x.cols, data + r * row_bytes);
    }
  });
  if (non_finite.load()) return std::nullopt;
  return Result<QuantizedTensor>(std::move(q));
}

std::optional<Src> src_of(DType d) {
  switch (d) {
    case DType::kF32: return Src::kF32;
    case DType::kBF16: return Src::kBF16;
    case DType::kF16: return Src::kF16;
    default: return std::nullopt;
  }
}

}  // namespace

namespace fast {

std::vector<const Kernels*> usable_kernels() {
  std::vector<const Kernels*> out;
#if QLINEAR_WITH_X86
  const CpuFeatures f = Platform::host_cpu().cpu;
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) out.push_back(&kAvx512Kernels);
  if (f.avx2 && f.fma && f.f16c) out.push_back(&kAvx2Kernels);
#endif
  out.push_back(&kScalarKernels);
  return out;
}

Result<QuantizedTensor> quantize_with(const Kernels& k, const Tensor& x, const QuantKey& key,
                                      const QuantizeOptions& options) {
  const auto reference = [&] { return qlinear::quantize(x, key, options); };
  auto family = classify(key);
  if (!family) return reference();
  if (!check_options(key, *family, options)) return reference();
  if (!x.defined() || x.device().kind != DeviceKind::kCpu || x.rank() != 2 || x.numel() == 0) return reference();
  const std::optional<Src> src = src_of(x.dtype());
  if (!src) return reference();
  const Tensor c = x.contiguous();
  Operand op;
  op.base = static_cast<const uint8_t*>(c.raw());
  op.src = *src;
  op.rows = c.size(0);
  op.cols = c.size(1);
  op.esize = element_size(c.dtype());
  std::optional<Result<QuantizedTensor>> out;
  switch (*family) {
    case Family::kFp8: out = quantize_f32_scaled(k, op, key, options, Family::kFp8); break;
    case Family::kInt8:
      if (!key.symmetric) return reference();
      out = quantize_f32_scaled(k, op, key, options, Family::kInt8);
      break;
    case Family::kMx:
      if (options.static_scale.defined() || op.cols % 32 != 0) return reference();
      out = quantize_mx_fast(k, op, key, options);
      break;
    case Family::kNvfp4:
      if (options.static_scale.defined() || op.cols % 16 != 0) return reference();
      out = quantize_nvfp4_fast(k, op, key, options);
      break;
  }
  if (!out) return reference();  // Inf or NaN in the input: the reference's error
  return std::move(*out);
}

}  // namespace fast
}  // namespace quant

QuantizeBufferReuse::QuantizeBufferReuse() {
  quant::ReusePool& pool = quant::reuse_pool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  ++pool.active;
}

QuantizeBufferReuse::~QuantizeBufferReuse() {
  quant::ReusePool& pool = quant::reuse_pool();
  std::vector<std::pair<void*, int64_t>> release;
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    if (--pool.active == 0) release.swap(pool.free);
  }
  for (auto& [p, capacity] : release) std::free(p);
}

Result<QuantizedTensor> quantize_fast(const Tensor& x, const QuantKey& key, const QuantizeOptions& options) {
  static const quant::fast::Kernels* const kernels = quant::fast::usable_kernels().front();
  return quant::fast::quantize_with(*kernels, x, key, options);
}

}  // namespace qlinear
