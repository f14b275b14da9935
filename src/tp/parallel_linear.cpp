// Column- and row-parallel linear layers over a Group (tensor_parallel.hpp).
#include <cuda_runtime.h>

#include <numeric>
#include <string>

#include "qlinear/cuda.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/tensor_parallel.hpp"

namespace qlinear::tp {

namespace {

Result<Tensor> stream_tensor(DType dtype, Shape shape, int device, cuda::Stream stream) {
  return cuda::empty_on_stream(dtype, std::move(shape), device, stream);
}

bool is_dynamic_per_token(const std::optional<QuantKey>& key) {
  return key && !key->scale.is_static && key->scale.group.is_per_token() && key->symmetric &&
         (key->dtype == DType::kF8E4M3 || key->dtype == DType::kI8);
}

}  // namespace

ParallelLinear::~ParallelLinear() = default;

Result<std::unique_ptr<ParallelLinear>> ParallelLinear::create(Group& group, std::vector<LoadedLayer> per_rank,
                                                                const ParallelOptions& options) {
  const int w = group.size();
  const std::vector<int>& ranks = group.local_ranks();
  if (per_rank.size() != ranks.size()) {
    return Status::error("a parallel layer needs one slice per rank this process drives: got " +
                         std::to_string(per_rank.size()) + " for " + std::to_string(ranks.size()) + " local rank" +
                         (ranks.size() == 1 ? "" : "s") + " of a group of " + std::to_string(w));
  }
  auto pl = std::unique_ptr<ParallelLinear>(new ParallelLinear());
  pl->group_ = &group;
  pl->options_ = options;
  const LoadedLayer& first = per_rank[0];
  pl->parallelism_ = first.parallelism;
  pl->full_n_ = first.full_n;
  pl->full_k_ = first.full_k;
  pl->out_dtype_ = first.layer.config.out_dtype;
  const std::string where = "layer " + first.layer.name;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const LoadedLayer& l = per_rank[i];
    if (l.layer.tp_rank != ranks[i] || l.layer.tp_size != w || l.parallelism != pl->parallelism_ ||
        l.layer.name != first.layer.name) {
      return Status::error(where + ": slice " + std::to_string(i) + " is " + l.layer.name + " rank " +
                           std::to_string(l.layer.tp_rank) + " of " + std::to_string(l.layer.tp_size) +
                           "; expected rank " + std::to_string(ranks[i]) + " of " + std::to_string(w));
    }
  }
  const bool split_row = pl->parallelism_ == Parallelism::kRow && w > 1;
  if (split_row && options.row_reduction == RowReduction::kOutputDtype && pl->out_dtype_ != DType::kBF16 &&
      pl->out_dtype_ != DType::kF16) {
    return Status::error(where + ": a reduction in the output dtype needs a BF16 or F16 output, the layer gives " +
                         std::string(name(pl->out_dtype_)) + " (use RowReduction::kF32)");
  }
  pl->layers_.resize(ranks.size());
  pl->kernels_.assign(ranks.size(), nullptr);
  pl->bias_.resize(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    LoadedLayer& l = per_rank[i];
    LinearLayer layer = std::move(l.layer);
    // Row-parallel partial products stay f32 until the reduced sum is rounded once (one rank: no sum),
    // unless the reduction runs in the output dtype.
    if (split_row && options.row_reduction == RowReduction::kF32) layer.config.out_dtype = DType::kF32;
    const int dev = group.device(ranks[i]);
    cuda::DeviceGuard guard;
    QL_RETURN_IF_ERROR(guard.set(dev));
    QL_ASSIGN_OR_RETURN(Platform platform, Platform::cuda_device(dev));
    auto kernel = select_kernel(layer.config, platform);
    if (!kernel) return Status::error(where + " rank " + std::to_string(ranks[i]) + ": " + kernel.message());
    QL_RETURN_IF_ERROR((*kernel)->process_weights_after_loading(layer));
    pl->kernels_[i] = *kernel;
    pl->layers_[i] = std::move(layer);
    // Row-parallel: only rank 0's slice has the bias (the loader's rule), added in its GEMM's epilogue,
    // so the sum carries it once.
    if (l.bias.defined()) {
      QL_ASSIGN_OR_RETURN(pl->bias_[i], cuda::to_device(l.bias, dev));
    }
  }
  return pl;
}

size_t ParallelLinear::slot(int rank) const {
  const int i = group_->local_index(rank);
  return i < 0 ? layers_.size() : static_cast<size_t>(i);  // not local: out of range for every per-rank vector
}

std::string ParallelLinear::reduction() const {
  const int w = group_->size();
  if (parallelism_ == Parallelism::kColumn) {
    return "column-parallel over " + std::to_string(w) + " ranks: each output is one rank's dot product, as on one "
           "GPU; outputs all-gathered in the output dtype";
  }
  if (w == 1) return "row-parallel over 1 rank: the one-GPU layer";
  if (options_.row_reduction == RowReduction::kOutputDtype) {
    return "row-parallel over " + std::to_string(w) + " ranks: " + std::string(name(out_dtype_)) +
           " partial products (bias on rank 0) all-reduced in place: half the bytes of f32 sums; each partial is "
           "rounded to " + std::string(name(out_dtype_)) + " before the sum and the sum again (about one output "
           "rounding per rank)";
  }
  return "row-parallel over " + std::to_string(w) + " ranks: f32 partial products (bias on rank 0) reduce-"
         "scattered, each rank's part rounded once to " + std::string(name(out_dtype_)) + " and all-gathered in it "
         "(where M x N divides by the ranks, else an f32 all-reduce and the rounding): the one-GPU result up to the "
         "order of the f32 additions";
}

Status ParallelLinear::forward(int rank, const Tensor& x, Tensor& out, const ForwardOptions& options) const {
  if (slot(rank) >= layers_.size()) {
    return Status::error("rank " + std::to_string(rank) + " is not one this process drives (local ranks of the "
                         "group of " + std::to_string(group_->size()) + ": " +
                         std::to_string(group_->local_ranks().size()) + ")");
  }
  return parallelism_ == Parallelism::kColumn ? forward_column(rank, x, out, options) : forward_row(rank, x, out);
}

Status ParallelLinear::forward_column(int rank, const Tensor& x, Tensor& out, const ForwardOptions& options) const {
  const size_t i = slot(rank);
  const LinearLayer& layer = layers_[i];
  const LinearKernel& kernel = *kernels_[i];
  const Tensor* bias = bias_[i].defined() ? &bias_[i] : nullptr;
  if (!options.gather_output) return kernel.apply(layer, Activation::dense(x), bias, out);

  const int w = group_->size();
  const int dev = group_->device(rank);
  const cuda::Stream stream = cuda::current_stream();
  const int64_t m = x.size(0), n_r = layer.config.n;
  // Fused shards keep their one-GPU order: rank r's part of shard s goes to column off_s + r * w_s.
  std::vector<int64_t> widths = layer.config.logical_widths;
  if (widths.empty()) widths = {n_r};
  if (n_r * w != full_n_) {
    return Status::error("layer " + layer.name + ": slices of " + std::to_string(n_r) + " outputs on " +
                         std::to_string(w) + " ranks do not make its " + std::to_string(full_n_) +
                         " outputs (replicated KV heads): gather_output needs a plain split");
  }
  if (out.size(0) != m || out.size(1) != full_n_ || out.dtype() != layer.config.out_dtype) {
    return Status::error("layer " + layer.name + ": gathered output must be " +
                         std::string(name(layer.config.out_dtype)) + " [" + std::to_string(m) + ", " +
                         std::to_string(full_n_) + "], got " + out.describe());
  }
  QL_ASSIGN_OR_RETURN(Tensor local, stream_tensor(layer.config.out_dtype, {m, n_r}, dev, stream));
  QL_RETURN_IF_ERROR(kernel.apply(layer, Activation::dense(x), bias, local));
  QL_ASSIGN_OR_RETURN(Tensor gathered, stream_tensor(layer.config.out_dtype, {w * m, n_r}, dev, stream));
  QL_RETURN_IF_ERROR(group_->all_gather(rank, local, gathered));
  const size_t es = static_cast<size_t>(element_size(layer.config.out_dtype));
  const auto* src = static_cast<const uint8_t*>(gathered.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  int64_t local_off = 0, full_off = 0;
  for (int64_t ws : widths) {
    for (int r = 0; r < w; ++r) {
      QL_CUDA_CHECK(cudaMemcpy2DAsync(dst + (full_off + r * ws) * es, static_cast<size_t>(full_n_) * es,
                                      src + (r * m * n_r + local_off) * es, static_cast<size_t>(n_r) * es,
                                      static_cast<size_t>(ws) * es, static_cast<size_t>(m), cudaMemcpyDeviceToDevice,
                                      stream));
    }
    local_off += ws;
    full_off += ws * w;
  }
  return Status::ok();
}

// An event recorded on `from` that `to` waits for (one per hand-over; destroyed once enqueued, which CUDA
// allows: the wait keeps its own reference).
Status hand_over(cuda::Stream from, cuda::Stream to) {
  cudaEvent_t e = nullptr;
  QL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaError_t err = cudaEventRecord(e, from);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(to, e, 0);
  cudaEventDestroy(e);
  return cuda::check(err, "cudaEventRecord/cudaStreamWaitEvent (stream hand-over)");
}

// Row chunks for overlapping the all-reduce with the GEMM: none below M = 512 (the GEMM is short and a
// chunk's launch overhead would show), else 4.
int64_t row_chunks(int64_t m) { return m >= 512 ? 4 : 1; }

// The reduction of one row chunk's partial products `part` [rows, N] into out_rows, on the comm stream:
//   - partials in the output dtype (RowReduction::kOutputDtype): part is out_rows; summed in place;
//   - f32 partials, rows x N divisible by the ranks: reduce-scatter in place, each rank rounds its part of
//     the sum to the output dtype straight into out_rows, then an in-place all-gather of the rounded parts
//     (f32 on the wire for the sum, the output dtype for the gather: 3/4 of an f32 all-reduce's bytes, and
//     the rounding over 1/W of the rows);
//   - otherwise an f32 all-reduce and the rounding of every row.
Status reduce_rows(Group& group, int rank, Tensor& part, Tensor& out_rows) {
  if (part.raw() == out_rows.raw()) return group.all_reduce_sum(rank, part);
  const int w = group.size();
  const int64_t numel = part.numel();
  if (numel % w != 0) {
    QL_RETURN_IF_ERROR(group.all_reduce_sum(rank, part));
    return cuda::add_bias_and_round(part, nullptr, out_rows);
  }
  const int64_t each = numel / w;
  QL_ASSIGN_OR_RETURN(Tensor part_flat, part.reshape({w, each}));
  QL_ASSIGN_OR_RETURN(Tensor mine, part_flat.narrow(0, rank, 1));
  QL_RETURN_IF_ERROR(group.reduce_scatter_sum(rank, part, mine));
  QL_ASSIGN_OR_RETURN(Tensor out_flat, out_rows.reshape({w, each}));
  QL_ASSIGN_OR_RETURN(Tensor out_mine, out_flat.narrow(0, rank, 1));
  QL_RETURN_IF_ERROR(cuda::add_bias_and_round(mine, nullptr, out_mine));
  return group.all_gather(rank, out_mine, out_flat);
}

Status ParallelLinear::forward_row(int rank, const Tensor& x, Tensor& out) const {
  const size_t i = slot(rank);
  const LinearLayer& layer = layers_[i];
  const LinearKernel& kernel = *kernels_[i];
  const LinearConfig& c = layer.config;
  const int dev = group_->device(rank);
  const cuda::Stream stream = cuda::current_stream();
  const cuda::Stream comm = group_->comm_stream(rank);
  const int64_t m = x.size(0);
  if (x.rank() != 2 || x.size(1) != c.k) {
    return Status::error("layer " + layer.name + " rank " + std::to_string(rank) + ": input must be this rank's [M, " +
                         std::to_string(c.k) + "] columns, got " + x.describe());
  }
  if (out.size(0) != m || out.size(1) != full_n_ || out.dtype() != out_dtype_ || !out.is_contiguous()) {
    return Status::error("layer " + layer.name + ": output must be contiguous " + std::string(name(out_dtype_)) +
                         " [" + std::to_string(m) + ", " + std::to_string(full_n_) + "], got " + out.describe());
  }
  const Tensor* bias = bias_[i].defined() ? &bias_[i] : nullptr;
  if (group_->size() == 1) return kernel.apply(layer, Activation::dense(x), bias, out);
  if (m == 0) return Status::ok();
  // f32 partials go to scratch; partials in the output dtype straight into the output.
  const bool in_out = c.out_dtype == out_dtype_;
  Tensor partial = out;
  if (!in_out) {
    QL_ASSIGN_OR_RETURN(partial, stream_tensor(DType::kF32, {m, c.n}, dev, stream));
  }

  // Dynamic per-token scales of the full row: every rank's |x| max, all-reduced, then each slice quantized
  // with it and handed to the kernel pre-quantized (its input_quant_key). Collectives all run on the comm
  // stream, in the same order on every rank.
  std::optional<QuantizedTensor> pre;
  const std::optional<QuantKey> takes = kernel.input_quant_key(c);
  if (is_dynamic_per_token(c.activation_key) && takes && *takes == *c.activation_key) {
    QL_ASSIGN_OR_RETURN(Tensor amax, stream_tensor(DType::kF32, {m}, dev, stream));
    QL_RETURN_IF_ERROR(cuda::row_abs_max(x, amax));
    QL_RETURN_IF_ERROR(hand_over(stream, comm));
    {
      cuda::StreamGuard on_comm(comm);
      QL_RETURN_IF_ERROR(group_->all_reduce_max(rank, amax));
    }
    QL_RETURN_IF_ERROR(hand_over(comm, stream));
    QL_ASSIGN_OR_RETURN(QuantizedTensor q, kernel.quantize_input(layer, x, amax));
    pre = std::move(q);
  }

  // Chunk i: its GEMM on the rank's stream (rank 0 adds the bias); its reduction and rounding on the comm
  // stream, overlapping chunk i+1's GEMM.
  const int64_t chunks = row_chunks(m);
  const int64_t rows_per = (m + chunks - 1) / chunks;
  for (int64_t r0 = 0; r0 < m; r0 += rows_per) {
    const int64_t rows = std::min(rows_per, m - r0);
    QL_ASSIGN_OR_RETURN(Tensor part, partial.narrow(0, r0, rows));
    if (pre) {
      QuantizedTensor q = *pre;
      q.rows = rows;
      QL_ASSIGN_OR_RETURN(q.data, pre->data.narrow(0, r0, rows));
      QL_ASSIGN_OR_RETURN(q.scale, pre->scale.narrow(0, r0, rows));
      QL_RETURN_IF_ERROR(kernel.apply(layer, Activation::quantized(std::move(q), x.dtype()), bias, part));
    } else {
      QL_ASSIGN_OR_RETURN(Tensor xs, x.narrow(0, r0, rows));
      QL_RETURN_IF_ERROR(kernel.apply(layer, Activation::dense(xs), bias, part));
    }
    QL_RETURN_IF_ERROR(hand_over(stream, comm));
    cuda::StreamGuard on_comm(comm);
    QL_ASSIGN_OR_RETURN(Tensor out_rows, out.narrow(0, r0, rows));
    QL_RETURN_IF_ERROR(reduce_rows(*group_, rank, part, out_rows));
  }
  // The rank's stream continues after the last reduction (and frees the scratch only then).
  return hand_over(comm, stream);
}

}  // namespace qlinear::tp
