#include "cli/bench_anchor.hpp"

#include "bench/cuda_anchors.hpp"
#include "cli/layer_runner.hpp"
#include "cli/onednn_anchor.hpp"

namespace qlinear::cli {

namespace {

const char* const kAnchorNames = "bf16, vendor, reference, read";

// Bit width of a scheme's weight codes: the vendor anchor is a GEMM of the same width.
int weight_bits(const Scheme& s) {
  switch (s.family) {
    case Family::kMxfp6: return 6;
    case Family::kMxfp4:
    case Family::kNvfp4: return 4;
    default: return 8;
  }
}

// The bytes of the layer's tensors as stored (codes, scales, bias): what any kernel of it reads at least.
int64_t stored_bytes(const LinearLayer& layer) {
  int64_t bytes = 0;
  for (const auto& [name, t] : layer.params) bytes += t.nbytes();
  return bytes;
}

class ReferenceAnchor final : public BenchAnchor {
 public:
  explicit ReferenceAnchor(std::unique_ptr<LayerRunner> r) : runner_(std::move(r)) {}
  std::string name() const override { return std::string(runner_->kernel().name()); }
  Result<AnchorResult> measure(int64_t m, int) override {
    QL_ASSIGN_OR_RETURN(Measurement ms, runner_->measure(m, 1, false, 11));
    bench::Timing t;
    t.median_ms = ms.median_ms;
    t.min_ms = ms.min_ms;
    t.reps = ms.reps;
    return AnchorResult{name(), "", t};
  }

 private:
  std::unique_ptr<LayerRunner> runner_;
};

class OnednnAnchor final : public BenchAnchor {
 public:
  OnednnAnchor(bool int8, int64_t n, int64_t k) : int8_(int8), n_(n), k_(k) {}
  std::string name() const override { return int8_ ? "onednn_s8s8" : "onednn_bf16"; }
  Result<AnchorResult> measure(int64_t m, int reps) override {
    QL_ASSIGN_OR_RETURN(AnchorTiming a, time_onednn_matmul(int8_, m, n_, k_, reps));
    return AnchorResult{a.name, a.impl, a.timing};
  }

 private:
  bool int8_;
  int64_t n_, k_;
};

class CudaAnchorAdapter final : public BenchAnchor {
 public:
  explicit CudaAnchorAdapter(std::unique_ptr<bench::DeviceTimer> timer) : timer_(std::move(timer)) {}
  // `stored_bytes`: the layer's bytes as stored, which the read anchor reads.
  Status init(const std::string& kind, const Scheme& s, int64_t n, int64_t k, int64_t stored_bytes) {
    QL_ASSIGN_OR_RETURN(anchor_, kind == "read" ? bench::CudaAnchor::create_read_floor(stored_bytes, k, *timer_)
                                                : bench::CudaAnchor::create(kind, s, n, k, *timer_));
    return Status::ok();
  }
  std::string name() const override { return anchor_->name(); }
  Result<AnchorResult> measure(int64_t m, int reps) override {
    QL_ASSIGN_OR_RETURN(bench::Timing t, anchor_->time(m, reps));
    return AnchorResult{anchor_->name(), "", t};
  }

 private:
  std::unique_ptr<bench::DeviceTimer> timer_;
  std::unique_ptr<bench::CudaAnchor> anchor_;
};

}  // namespace

Result<std::vector<std::string>> BenchAnchor::parse_list(const std::string& list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = list.find(',', at);
    const std::string item = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (item != "bf16" && item != "vendor" && item != "reference" && item != "read") {
      return Status::error("--compare " + list + ": '" + item + "' is not an anchor; expected a list of " + kAnchorNames);
    }
    out.push_back(item);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

Result<std::string> BenchAnchor::key_for(const std::string& kind, const Scheme& scheme, const LinearLayer& layer,
                                         const Platform& platform) {
  const int64_t k = layer.config.k;
  if (kind == "reference") return "reference:" + std::string(scheme.name);
  if (kind == "read") {
    if (platform.kind != PlatformKind::kCuda) {
      return Status::error("the read floor is a CUDA anchor (on the CPU, --roofline measures the DRAM read rate "
                           "as the kernels read, and every layer of the shape sets is large enough to stream at it)");
    }
    return "dram_read:" + std::to_string(stored_bytes(layer));
  }
  if (platform.kind == PlatformKind::kCuda) return bench::CudaAnchor::name_for(kind, scheme, k);
  if (!onednn_available()) {
    return Status::error("the CPU anchor '" + kind +
                         "' is oneDNN, and qlinear was built without it (install Debian's libdnnl-dev and reconfigure)");
  }
  if (kind == "vendor" && weight_bits(scheme) != 8) {
    return Status::error("no vendor " + std::to_string(weight_bits(scheme)) + "-bit GEMM on the CPU for " +
                         std::string(scheme.name) + " (oneDNN's quantized matmul is s8 x s8)");
  }
  return std::string(kind == "vendor" ? "onednn_s8s8" : "onednn_bf16");
}

Result<std::unique_ptr<BenchAnchor>> BenchAnchor::create(const std::string& kind, const Scheme& scheme,
                                                         const LinearLayer& layer, const Platform& platform) {
  const int64_t n = layer.config.n, k = layer.config.k;
  if (kind == "reference") {
    SelectOptions select;
    select.force = "reference_" + std::string(family_name(scheme.family));
    // The reference kernels run on the host whatever the benchmark's device.
    QL_ASSIGN_OR_RETURN(auto runner, LayerRunner::create(layer, Tensor(), Platform::host_cpu(), select, 1));
    return std::unique_ptr<BenchAnchor>(std::make_unique<ReferenceAnchor>(std::move(runner)));
  }
  if (platform.kind == PlatformKind::kCuda) {
    QL_ASSIGN_OR_RETURN(auto timer, bench::DeviceTimer::create(platform.cuda ? platform.cuda->index : 0));
    auto a = std::make_unique<CudaAnchorAdapter>(std::move(timer));
    QL_RETURN_IF_ERROR(a->init(kind, scheme, n, k, stored_bytes(layer)));
    return std::unique_ptr<BenchAnchor>(std::move(a));
  }
  QL_RETURN_IF_ERROR(key_for(kind, scheme, layer, platform).status());
  return std::unique_ptr<BenchAnchor>(std::make_unique<OnednnAnchor>(kind == "vendor", n, k));
}

}  // namespace qlinear::cli
