// The route kernels against their hybrids: for every hybrid CUDA kernel, scheme
// and range of M its m_routes declares, the route's registered kernel (what
// QLINEAR_FORCE_KERNEL reaches) gives the hybrid's output bit for bit on the
// same layer and input, and apply_route names that kernel. Skips without an
// sm_90 GPU.
#include <gtest/gtest.h>

#include "cuda/cuda_test_util.hpp"
#include "qlinear/cuda.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear {
namespace {

#if QLINEAR_WITH_CUDA

bool have_sm90() {
  auto p = Platform::cuda_device(0);
  return p && p->cuda->compute_capability == 90;
}

// The layer quantized from fixed random weights (MX scales relabelled as the
// contract's e8m0).
LinearLayer quantized(const Scheme &s, int64_t n, int64_t k) {
  MakeLayerOptions opt;
  opt.input_min = -3.0f;
  opt.input_max = 3.0f;
  auto layer = quantize_layer(
      "route_test", s, random_normal(DType::kF32, {n, k}, 11, 0.05), opt);
  EXPECT_TRUE(layer) << layer.message();
  cuda_test::relabel_mx_weight_scales(s, *layer);
  return *layer;
}

// kernel's output bytes for x (on the device), the layer processed by it.
std::vector<uint8_t> run(const LinearKernel &kernel, const LinearLayer &fresh,
                         const Tensor &xd, std::string &route) {
  LinearLayer layer = fresh;
  const Status ps = kernel.process_weights_after_loading(layer);
  EXPECT_TRUE(ps.is_ok()) << kernel.name() << ": " << ps.message();
  if (!ps.is_ok())
    return {};
  route = std::string(kernel.apply_route(layer, Activation::dense(xd)));
  auto od =
      cuda::empty(layer.config.out_dtype, {xd.size(0), layer.config.n}).value();
  EXPECT_TRUE(cuda::fill_bytes(od, 0xFF).is_ok());
  const Status as = kernel.apply(layer, Activation::dense(xd), nullptr, od);
  EXPECT_TRUE(as.is_ok()) << kernel.name() << ": " << as.message();
  auto host = cuda::to_host(od);
  EXPECT_TRUE(host) << host.message();
  if (!as.is_ok() || !host)
    return {};
  const uint8_t *b = static_cast<const uint8_t *>(host->raw());
  return {b, b + host->nbytes()};
}

TEST(CudaRoutes, EachRouteKernelGivesItsHybridsOutputInItsRange) {
  if (!have_sm90())
    GTEST_SKIP() << "needs an sm_90 GPU";
  int compared = 0;
  for (const Scheme &s : all_schemes()) {
    for (const int64_t n : {int64_t{256}, int64_t{264}}) {
      const int64_t k = 512;
      const LinearConfig c = make_config(s, n, k);
      for (const LinearKernel *hybrid :
           priority_list(Platform::cuda_device(0).value())) {
        if (hybrid->family() != s.family || !hybrid->can_implement(c))
          continue;
        const std::vector<MRoute> routes = hybrid->m_routes(c);
        bool routes_elsewhere = false;
        for (const MRoute &r : routes)
          routes_elsewhere |= r.kernel != hybrid->name();
        if (!routes_elsewhere)
          continue; // runs every M itself
        const LinearLayer fresh = quantized(s, n, k);
        for (const MRoute &r : routes) {
          const LinearKernel *route = find_kernel(r.kernel);
          ASSERT_NE(route, nullptr) << r.kernel;
          for (const int64_t m :
               {r.m_min,
                r.m_max == MRoute::kNoLimit ? r.m_min + 40 : r.m_max}) {
            SCOPED_TRACE(std::string(s.name) + " N=" + std::to_string(n) +
                         " M=" + std::to_string(m) + " " +
                         std::string(hybrid->name()) + " -> " + r.kernel);
            const Tensor x = random_normal(DType::kBF16, {m, k},
                                           100 + static_cast<uint64_t>(m), 1.0);
            const Tensor xd = cuda::to_device(x).value();
            std::string taken, self;
            const std::vector<uint8_t> want = run(*hybrid, fresh, xd, taken);
            const std::vector<uint8_t> got = run(*route, fresh, xd, self);
            EXPECT_EQ(taken, r.kernel);
            EXPECT_EQ(self, r.kernel);
            ASSERT_EQ(got.size(), want.size());
            EXPECT_TRUE(got == want) << "outputs differ";
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GE(compared, 16);
}

#else
TEST(CudaRoutes, BuiltWithoutCuda) {
  GTEST_SKIP() << "qlinear was built without its CUDA backend (no nvcc)";
}
#endif

} // namespace
} // namespace qlinear
