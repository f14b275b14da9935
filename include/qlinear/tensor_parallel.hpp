#pragma once
// Tensor parallelism over the GPUs of one host, on NCCL (vLLM's ColumnParallelLinear / RowParallelLinear /
// QKVParallelLinear / MergedColumnParallelLinear).
//
// One process drives every GPU of the group: one NCCL communicator per GPU (ncclCommInitAll), one stream
// and one host thread per rank while work runs (Group::run). Why one process: `qlinear run --tp N` and the
// tests compare a split layer with the unsplit one inside one program, and an engine that wants one
// process per GPU uses the same collectives through NCCL's own bootstrap (ncclGetUniqueId +
// ncclCommInitRank; docs/TENSOR_PARALLEL.md) — the layer code below does not care which.
//
//          column-parallel (q/k/v, gate/up)                 row-parallel (o_proj, down_proj)
//   x [M, K] on every rank                           x_r [M, K/W] on rank r (its input columns)
//   rank r: y_r = x W_r^T   [M, N/W]                 rank r: p_r = x_r W_r^T [M, N] (f32 partial)
//   optional all-gather -> y [M, N] (shard order     all-reduce(sum) -> + bias once -> out dtype
//   of fused q/k/v and gate/up kept)                 M >= 512: in row chunks, chunk i's all-reduce (on
//                                                    the comm stream) overlapping chunk i+1's GEMM
//
// Numerics: a column split changes nothing (each output is one rank's dot product). A row split sums W
// f32 partials instead of one f32 accumulation, so results equal the one-GPU layer up to that reduction
// order and the one output rounding. Activation scales agree across ranks: static scales are the same
// tensor; dynamic per-token FP8/INT8 scales come from the full row (each rank's |x| max, all-reduced with
// max, before quantizing its slice); 1x32 (MX) and 1x128 groups never straddle ranks (the loader's
// divisibility rules).
//
// Failures: a rank whose work fails (bad shard, out of memory, a kernel error) aborts every communicator
// (ncclCommAbort), so no rank waits forever in a collective; Group::run returns the first error with its
// rank, and the group refuses further work. A watchdog does the same after QLINEAR_TP_TIMEOUT_S seconds
// (default 300). NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is set when the variable is unset,
// and a group refuses to start when it is set to anything else.
#include <functional>
#include <memory>
#include <vector>

#include "qlinear/cuda.hpp"
#include "qlinear/kernel.hpp"
#include "qlinear/loader.hpp"

namespace qlinear::tp {

// True when qlinear was built with NCCL (CUDA backend and libnccl found).
bool available();

class Group {
 public:
  // A group over `devices` (CUDA device indices, distinct); rank r drives devices[r].
  static Result<std::unique_ptr<Group>> create(const std::vector<int>& devices);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int size() const;
  int device(int rank) const;
  cuda::Stream stream(int rank) const;
  // A second stream per rank for collectives that overlap the rank's computation.
  cuda::Stream comm_stream(int rank) const;

  // Runs fn(rank) on one host thread per rank, with the rank's device and stream current, then waits for
  // every rank's stream. The first error (named with its rank) aborts the communicators and is returned.
  Status run(const std::function<Status(int rank)>& fn);

  // Collectives on the calling thread's current stream (run() makes it the rank's stream), called from
  // inside run() by every rank in the same order. Tensors live on the rank's device, contiguous; f32,
  // bf16 or f16.
  Status all_reduce_sum(int rank, Tensor& t);
  Status all_reduce_max(int rank, Tensor& t);
  // out [W * rows, cols...]: every rank's `in` in rank order.
  Status all_gather(int rank, const Tensor& in, Tensor& out);

  struct Impl;

 private:
  explicit Group(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct ForwardOptions {
  // Column-parallel: all-gather the ranks' outputs into [M, N] (fused shards in their one-GPU order);
  // false leaves each rank its [M, N/W] slice (the input of a following row-parallel layer).
  bool gather_output = true;
};

// One linear layer split across a group: each rank's slice selected, processed and held on its GPU.
class ParallelLinear {
 public:
  // per_rank[r]: rank r's slice as load_checkpoint returns it with LoadOptions{tp_rank = r, tp_size = W}
  // (host tensors). Selects a kernel on each rank's device (the CUDA priority list) and processes it.
  static Result<std::unique_ptr<ParallelLinear>> create(Group& group, std::vector<LoadedLayer> per_rank);
  ~ParallelLinear();

  Parallelism parallelism() const { return parallelism_; }
  const LinearKernel& kernel(int rank) const { return *kernels_[rank]; }
  const LinearLayer& layer(int rank) const { return layers_[rank]; }
  int64_t full_n() const { return full_n_; }
  int64_t full_k() const { return full_k_; }

  // Called by every rank from inside Group::run. Column: x [M, K] (the whole input, on every rank); out
  // [M, N] when gathering, else [M, N/W]. Row: x [M, K/W] (this rank's input columns); out [M, N] on every
  // rank. out has the layer's output dtype, on the rank's device.
  Status forward(int rank, const Tensor& x, Tensor& out, const ForwardOptions& options = {}) const;

 private:
  ParallelLinear() = default;
  Status forward_column(int rank, const Tensor& x, Tensor& out, const ForwardOptions& options) const;
  Status forward_row(int rank, const Tensor& x, Tensor& out) const;

  Group* group_ = nullptr;
  Parallelism parallelism_ = Parallelism::kColumn;
  int64_t full_n_ = 0, full_k_ = 0;
  DType out_dtype_ = DType::kBF16;
  std::vector<LinearLayer> layers_;           // per rank, processed on its device
  std::vector<const LinearKernel*> kernels_;  // per rank
  std::vector<Tensor> bias_;                  // per rank on its device (row-parallel: rank 0 only)
};

}  // namespace qlinear::tp
