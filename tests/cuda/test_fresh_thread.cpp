// A layer applied from a thread whose first CUDA work is that apply (a tensor-parallel rank's thread, a
// server's worker) gives the main thread's output bytes. The runtime binds a thread's context only at its
// first call that needs one, and the driver calls our kernels make before any such call (the TMA
// descriptors of the wgmma routes) failed there with CUDA_ERROR_INVALID_CONTEXT.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "qlinear/make_layer.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"

#if QLINEAR_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda/cuda_test_util.hpp"
#include "qlinear/cuda.hpp"
#endif

namespace qlinear {
namespace {

#if QLINEAR_WITH_CUDA

// Applies `layer` to x into `out` on a new thread (its first CUDA work), then waits for the device.
Status apply_on_a_new_thread(const LinearKernel& kernel, const LinearLayer& layer, const Tensor& x, Tensor& out) {
  Status in_thread = Status::ok();
  std::thread([&] { in_thread = kernel.apply(layer, Activation::dense(x), nullptr, out); }).join();
  QL_RETURN_IF_ERROR(in_thread);
  return cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

// A layer of `scheme` quantized from fixed random weights, and the kernel the CUDA platform selects for it,
// with the layer processed by that kernel.
struct Prepared {
  LinearLayer layer;
  const LinearKernel* kernel = nullptr;  // the registry's
};
Result<Prepared> prepared(const char* scheme, int64_t n, int64_t k) {
  QL_ASSIGN_OR_RETURN(Platform platform, Platform::cuda_device(0));
  const Scheme& s = *find_scheme(scheme);
  QL_ASSIGN_OR_RETURN(LinearLayer layer, quantize_layer("fresh_thread", s, random_normal(DType::kF32, {n, k}, 7, 0.05),
                                                        MakeLayerOptions{}));
  cuda_test::relabel_mx_weight_scales(s, layer);
  QL_ASSIGN_OR_RETURN(const LinearKernel* kernel, select_kernel(layer.config, platform));
  QL_RETURN_IF_ERROR(kernel->process_weights_after_loading(layer));
  return Prepared{std::move(layer), kernel};
}

// Whether two device tensors hold the same bytes.
bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ha = cuda::to_host(a).value(), hb = cuda::to_host(b).value();
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.raw(), hb.raw(), static_cast<size_t>(ha.nbytes())) == 0;
}

TEST(CudaFreshThread, ApplyFromAThreadWithNoCudaCallsYetEqualsTheMainThread) {
  QL_REQUIRE_SM90();
  const int64_t n = 256, k = 384;
  int checked = 0;
  // The routes by M: the decode kernels (mma.sync at small M, the swap-AB wgmma ones with TMA above), the
  // prefill GEMMs (wgmma with TMA, cuBLASLt).
  for (const char* scheme : {"w4a16-mxfp4", "w8a16-mxfp8", "w6a16-mxfp6-e2m3", "w8a8-fp8-channel", "w8a8-int8-dynamic",
                             "w4a4-mxfp4"}) {
    auto p = prepared(scheme, n, k);
    ASSERT_TRUE(p) << scheme << ": " << p.message();
    const LinearKernel& kernel = *p->kernel;
    for (int64_t m : {1, 64, 257, 1024}) {
      SCOPED_TRACE(std::string(scheme) + " on " + std::string(kernel.name()) + ", M = " + std::to_string(m));
      const Tensor x = cuda::to_device(
                           cuda_test::to_dtype(random_normal(DType::kF32, {m, k}, cuda_test::fresh_seed(), 1.0),
                                               DType::kBF16))
                           .value();
      Tensor main_out = cuda::empty(DType::kBF16, {m, n}).value();
      Tensor thread_out = cuda::empty(DType::kBF16, {m, n}).value();
      ASSERT_TRUE(cuda::fill_bytes(main_out, 0xFF).is_ok() && cuda::fill_bytes(thread_out, 0x7F).is_ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const Status in_main = kernel.apply(p->layer, Activation::dense(x), nullptr, main_out);
      ASSERT_TRUE(in_main) << in_main.message();
      // The main thread's work done first (the test below leaves it in flight).
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const Status in_thread = apply_on_a_new_thread(kernel, p->layer, x, thread_out);
      ASSERT_TRUE(in_thread) << in_thread.message();
      EXPECT_TRUE(same_bytes(main_out, thread_out));
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6 * 4);
}

// A thread that ends right after its apply returns, while the main thread's apply of the same layer is still
// in flight, is joined and gave the main thread's bytes. W4A4 MXFP4 and W8A8 MXFP8 at M = 64 (the activation
// pass, then the decode GEMM) made the join wait forever in most runs on an H100 (CUDA 13.0) until the
// backend drained a thread's per-thread stream when the thread ends (cuda_util.cpp; docs/RELIABILITY.md).
TEST(CudaFreshThread, AThreadEndingRightAfterItsApplyWhileAnotherIsInFlightIsJoined) {
  QL_REQUIRE_SM90();
  const int64_t m = 64, n = 256, k = 384;
  for (const char* scheme : {"w4a4-mxfp4", "w8a8-mxfp8"}) {
    auto p = prepared(scheme, n, k);
    ASSERT_TRUE(p) << scheme << ": " << p.message();
    const LinearKernel& kernel = *p->kernel;
    for (int rep = 0; rep < 8; ++rep) {
      SCOPED_TRACE(std::string(scheme) + ", repetition " + std::to_string(rep));
      const Tensor x = cuda::to_device(cuda_test::to_dtype(random_normal(DType::kF32, {m, k}, cuda_test::fresh_seed(), 1.0),
                                                           DType::kBF16))
                           .value();
      Tensor a = cuda::empty(DType::kBF16, {m, n}).value(), b = cuda::empty(DType::kBF16, {m, n}).value();
      ASSERT_TRUE(cuda::fill_bytes(a, 0xFF).is_ok() && cuda::fill_bytes(b, 0x7F).is_ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const Status in_main = kernel.apply(p->layer, Activation::dense(x), nullptr, a);  // left in flight
      ASSERT_TRUE(in_main) << in_main.message();
      const Status in_thread = apply_on_a_new_thread(kernel, p->layer, x, b);
      ASSERT_TRUE(in_thread) << in_thread.message();
      EXPECT_TRUE(same_bytes(a, b));
    }
  }
}

#else

TEST(CudaFreshThread, BuiltWithoutCuda) { GTEST_SKIP() << "qlinear was built without its CUDA backend (no nvcc)"; }

#endif

}  // namespace
}  // namespace qlinear
