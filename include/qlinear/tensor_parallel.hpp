#pragma once
// Tensor parallelism on NCCL (vLLM's ColumnParallelLinear / RowParallelLinear / QKVParallelLinear /
// MergedColumnParallelLinear).
//
// Two ways to make a group, one layer code for both:
//   - one process drives every GPU of a host (Group::create: ncclCommInitAll, one host thread per rank
//     inside Group::run). `qlinear run --tp N` and the tests compare a split layer with the unsplit one
//     inside one program this way.
//   - one process per GPU, the way engines run, across hosts too (Group::join): one process makes a
//     UniqueId, passes its hex form to the others out of band (an environment variable, a file, the
//     engine's own channel), and each joins as its rank (ncclCommInitRankConfig). The group's local ranks
//     are then just that one.
//
//          column-parallel (q/k/v, gate/up)                 row-parallel (o_proj, down_proj)
//   x [M, K] on every rank                           x_r [M, K/W] on rank r (its input columns)
//   rank r: y_r = x W_r^T   [M, N/W]                 rank r: p_r = x_r W_r^T [M, N] (+ bias on rank 0)
//   optional all-gather -> y [M, N] (shard order     summed across ranks, rounded once to the out dtype
//   of fused q/k/v and gate/up kept)                 (ParallelLinear::reduction says how); M >= 512: in
//                                                    row chunks, chunk i's reduction (on the comm
//                                                    stream) overlapping chunk i+1's GEMM
//
// Numerics: a column split changes nothing (each output is one rank's dot product). A row split sums W
// partials instead of one f32 accumulation: with f32 partials (the default) results equal the one-GPU
// layer up to that reduction order and the one output rounding; with RowReduction::kOutputDtype (BF16 /
// F16 partials, half the bytes, what vLLM does) each partial is rounded to the output dtype before the sum
// and the sum once more, about one output rounding per rank. The bias is added once, by rank 0 (the loader
// gives it only rank 0's slice), in its GEMM's epilogue. Activation scales agree across ranks: static
// scales are the same tensor; dynamic per-token FP8/INT8 scales come from the full row (each rank's |x|
// max, all-reduced with max, before quantizing its slice); 1x32 (MX) and 1x128 groups never straddle
// ranks (the loader's divisibility rules).
//
// Failures: a rank whose work fails (bad shard, out of memory, a kernel error) aborts every communicator
// (ncclCommAbort), so no rank waits forever in a collective; Group::run returns the first error with its
// rank, and the group refuses further work. A watchdog does the same after QLINEAR_TP_TIMEOUT_S seconds
// (default 300), and Group::join gives up with an error when the other ranks have not all joined by then.
// NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is set when the variable is unset, and a group
// refuses to start when it is set to anything else.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qlinear/cuda.hpp"
#include "qlinear/kernel.hpp"
#include "qlinear/loader.hpp"

namespace qlinear::tp {

// True when qlinear was built with NCCL (CUDA backend and libnccl found).
bool available();

// NCCL's bootstrap handle for a group of processes (ncclUniqueId, 128 bytes): made by one process, handed
// to the others as hex text.
struct UniqueId {
  std::array<uint8_t, 128> bytes{};
  // A fresh id (ncclGetUniqueId: it also starts the bootstrap listener in this process, which must stay
  // alive until every rank has joined).
  static Result<UniqueId> create();
  std::string hex() const;  // 256 lowercase hex digits
  static Result<UniqueId> from_hex(std::string_view hex);
};

class Group {
 public:
  // A group over `devices` (CUDA device indices, distinct) driven by this process; rank r drives devices[r].
  static Result<std::unique_ptr<Group>> create(const std::vector<int>& devices);
  // This process's place in a group of `size` processes, one rank each: rank `rank` on CUDA device
  // `device`. Every process calls it with the same id; it returns once all have joined, or fails after
  // QLINEAR_TP_TIMEOUT_S seconds (default 300).
  static Result<std::unique_ptr<Group>> join(const UniqueId& id, int rank, int size, int device);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int size() const;                      // ranks in the group, in every process
  const std::vector<int>& local_ranks() const;  // the ranks this process drives, ascending
  bool is_local(int rank) const;
  int local_index(int rank) const;  // the rank's position in local_ranks(), or -1
  // The device and streams of a local rank (-1 / null for a rank another process drives).
  int device(int rank) const;
  cuda::Stream stream(int rank) const;
  // A second stream per rank for collectives that overlap the rank's computation.
  cuda::Stream comm_stream(int rank) const;

  // Runs fn(rank) for every local rank on a host thread of its own, with the rank's device and stream
  // current, then waits for the ranks' streams. The first error (named with its rank) aborts the
  // communicators and is returned.
  Status run(const std::function<Status(int rank)>& fn);

  // Collectives on the calling thread's current stream (run() makes it the rank's stream), called from
  // inside run() by every rank in the same order. Tensors live on the rank's device, contiguous; f32,
  // bf16 or f16.
  Status all_reduce_sum(int rank, Tensor& t);
  Status all_reduce_max(int rank, Tensor& t);
  // out [W * rows, cols...]: every rank's `in` in rank order. `in` may be out's rank-th part (in place).
  Status all_gather(int rank, const Tensor& in, Tensor& out);
  // out [numel / W]: the rank-th part of the sum over ranks of `in` (numel a multiple of W). `out` may be
  // in's rank-th part (in place).
  Status reduce_scatter_sum(int rank, const Tensor& in, Tensor& out);

  struct Impl;

 private:
  explicit Group(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// How a row-parallel layer sums its ranks' partial products.
enum class RowReduction {
  kF32,          // f32 partials: the one-GPU result up to the order of W additions (the default)
  kOutputDtype,  // partials in the output dtype (BF16 / F16): half the bytes; one output rounding per rank more
};

struct ParallelOptions {
  RowReduction row_reduction = RowReduction::kF32;
};

struct ForwardOptions {
  // Column-parallel: all-gather the ranks' outputs into [M, N] (fused shards in their one-GPU order);
  // false leaves each rank its [M, N/W] slice (the input of a following row-parallel layer).
  bool gather_output = true;
};

// One linear layer split across a group: each rank's slice selected, processed and held on its GPU.
class ParallelLinear {
 public:
  // per_rank[i]: the slice of the group's i-th local rank r (Group::local_ranks) as load_checkpoint returns
  // it with LoadOptions{tp_rank = r, tp_size = W} (host tensors). Selects a kernel on each local rank's
  // device (the CUDA priority list) and processes it.
  static Result<std::unique_ptr<ParallelLinear>> create(Group& group, std::vector<LoadedLayer> per_rank,
                                                        const ParallelOptions& options = {});
  ~ParallelLinear();

  Parallelism parallelism() const { return parallelism_; }
  // The kernel and processed slice of a local rank.
  const LinearKernel& kernel(int rank) const { return *kernels_[slot(rank)]; }
  const LinearLayer& layer(int rank) const { return layers_[slot(rank)]; }
  int64_t full_n() const { return full_n_; }
  int64_t full_k() const { return full_k_; }
  // How the outputs come together across ranks and what that does to the numbers (explain's line).
  std::string reduction() const;

  // Called by every rank from inside Group::run. Column: x [M, K] (the whole input, on every rank); out
  // [M, N] when gathering, else [M, N/W]. Row: x [M, K/W] (this rank's input columns); out [M, N] on every
  // rank. out has the layer's output dtype, on the rank's device.
  Status forward(int rank, const Tensor& x, Tensor& out, const ForwardOptions& options = {}) const;

 private:
  ParallelLinear() = default;
  Status forward_column(int rank, const Tensor& x, Tensor& out, const ForwardOptions& options) const;
  Status forward_row(int rank, const Tensor& x, Tensor& out) const;

  size_t slot(int rank) const;  // index of a local rank in the per-rank vectors

  Group* group_ = nullptr;
  ParallelOptions options_;
  Parallelism parallelism_ = Parallelism::kColumn;
  int64_t full_n_ = 0, full_k_ = 0;
  DType out_dtype_ = DType::kBF16;
  std::vector<LinearLayer> layers_;           // per local rank, processed on its device
  std::vector<const LinearKernel*> kernels_;  // per local rank
  std::vector<Tensor> bias_;                  // per local rank on its device (row-parallel: rank 0 only)
};

}  // namespace qlinear::tp
