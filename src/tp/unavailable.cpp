// Tensor parallelism in a build without NCCL (no CUDA backend, or libnccl not found): every entry point
// says so instead of failing at link time.
#include "qlinear/tensor_parallel.hpp"

namespace qlinear::tp {

namespace {
Status unavailable() {
  return Status::error("tensor parallelism needs qlinear's CUDA backend built with NCCL (this build has " +
                       std::string(QLINEAR_WITH_CUDA ? "CUDA but no libnccl" : "no CUDA backend") + ")");
}
}  // namespace

bool available() { return false; }

Result<UniqueId> UniqueId::create() { return unavailable(); }
std::string UniqueId::hex() const { return std::string(bytes.size() * 2, '0'); }
Result<UniqueId> UniqueId::from_hex(std::string_view) { return unavailable(); }

struct Group::Impl {
  std::vector<int> ranks;
};
Group::Group(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Group::~Group() = default;
Result<std::unique_ptr<Group>> Group::create(const std::vector<int>&) { return unavailable(); }
Result<std::unique_ptr<Group>> Group::join(const UniqueId&, int, int, int) { return unavailable(); }
int Group::size() const { return 0; }
const std::vector<int>& Group::local_ranks() const { return impl_->ranks; }
int Group::local_index(int) const { return -1; }
bool Group::is_local(int) const { return false; }
int Group::device(int) const { return -1; }
cuda::Stream Group::stream(int) const { return nullptr; }
cuda::Stream Group::comm_stream(int) const { return nullptr; }
Status Group::run(const std::function<Status(int)>&) { return unavailable(); }
Status Group::all_reduce_sum(int, Tensor&) { return unavailable(); }
Status Group::all_reduce_max(int, Tensor&) { return unavailable(); }
Status Group::all_gather(int, const Tensor&, Tensor&) { return unavailable(); }
Status Group::reduce_scatter_sum(int, const Tensor&, Tensor&) { return unavailable(); }

ParallelLinear::~ParallelLinear() = default;
Result<std::unique_ptr<ParallelLinear>> ParallelLinear::create(Group&, std::vector<LoadedLayer>,
                                                                const ParallelOptions&) {
  return unavailable();
}
size_t ParallelLinear::slot(int) const { return 0; }
std::string ParallelLinear::reduction() const { return "tensor parallelism is not in this build"; }
Status ParallelLinear::forward(int, const Tensor&, Tensor&, const ForwardOptions&) const { return unavailable(); }
Status ParallelLinear::forward_column(int, const Tensor&, Tensor&, const ForwardOptions&) const {
  return unavailable();
}
Status ParallelLinear::forward_row(int, const Tensor&, Tensor&) const { return unavailable(); }

}  // namespace qlinear::tp
