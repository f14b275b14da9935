#pragma once
// Shared harness of the x86 kernel tests: one quantized layer, processed twice (the kernel under test and
// the reference), the same activation, outputs poisoned before each call, and a tolerance derived from
// the kernel's numerics rather than an absolute threshold:
//
//   |got - ref| <= rel * S[m, n] + 2^-24 |ref| + ulp_out(ref)
//     S[m, n] = sum_k |X[m,k] W[n,k]| + |bias[n]|   (X, W: the dequantized operands the reference uses)
//     rel     = the kernel's f32 rounding budget (INT8: a few roundings of the epilogue; FP32-accumulated
//               paths: K * 2^-24 for the sum plus the epilogue)
//     2^-24 |ref| + ulp_out: the f32 result rounded once more to a bf16/f16 output (double rounding).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/reference/reference_kernels.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"

namespace qlinear::x86_test {

struct Case {
  int64_t m, n, k;
  DType in = DType::kBF16;
  DType out = DType::kBF16;
  bool bias = false;
  std::vector<int64_t> shards = {};
};

inline std::string describe(const Case& c) {
  std::string s = "M=" + std::to_string(c.m) + " N=" + std::to_string(c.n) + " K=" + std::to_string(c.k) +
                  " in=" + std::string(name(c.in)) + " out=" + std::string(name(c.out)) + (c.bias ? " bias" : "");
  if (!c.shards.empty()) s += " shards=" + std::to_string(c.shards.size());
  return s;
}

// Spacing of the output format at |v| (its ULP), subnormals included.
inline double ulp_of(DType d, double v) {
  const int mant = d == DType::kF32 ? 23 : d == DType::kBF16 ? 7 : 10;
  const int emin = d == DType::kF16 ? -14 : -126;
  const double a = std::fabs(v);
  const int e = a > 0 ? std::max(static_cast<int>(std::floor(std::log2(a))), emin) : emin;
  return std::ldexp(1.0, e - mant);
}

inline const LinearKernel& reference_for(Family f) {
  return *find_kernel("reference_" + std::string(family_name(f)));
}

inline Tensor poisoned(DType d, int64_t m, int64_t n) {
  Tensor t = Tensor::empty(d, {m, n});
  std::memset(t.raw(), 0xFF, static_cast<size_t>(t.nbytes()));  // NaN in every float dtype
  return t;
}

inline LinearLayer make_layer(const Scheme& scheme, const Case& c, uint64_t seed, double w_std = 0.2) {
  MakeLayerOptions opt;
  opt.input_dtype = c.in;
  opt.out_dtype = c.out;
  opt.logical_widths = c.shards;
  opt.input_min = -3.0f;
  opt.input_max = 2.5f;
  const Tensor w = random_normal(DType::kF32, {c.n, c.k}, seed, w_std);
  auto layer = quantize_layer("x86_test", scheme, w, opt);
  EXPECT_TRUE(layer) << layer.message();
  if (!layer) return LinearLayer{};
  // MX scales: the quantizer writes the E8M0 codes as u8 bytes while the family contract names them e8m0;
  // relabel the same bytes so the layer validates whichever spelling src/quant settles on.
  Tensor& ws = layer->params["weight_scale"];
  if (scheme.weight_key.scale.dtype == DType::kE8M0 && ws.dtype() == DType::kU8) {
    ws = Tensor::from_blob(ws.raw(), DType::kE8M0, ws.shape(), ws.owner());
  }
  return std::move(*layer);
}

// got (the kernel under test) against want (the reference, whose processed layer is ref_layer) on activation x and
// bias b (or null), output by output with the tolerance above.
inline void expect_within_tolerance(const LinearLayer& ref_layer, const Tensor& x, const Tensor* b, const Tensor& got,
                                    const Tensor& want, const Case& c, double rel) {
  auto wd = reference::dequantized_weight(ref_layer);
  auto xd = reference::effective_activation(ref_layer, Activation::dense(x));
  ASSERT_TRUE(wd && xd);
  const double* W = wd->data<double>();
  const double* X = xd->data<double>();
  int bad = 0;
  double worst = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double mag = b != nullptr ? std::fabs(element_as_double(*b, j)) : 0.0;
      for (int64_t k = 0; k < c.k; ++k) mag += std::fabs(X[i * c.k + k] * W[j * c.k + k]);
      const double g = element_as_double(got, i * c.n + j);
      const double r = element_as_double(want, i * c.n + j);
      const double tol = rel * mag + std::ldexp(std::fabs(r), -24) + ulp_of(c.out, r);
      const double err = std::fabs(g - r);
      if (!(err <= tol) && bad++ < 5) {
        ADD_FAILURE() << "out[" << i << "," << j << "] = " << g << ", reference " << r << ", |diff| " << err
                      << " > tolerance " << tol;
      }
      if (tol > 0) worst = std::max(worst, err / tol);
    }
  }
  EXPECT_EQ(bad, 0) << bad << " outputs out of tolerance (worst err/tol " << worst << ")";
}

// Runs `kernel` and the reference on copies of the same quantized layer and checks every output.
// Returns false (after recording failures) when something did not run.
inline void expect_matches_reference(const LinearKernel& kernel, const Scheme& scheme, const Case& c, uint64_t seed,
                                     double rel) {
  SCOPED_TRACE(std::string(kernel.name()) + " " + std::string(scheme.name) + " " + describe(c));
  LinearLayer layer = make_layer(scheme, c, seed);
  LinearLayer ref_layer = layer;
  const LinearKernel& ref = reference_for(scheme.family);
  ASSERT_TRUE(kernel.can_implement(layer.config)) << kernel.can_implement(layer.config).reason;
  Status ps = kernel.process_weights_after_loading(layer);
  ASSERT_TRUE(ps) << ps.message();
  ASSERT_TRUE(ref.process_weights_after_loading(ref_layer));

  const Tensor x = random_normal(c.in, {c.m, c.k}, seed + 1, 1.0);
  const Tensor bias = random_normal(DType::kF32, {c.n}, seed + 2, 0.5);
  const Tensor* b = c.bias ? &bias : nullptr;
  Tensor got = poisoned(c.out, c.m, c.n);
  Tensor want = poisoned(c.out, c.m, c.n);
  Status s = kernel.apply(layer, Activation::dense(x), b, got);
  ASSERT_TRUE(s) << s.message();
  ASSERT_TRUE(ref.apply(ref_layer, Activation::dense(x), b, want));
  expect_within_tolerance(ref_layer, x, b, got, want, c, rel);
}

// One layer of `scheme` whose weight scale codes `edit` overwrites (codes, count) before the kernel under
// test and the reference process it, both applied to the same activation random_normal(c.in, seed + 1):
// for scales at the edges of a kernel's exact range. Adds a failure and returns nothing if a step fails.
struct EditedScalesRun {
  LinearLayer layer, ref_layer;  // processed by the kernel under test, by the reference
  Tensor x, got, want;
};
template <class Edit>
std::optional<EditedScalesRun> run_with_edited_scales(const LinearKernel& kernel, const Scheme& scheme, const Case& c,
                                                      uint64_t seed, Edit&& edit) {
  LinearLayer layer = make_layer(scheme, c, seed);
  Tensor& scales = layer.params.at("weight_scale");
  edit(static_cast<uint8_t*>(scales.raw()), scales.numel());
  EditedScalesRun r{layer, layer, random_normal(c.in, {c.m, c.k}, seed + 1), {}, {}};
  const LinearKernel& ref = reference_for(scheme.family);
  if (Status s = kernel.process_weights_after_loading(r.layer); !s) {
    ADD_FAILURE() << kernel.name() << ": " << s.message();
    return std::nullopt;
  }
  if (Status s = ref.process_weights_after_loading(r.ref_layer); !s) {
    ADD_FAILURE() << ref.name() << ": " << s.message();
    return std::nullopt;
  }
  auto got = kernel.apply(r.layer, Activation::dense(r.x));
  auto want = ref.apply(r.ref_layer, Activation::dense(r.x));
  if (!got || !want) {
    ADD_FAILURE() << "apply: " << (got ? want.message() : got.message());
    return std::nullopt;
  }
  r.got = *got;
  r.want = *want;
  return r;
}

// Many threads applying one processed layer at once give bit-identical results to one call.
inline void expect_thread_safe(const LinearKernel& kernel, const Scheme& scheme, const Case& c, uint64_t seed) {
  LinearLayer layer = make_layer(scheme, c, seed);
  ASSERT_TRUE(kernel.process_weights_after_loading(layer));
  const Tensor x = random_normal(c.in, {c.m, c.k}, seed + 1, 1.0);
  auto single = kernel.apply(layer, Activation::dense(x));
  ASSERT_TRUE(single) << single.message();
  constexpr int kThreads = 6;
  std::vector<Tensor> outs;
  for (int t = 0; t < kThreads; ++t) outs.push_back(poisoned(c.out, c.m, c.n));
  std::vector<int> ok(kThreads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) ok[t] += kernel.apply(layer, Activation::dense(x), nullptr, outs[t]).is_ok();
    });
  }
  for (auto& th : pool) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(ok[t], 3);
    EXPECT_EQ(std::memcmp(outs[t].raw(), single->raw(), static_cast<size_t>(single->nbytes())), 0) << "thread " << t;
  }
}

// row_major_weight rebuilds the checkpoint's weight tensor exactly.
inline void expect_round_trip(const LinearKernel& kernel, const Scheme& scheme, const Case& c, uint64_t seed) {
  LinearLayer layer = make_layer(scheme, c, seed);
  const Tensor original = layer.params.at("weight").contiguous();
  ASSERT_TRUE(kernel.process_weights_after_loading(layer));
  auto back = kernel.row_major_weight(layer);
  ASSERT_TRUE(back) << back.message();
  EXPECT_EQ(back->dtype(), original.dtype());
  EXPECT_EQ(back->shape(), original.shape());
  EXPECT_EQ(std::memcmp(back->raw(), original.raw(), static_cast<size_t>(original.nbytes())), 0);
}

// Activations quantized by the caller (the reference quantizer, with the layer's static scale and zero point
// where it has them) give the same output bit for bit as the same activations quantized by the kernel.
inline void expect_prequantized_matches_dense(const LinearKernel& kernel, const Scheme& scheme, const Case& c,
                                              uint64_t seed) {
  SCOPED_TRACE(std::string(scheme.name) + " " + describe(c));
  LinearLayer layer = make_layer(scheme, c, seed);
  ASSERT_TRUE(kernel.process_weights_after_loading(layer));
  const Tensor x = random_normal(c.in, {c.m, c.k}, seed + 1);
  QuantizeOptions qo;
  const QuantKey key = *kernel.input_quant_key(layer.config);
  if (key.scale.is_static) {
    qo.static_scale = Tensor::scalar_f32(layer.params.at("input_scale").data<float>()[0]).reshape({1}).value();
  }
  if (key.scale.is_static && !key.symmetric) qo.static_zero_point = layer.params.at("input_zero_point");
  auto q = quantize(x, key, qo);
  ASSERT_TRUE(q) << q.message();
  auto a = kernel.apply(layer, Activation::dense(x));
  auto b = kernel.apply(layer, Activation::quantized(*q, c.in));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(std::memcmp(a->raw(), b->raw(), static_cast<size_t>(a->nbytes())), 0);
}

#define QL_SKIP_UNLESS_SUPPORTED(kernel)                                                          \
  do {                                                                                            \
    const Verdict v_ = (kernel).is_supported(Platform::host_cpu());                               \
    if (!v_) GTEST_SKIP() << (kernel).name() << " does not run on this CPU: " << v_.reason;       \
  } while (0)

}  // namespace qlinear::x86_test
