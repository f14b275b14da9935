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

Result<std::unique_ptr<ParallelLinear>> ParallelLinear::create(Group& group, std::vector<LoadedLayer> per_rank) {
  const int w = group.size();
  if (static_cast<int>(per_rank.size()) != w) {
    return Status::error("a parallel layer needs one slice per rank: got " + std::to_string(per_rank.size()) +
                         " for a group of " + std::to_string(w));
  }
  auto pl = std::unique_ptr<ParallelLinear>(new ParallelLinear());
  pl->group_ = &group;
  const LoadedLayer& first = per_rank[0];
  pl->parallelism_ = first.parallelism;
  pl->full_n_ = first.full_n;
  pl->full_k_ = first.full_k;
  pl->out_dtype_ = first.layer.config.out_dtype;
  const std::string where = "layer " + first.layer.name;
  for (int r = 0; r < w; ++r) {
    const LoadedLayer& l = per_rank[static_cast<size_t>(r)];
    if (l.layer.tp_rank != r || l.layer.tp_size != w || l.parallelism != pl->parallelism_ ||
        l.layer.name != first.layer.name) {
      return Status::error(where + ": slice " + std::to_string(r) + " is " + l.layer.name + " rank " +
                           std::to_string(l.layer.tp_rank) + " of " + std::to_string(l.layer.tp_size) +
                           "; expected rank " + std::to_string(r) + " of " + std::to_string(w));
    }
  }
  pl->layers_.resize(static_cast<size_t>(w));
  pl->kernels_.assign(static_cast<size_t>(w), nullptr);
  pl->bias_.resize(static_cast<size_t>(w));
  // The row-parallel bias is added once, after the reduction, on every rank's copy of the sum.
  const Tensor row_bias = first.bias;
  for (int r = 0; r < w; ++r) {
    LoadedLayer& l = per_rank[static_cast<size_t>(r)];
    LinearLayer layer = std::move(l.layer);
    // Row-parallel partial products stay f32 until the reduced sum is rounded once (one rank: no sum).
    if (pl->parallelism_ == Parallelism::kRow && w > 1) layer.config.out_dtype = DType::kF32;
    cuda::DeviceGuard guard;
    QL_RETURN_IF_ERROR(guard.set(group.device(r)));
    QL_ASSIGN_OR_RETURN(Platform platform, Platform::cuda_device(group.device(r)));
    auto kernel = select_kernel(layer.config, platform);
    if (!kernel) return Status::error(where + " rank " + std::to_string(r) + ": " + kernel.message());
    QL_RETURN_IF_ERROR((*kernel)->process_weights_after_loading(layer));
    pl->kernels_[static_cast<size_t>(r)] = *kernel;
    pl->layers_[static_cast<size_t>(r)] = std::move(layer);
    const Tensor& b = pl->parallelism_ == Parallelism::kRow ? row_bias : l.bias;
    if (b.defined()) {
      QL_ASSIGN_OR_RETURN(pl->bias_[static_cast<size_t>(r)], cuda::to_device(b, group.device(r)));
    }
  }
  return pl;
}

Status ParallelLinear::forward(int rank, const Tensor& x, Tensor& out, const ForwardOptions& options) const {
  if (rank < 0 || rank >= static_cast<int>(layers_.size())) return Status::error("rank out of range");
  return parallelism_ == Parallelism::kColumn ? forward_column(rank, x, out, options) : forward_row(rank, x, out);
}

Status ParallelLinear::forward_column(int rank, const Tensor& x, Tensor& out, const ForwardOptions& options) const {
  const LinearLayer& layer = layers_[static_cast<size_t>(rank)];
  const LinearKernel& kernel = *kernels_[static_cast<size_t>(rank)];
  const Tensor* bias = bias_[static_cast<size_t>(rank)].defined() ? &bias_[static_cast<size_t>(rank)] : nullptr;
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

Status ParallelLinear::forward_row(int rank, const Tensor& x, Tensor& out) const {
  const LinearLayer& layer = layers_[static_cast<size_t>(rank)];
  const LinearKernel& kernel = *kernels_[static_cast<size_t>(rank)];
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
  const Tensor* bias = bias_[static_cast<size_t>(rank)].defined() ? &bias_[static_cast<size_t>(rank)] : nullptr;
  if (group_->size() == 1) return kernel.apply(layer, Activation::dense(x), bias, out);
  if (m == 0) return Status::ok();
  QL_ASSIGN_OR_RETURN(Tensor partial, stream_tensor(DType::kF32, {m, c.n}, dev, stream));

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

  // Chunk i: its GEMM on the rank's stream; its all-reduce and bias/rounding epilogue on the comm stream,
  // overlapping chunk i+1's GEMM.
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
      QL_RETURN_IF_ERROR(kernel.apply(layer, Activation::quantized(std::move(q), x.dtype()), nullptr, part));
    } else {
      QL_ASSIGN_OR_RETURN(Tensor xs, x.narrow(0, r0, rows));
      QL_RETURN_IF_ERROR(kernel.apply(layer, Activation::dense(xs), nullptr, part));
    }
    QL_RETURN_IF_ERROR(hand_over(stream, comm));
    cuda::StreamGuard on_comm(comm);
    QL_RETURN_IF_ERROR(group_->all_reduce_sum(rank, part));
    QL_ASSIGN_OR_RETURN(Tensor out_rows, out.narrow(0, r0, rows));
    QL_RETURN_IF_ERROR(cuda::add_bias_and_round(part, bias, out_rows));
  }
  // The rank's stream continues after the last epilogue (and frees the scratch only then).
  return hand_over(comm, stream);
}

}  // namespace qlinear::tp
