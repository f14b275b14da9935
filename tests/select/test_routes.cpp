// Routes as data: a hybrid kernel declares which registered kernel runs which range of M (m_routes);
// explain prints every range, and forcing a route's kernel by name selects it. Runs without a GPU: the
// real CUDA kernels are judged on a synthetic sm_90 platform.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "qlinear/make_layer.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear {
namespace {

// Takes every INT8 layer; with routes set, declares them (a hybrid), else the default (itself, every M).
class RoutedFake final : public LinearKernel {
 public:
  RoutedFake(std::string name, std::vector<MRoute> routes) : name_(std::move(name)), routes_(std::move(routes)) {}
  std::string_view name() const override { return name_; }
  Family family() const override { return Family::kInt8ScaledMM; }
  std::string_view summary() const override { return "fake"; }
  Verdict is_supported(const Platform&) const override { return Verdict::yes(); }
  Verdict can_implement(const LinearConfig&) const override { return Verdict::yes(); }
  std::vector<MRoute> m_routes(const LinearConfig& c) const override {
    return routes_.empty() ? LinearKernel::m_routes(c) : routes_;
  }
  std::string_view apply_route(const LinearLayer& layer, const Activation& x) const override {
    for (const MRoute& r : routes_) {
      if (r.contains(x.rows())) return r.kernel;
    }
    return name();
  }

 protected:
  Status process_impl(LinearLayer&) const override { return Status::ok(); }
  Status apply_impl(const LinearLayer&, const Activation&, const Tensor*, Tensor&) const override {
    return Status::ok();
  }

 private:
  std::string name_;
  std::vector<MRoute> routes_;
};

SelectOptions forcing(std::string name) {
  SelectOptions o;
  o.read_environment = false;
  o.force = std::move(name);
  return o;
}

// Ranges ascending from M = 1, contiguous, the last open-ended.
void expect_cover_every_m(const std::vector<MRoute>& routes, const std::string& what) {
  ASSERT_FALSE(routes.empty()) << what;
  EXPECT_EQ(routes.front().m_min, 1) << what;
  for (size_t i = 1; i < routes.size(); ++i) {
    EXPECT_EQ(routes[i].m_min, routes[i - 1].m_max + 1) << what << ": route " << i;
  }
  EXPECT_EQ(routes.back().m_max, MRoute::kNoLimit) << what;
}

TEST(Routes, RangeNamesTheMs) {
  EXPECT_EQ((MRoute{1, 8, "k", ""}).range(), "M 1..8");
  EXPECT_EQ((MRoute{1, 1, "k", ""}).range(), "M 1");
  EXPECT_EQ((MRoute{9, MRoute::kNoLimit, "k", ""}).range(), "M 9+");
  EXPECT_TRUE((MRoute{9, MRoute::kNoLimit, "k", ""}).contains(1 << 30));
  EXPECT_FALSE((MRoute{9, MRoute::kNoLimit, "k", ""}).contains(8));
}

TEST(Routes, ExplainListsAHybridsRoutesAndForcingEachSelectsIt) {
  const RoutedFake stream("fake_route_stream", {});
  const RoutedFake gemm("fake_route_gemm", {});
  const RoutedFake hybrid("fake_route_hybrid", {{1, 8, "fake_route_stream", "small M"},
                                                {9, MRoute::kNoLimit, "fake_route_gemm", "large M"}});
  const LinearKernel* list[] = {&hybrid, &stream, &gemm};
  const LinearConfig c = make_config(*find_scheme("w8a8-int8-dynamic"), 256, 512);
  const Platform p = Platform::synthetic_cpu(CpuFeatures{});

  const Selection sel = explain_selection_in(list, c, p, forcing(""));
  ASSERT_EQ(sel.kernel, &hybrid);
  ASSERT_EQ(sel.candidates.size(), 3u);
  ASSERT_EQ(sel.candidates[0].routes.size(), 2u);
  EXPECT_TRUE(sel.candidates[1].routes.empty());  // only the chosen one carries routes
  const std::string text = sel.explain();
  EXPECT_NE(text.find("M 1..8: fake_route_stream (small M)"), std::string::npos) << text;
  EXPECT_NE(text.find("M 9+: fake_route_gemm (large M)"), std::string::npos) << text;

  for (const MRoute& r : sel.candidates[0].routes) {
    auto k = select_kernel_in(list, c, p, forcing(r.kernel));
    ASSERT_TRUE(k) << k.message();
    EXPECT_EQ(k.value()->name(), r.kernel);
  }
  // A kernel that runs every M itself prints no routes.
  const LinearKernel* plain[] = {&stream};
  const Selection one = explain_selection_in(plain, c, p, forcing(""));
  ASSERT_EQ(one.kernel, &stream);
  EXPECT_TRUE(one.candidates[0].routes.empty());
  EXPECT_EQ(one.explain().find("M 1"), std::string::npos) << one.explain();
}

TEST(Routes, DispatchLogNamesTheRouteOfEachApply) {
  const RoutedFake hybrid("fake_route_hybrid", {{1, 8, "fake_route_stream", ""},
                                                {9, MRoute::kNoLimit, "fake_route_gemm", ""}});
  auto layer = quantize_layer("routed", *find_scheme("w8a8-int8-dynamic"), random_normal(DType::kF32, {16, 64}, 5));
  ASSERT_TRUE(layer) << layer.message();
  ASSERT_TRUE(hybrid.process_weights_after_loading(*layer).is_ok());
  const char* before = std::getenv("QLINEAR_LOG");
  const std::string saved = before ? before : "";
  for (const int64_t m : {int64_t{3}, int64_t{9}}) {
    const Tensor x = random_normal(DType::kF32, {m, 64}, 6);
    Tensor out = Tensor::empty(DType::kBF16, {m, 16});
    ::unsetenv("QLINEAR_LOG");
    testing::internal::CaptureStderr();
    ASSERT_TRUE(hybrid.apply(*layer, Activation::dense(x), nullptr, out).is_ok());
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");  // the log is off: nothing said
    ::setenv("QLINEAR_LOG", "dispatch", 1);
    testing::internal::CaptureStderr();
    ASSERT_TRUE(hybrid.apply(*layer, Activation::dense(x), nullptr, out).is_ok());
    const std::string log = testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find("apply fake_route_hybrid to layer routed at M=" + std::to_string(m) + ": route " +
                       (m <= 8 ? "fake_route_stream" : "fake_route_gemm")),
              std::string::npos)
        << log;
  }
  if (before) {
    ::setenv("QLINEAR_LOG", saved.c_str(), 1);
  } else {
    ::unsetenv("QLINEAR_LOG");
  }
}

// Every CUDA kernel on every scheme of its family (and an N that cuBLASLt FP8 declines), forced so that
// explain shows it chosen: its routes cover every M, each names a registered kernel, explain prints each
// with its range, and forcing the route's kernel selects it.
TEST(Routes, EveryCudaRouteIsARegisteredKernelThatForcingSelects) {
  if (!built_with_cuda()) GTEST_SKIP() << "the CUDA kernels are not registered in this build";
  const Platform sm90 = Platform::synthetic_cuda(90);
  int hybrids = 0;
  std::set<std::string> route_kernels;
  for (const Scheme& s : all_schemes()) {
    for (const int64_t n : {int64_t{4096}, int64_t{4104}}) {
      const LinearConfig c = make_config(s, n, 4096);
      for (const LinearKernel* k : priority_list(sm90)) {
        if (k->family() != s.family) continue;
        const std::string what = std::string(s.name) + " N=" + std::to_string(n) + " " + std::string(k->name());
        const Selection sel = explain_selection(c, sm90, forcing(std::string(k->name())));
        if (sel.kernel == nullptr) continue;  // the kernel declines this layer
        const std::vector<MRoute> routes = k->m_routes(c);
        expect_cover_every_m(routes, what);
        const std::string text = sel.explain();
        if (routes.size() > 1 || routes[0].kernel != k->name()) {
          ++hybrids;
          for (const MRoute& r : routes) {
            EXPECT_NE(text.find(r.range() + ": " + r.kernel), std::string::npos) << what << "\n" << text;
          }
        }
        for (const MRoute& r : routes) {
          route_kernels.insert(r.kernel);
          ASSERT_NE(find_kernel(r.kernel), nullptr) << what << ": route " << r.kernel << " is not registered";
          auto chosen = select_kernel(c, sm90, forcing(r.kernel));
          ASSERT_TRUE(chosen) << what << ": " << chosen.message();
          EXPECT_EQ(chosen.value()->name(), r.kernel) << what;
        }
      }
    }
  }
  EXPECT_GE(hybrids, 8);
  for (const char* name : {"sm90_fp8_weight_only_bf16", "sm90_mxfp8_bf16", "sm90_mxfp6_bf16", "sm90_mxfp4_bf16",
                           "sm90_fp8_weight_only_stream", "sm90_mxfp8_stream", "cublaslt_fp8_scaled_mm",
                           "sm90_fp8_scaled_mm_mma", "sm90_fp8_scaled_mm_stream", "cublaslt_fp8_block_scaled", "sm90_fp8_block_scaled_stream"}) {
    EXPECT_TRUE(route_kernels.count(name)) << name << " is no hybrid's route";
  }
}

// The M ranges of the CUDA hybrids, set by H200 measurements (cuda_kernels.cpp).
TEST(Routes, CudaHybridRangesFollowStreamMaxM) {
  if (!built_with_cuda()) GTEST_SKIP() << "the CUDA kernels are not registered in this build";
  const Platform sm90 = Platform::synthetic_cuda(90);
  struct Case {
    const char* hybrid;
    const char* scheme;
    int64_t n;
    std::vector<std::pair<std::string, std::string>> routes;  // range, kernel
  };
  const Case cases[] = {
      {"sm90_mxfp8", "w8a16-mxfp8", 4096, {{"M 1..8", "sm90_mxfp8_stream"}, {"M 9+", "sm90_mxfp8_bf16"}}},
      {"sm90_mxfp4", "w4a16-mxfp4", 4096, {{"M 1..8", "sm90_mxfp4_stream"}, {"M 9+", "sm90_mxfp4_bf16"}}},
      {"sm90_mxfp6", "w6a16-mxfp6-e2m3", 4096, {{"M 1..8", "sm90_mxfp6_stream"}, {"M 9+", "sm90_mxfp6_bf16"}}},
      {"sm90_fp8_weight_only", "w8a16-fp8", 4096,
       {{"M 1..16", "sm90_fp8_weight_only_stream"}, {"M 17+", "sm90_fp8_weight_only_bf16"}}},
      {"sm90_fp8_scaled_mm", "w8a8-fp8-tensor", 4096, {{"M 1+", "cublaslt_fp8_scaled_mm"}}},
      {"sm90_fp8_scaled_mm", "w8a8-fp8-channel", 4096,
       {{"M 1..8", "sm90_fp8_scaled_mm_mma"}, {"M 9..16", "sm90_fp8_scaled_mm_mma"}, {"M 17+", "cublaslt_fp8_scaled_mm"}}},
      {"sm90_fp8_scaled_mm", "w8a8-fp8-tensor", 4104, {{"M 1+", "sm90_fp8_scaled_mm_stream"}}},
      {"sm90_fp8_block_scaled", "w8a8-fp8-block", 4096,
       {{"M 1", "sm90_fp8_block_scaled_stream"}, {"M 2+", "cublaslt_fp8_block_scaled"}}},
  };
  for (const Case& t : cases) {
    const LinearConfig c = make_config(*find_scheme(t.scheme), t.n, 4096);
    const Selection sel = explain_selection(c, sm90, forcing(t.hybrid));
    ASSERT_NE(sel.kernel, nullptr) << t.scheme;
    const std::vector<MRoute> routes = sel.kernel->m_routes(c);
    ASSERT_EQ(routes.size(), t.routes.size()) << t.scheme << "\n" << sel.explain();
    for (size_t i = 0; i < routes.size(); ++i) {
      EXPECT_EQ(routes[i].range(), t.routes[i].first) << t.scheme;
      EXPECT_EQ(routes[i].kernel, t.routes[i].second) << t.scheme;
    }
  }
  // F16 activations: the BF16 route declines, so the MX hybrid streams every M and says why.
  const LinearConfig f16 = make_config(*find_scheme("w8a16-mxfp8"), 4096, 4096, DType::kF16);
  const std::vector<MRoute> r = find_kernel("sm90_mxfp8")->m_routes(f16);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].kernel, "sm90_mxfp8_stream");
  EXPECT_NE(r[0].why.find("BF16"), std::string::npos) << r[0].why;
}

}  // namespace
}  // namespace qlinear
