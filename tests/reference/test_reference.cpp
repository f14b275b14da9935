// The reference kernels against an independent FP64 computation: weights decoded code by code with the
// scalar codec and the scale layout written out here, activations quantized by the reference quantizers
// (tested against Python separately) and decoded here, products summed in FP64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backends/reference/reference_kernels.hpp"
#include "core/threads.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"

namespace qlinear {
namespace {

// Value of a quantized operand's element (r, c), written from the layouts in quantize.hpp.
double naive_value(const QuantKey& key, const Tensor& data, const Tensor& scale, const Tensor& scale2,
                   const Tensor& zero_point, int64_t cols, int64_t r, int64_t c, int64_t shard = 0,
                   int64_t block_row = -1) {
  double code;
  if (is_packed(key.dtype)) {
    const uint8_t* row = data.data<uint8_t>() + r * storage_bytes(key.dtype, cols);
    code = decode(key.dtype, unpack_code(key.dtype, row, c));
  } else {
    code = element_as_double(data, r * cols + c);
  }
  const GroupShape g = key.scale.group;
  double s;
  if (g.is_per_tensor()) {
    s = element_as_double(scale, scale.numel() == 1 ? 0 : shard);
  } else if (g.row == -1 || g.col == -1) {  // per row
    s = element_as_double(scale, r);
  } else {
    const int64_t scale_cols = (cols + g.col - 1) / g.col;
    // block_row: the scale row of r when fused shards keep their own block grids (the caller counts them).
    s = element_as_double(scale, (block_row >= 0 ? block_row : r / g.row) * scale_cols + c / g.col);
  }
  if (key.scale.dtype == DType::kE8M0) s = std::ldexp(1.0, static_cast<int>(s) - 127);  // raw E8M0 byte
  if (zero_point.defined()) {
    code -= element_as_double(zero_point, zero_point.numel() == 1 ? 0 : r);
  }
  double v = code * s;
  if (key.scale2) v /= element_as_double(scale2, scale2.numel() == 1 ? 0 : shard);
  return v;
}

struct Problem {
  const char* scheme;
  int64_t m, n, k;
  DType out;
  bool bias;
  std::vector<int64_t> shards;
};

// ULP distance of two values of the output dtype.
int64_t ulp_distance(DType d, double a, double b) {
  return std::llabs(static_cast<int64_t>(encode(d, a, Overflow::kNonSaturating)) -
                    static_cast<int64_t>(encode(d, b, Overflow::kNonSaturating)));
}

void check(const Problem& p, uint64_t seed) {
  SCOPED_TRACE(std::string(p.scheme) + " M=" + std::to_string(p.m) + " N=" + std::to_string(p.n) +
               " K=" + std::to_string(p.k) + " out=" + std::string(name(p.out)) + (p.bias ? " bias" : ""));
  const Scheme& scheme = *find_scheme(p.scheme);
  MakeLayerOptions opt;
  opt.out_dtype = p.out;
  opt.logical_widths = p.shards;
  opt.input_min = -3.0f;
  opt.input_max = 2.5f;
  const Tensor w = random_normal(DType::kF32, {p.n, p.k}, seed, 0.2);
  auto layer = quantize_layer("ref", scheme, w, opt);
  ASSERT_TRUE(layer) << layer.message();
  auto kernel = select_kernel(layer->config, Platform::host_cpu());
  const LinearKernel& ref = *find_kernel("reference_" + std::string(family_name(scheme.family)));
  ASSERT_TRUE(ref.process_weights_after_loading(*layer));

  const Tensor x = random_normal(DType::kBF16, {p.m, p.k}, seed + 1, 1.0);
  const Tensor bias = random_normal(DType::kF32, {p.n}, seed + 2, 0.5);
  Tensor out = Tensor::empty(p.out, {p.m, p.n});
  std::memset(out.raw(), 0xFF, out.nbytes());  // poison: NaN in every float dtype
  ASSERT_TRUE(ref.apply(*layer, Activation::dense(x), p.bias ? &bias : nullptr, out));

  // Activation as the layer's numerics see it.
  std::vector<double> xa(p.m * p.k);
  if (scheme.activation_key) {
    QuantizeOptions qo;
    if (layer->has("input_scale")) qo.static_scale = layer->params.at("input_scale");
    if (layer->has("input_zero_point")) qo.static_zero_point = layer->params.at("input_zero_point");
    if (layer->has("input_global_scale")) qo.nvfp4_global_scale = layer->params.at("input_global_scale").data<float>()[0];
    auto q = quantize(x, *scheme.activation_key, qo);
    ASSERT_TRUE(q) << q.message();
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t c = 0; c < p.k; ++c) {
        xa[i * p.k + c] = naive_value(q->key, q->data, q->scale, q->scale2, q->zero_point, p.k, i, c);
      }
    }
  } else {
    for (int64_t i = 0; i < p.m * p.k; ++i) xa[i] = element_as_double(x, i);
  }
  // Weight, shard by shard.
  std::vector<int64_t> row_shard(p.n, 0);
  // Each shard's own 128-row blocks: rows j of shard s use scale row (rows of the shards before) + j / 128.
  std::vector<int64_t> block_row(p.n, -1);
  const int64_t br = scheme.weight_key.scale.group.row;
  for (int64_t s = 0, r = 0, scale_rows = 0; s < static_cast<int64_t>(p.shards.size()); ++s) {
    for (int64_t j = 0; j < p.shards[s]; ++j) {
      if (br > 1) block_row[r] = scale_rows + j / br;
      row_shard[r++] = s;
    }
    if (br > 1) scale_rows += (p.shards[s] + br - 1) / br;
  }
  const Tensor global = layer->has("weight_global_scale") ? layer->params.at("weight_global_scale") : Tensor();
  std::vector<double> wd(p.n * p.k);
  for (int64_t r = 0; r < p.n; ++r) {
    for (int64_t c = 0; c < p.k; ++c) {
      wd[r * p.k + c] = naive_value(scheme.weight_key, layer->params.at("weight"), layer->params.at("weight_scale"),
                                    global, Tensor(), p.k, r, c, row_shard[r], block_row[r]);
    }
  }
  int64_t worst = 0;
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double acc = 0;
      for (int64_t c = 0; c < p.k; ++c) acc += xa[i * p.k + c] * wd[j * p.k + c];
      if (p.bias) acc += element_as_double(bias, j);
      const double got = element_as_double(out, i * p.n + j);
      ASSERT_FALSE(std::isnan(got)) << "output (" << i << "," << j << ") not written";
      worst = std::max(worst, ulp_distance(p.out, got, acc));
    }
  }
  // One rounding of the FP64 sum: at most 1 ULP apart (FP64 dequantization order may differ by an FP64 ulp).
  EXPECT_LE(worst, 1);
}

TEST(Reference, EveryFamilyMatchesIndependentFp64AcrossShapes) {
  const std::vector<Problem> problems = {
      {"w8a8-fp8-tensor", 1, 33, 77, DType::kBF16, false, {}},
      {"w8a8-fp8-tensor", 17, 48, 130, DType::kF32, true, {16, 16, 16}},
      {"w8a8-fp8-channel", 2, 31, 129, DType::kF16, true, {}},
      {"w8a8-fp8-channel", 257, 19, 40, DType::kBF16, false, {}},
      {"w8a8-fp8-block", 3, 200, 300, DType::kBF16, true, {}},
      {"w8a8-fp8-block", 16, 129, 257, DType::kF32, false, {}},
      {"w8a8-fp8-block", 3, 960, 576, DType::kBF16, true, {576, 192, 192}},  // partial blocks, per-shard grids
      {"w8a8-fp8-block", 17, 208, 300, DType::kF32, false, {144, 32, 32}},
      {"w8a16-fp8", 7, 65, 100, DType::kF32, true, {}},
      {"w8a8-int8-dynamic", 1, 37, 61, DType::kBF16, true, {}},
      {"w8a8-int8-dynamic", 17, 24, 64, DType::kF16, false, {}},
      {"w8a8-int8-static", 7, 30, 50, DType::kF32, true, {10, 20}},
      {"w8a8-int8-static-asym", 16, 21, 70, DType::kBF16, true, {}},
      {"w8a8-mxfp8", 1, 40, 96, DType::kBF16, false, {}},
      {"w8a8-mxfp8", 257, 9, 64, DType::kF32, true, {}},
      {"w8a16-mxfp8", 3, 23, 160, DType::kF16, true, {}},
      {"w6a16-mxfp6-e2m3", 2, 17, 128, DType::kBF16, true, {}},
      {"w6a16-mxfp6-e3m2", 17, 33, 96, DType::kF32, false, {}},
      {"w4a16-mxfp4", 7, 45, 224, DType::kBF16, true, {}},
      {"w4a4-nvfp4", 16, 30, 48, DType::kBF16, true, {}},
      {"w4a4-nvfp4", 1, 32, 80, DType::kF32, false, {8, 8, 16}},
  };
  uint64_t seed = 100;
  for (const Problem& p : problems) check(p, seed += 10);
}

// A fused layer whose shards keep their own 128x128 grids computes each shard's columns exactly as that shard
// alone: the same codes, the same scales, the same FP64 dot products.
TEST(Reference, FusedPartialBlockShardsEqualTheShardsAlone) {
  const Scheme& scheme = *find_scheme("w8a8-fp8-block");
  const std::vector<int64_t> widths = {144, 32, 96};
  const int64_t n = 272, k = 300, m = 7;
  const Tensor w = random_normal(DType::kF32, {n, k}, 31, 0.2);
  MakeLayerOptions opt;
  opt.out_dtype = DType::kF32;
  opt.logical_widths = widths;
  auto fused = quantize_layer("fused", scheme, w, opt);
  ASSERT_TRUE(fused) << fused.message();
  EXPECT_EQ(fused->params.at("weight_scale").size(0), 2 + 1 + 1);  // per shard: ceil(144/128), 1, 1
  const Tensor x = random_normal(DType::kBF16, {m, k}, 32, 1.0);
  ASSERT_TRUE(reference::kFp8BlockScaled.process_weights_after_loading(*fused));
  auto all = reference::kFp8BlockScaled.apply(*fused, Activation::dense(x));
  ASSERT_TRUE(all) << all.message();
  opt.logical_widths = {};
  int64_t row = 0;
  for (const int64_t width : widths) {
    auto alone = quantize_layer("shard", scheme, w.narrow(0, row, width).value().contiguous(), opt);
    ASSERT_TRUE(alone) << alone.message();
    ASSERT_TRUE(reference::kFp8BlockScaled.process_weights_after_loading(*alone));
    auto part = reference::kFp8BlockScaled.apply(*alone, Activation::dense(x));
    ASSERT_TRUE(part) << part.message();
    for (int64_t i = 0; i < m; ++i) {
      EXPECT_EQ(
          std::memcmp(all->data<float>() + i * n + row, part->data<float>() + i * width, sizeof(float) * width), 0)
          << "shard at row " << row << ", output row " << i;
    }
    row += width;
  }
}

TEST(Reference, PreQuantizedActivationGivesTheSameResultAsDense) {
  const Scheme& scheme = *find_scheme("w8a8-fp8-channel");
  auto layer = quantize_layer("pq", scheme, random_normal(DType::kF32, {24, 96}, 3, 0.1)).value();
  const LinearKernel& ref = reference::kFp8ScaledMM;
  ASSERT_TRUE(ref.process_weights_after_loading(layer));
  const Tensor x = random_normal(DType::kBF16, {5, 96}, 4);
  auto key = ref.input_quant_key(layer.config);
  ASSERT_TRUE(key.has_value());
  auto q = quantize(x, *key).value();
  auto a = ref.apply(layer, Activation::dense(x)).value();
  auto b = ref.apply(layer, Activation::quantized(q, DType::kBF16)).value();
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
}

TEST(Reference, ResultsDoNotDependOnThreadCount) {
  auto layer = quantize_layer("det", *find_scheme("w4a16-mxfp4"), random_normal(DType::kF32, {64, 128}, 5, 0.1)).value();
  ASSERT_TRUE(reference::kMxfp4.process_weights_after_loading(layer));
  const Tensor x = random_normal(DType::kBF16, {33, 128}, 6);
  set_cpu_threads(1);
  auto a = reference::kMxfp4.apply(layer, Activation::dense(x)).value();
  set_cpu_threads(2);
  threads::set_min_ns_per_thread_for_testing(1.0);  // threaded although the layer is small
  auto b = reference::kMxfp4.apply(layer, Activation::dense(x)).value();
  threads::set_min_ns_per_thread_for_testing(0);
  set_cpu_threads(0);
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
}

}  // namespace
}  // namespace qlinear
