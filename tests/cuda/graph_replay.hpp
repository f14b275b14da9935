#pragma once
// The CUDA-graph check the decode and GEMM tests share: a kernel call captured on a stream and replayed.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <functional>

#include "qlinear/status.hpp"

namespace qlinear::cuda_test {

// After one direct warm-up call, `call` is captured in a CUDA graph on `stream` (which must be the call's
// current stream) and replayed `replays` times: each replay runs `before(r)` (fresh inputs, a poisoned
// output), the graph, then `after(r)` (the output against a direct call and the reference).
inline void replay_captured_call(cudaStream_t stream, int replays, const std::function<Status()>& call,
                                 const std::function<void(int)>& before, const std::function<void(int)>& after) {
  const Status warm = call();
  ASSERT_TRUE(warm.is_ok()) << warm.message();
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const Status captured = call();
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.is_ok()) << captured.message();
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph is independent of it
  ASSERT_EQ(instantiated, cudaSuccess);
  for (int r = 0; r < replays && !::testing::Test::HasFatalFailure(); ++r) {
    before(r);
    EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess) << "replay " << r;
    after(r);
  }
  cudaGraphExecDestroy(exec);
}

}  // namespace qlinear::cuda_test
