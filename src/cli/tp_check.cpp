// qlinear run CKPT --tp N: every selected layer split across N GPUs (column- or row-parallel by its role),
// run on random activations and checked against the same layer on one GPU.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/tp_check.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/tensor_parallel.hpp"

namespace qlinear::cli {

#if QLINEAR_WITH_CUDA
namespace {

// max |a - b| / max |b|: the error relative to the output's scale.
double rel_diff(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = element_as_double(a, i), y = element_as_double(b, i);
    num = std::isfinite(x) ? std::max(num, std::fabs(x - y)) : HUGE_VAL;
    den = std::max(den, std::fabs(y));
  }
  return den > 0 ? num / den : num;
}

struct OneGpu {
  LinearLayer layer;
  const LinearKernel* kernel = nullptr;
  Tensor bias;
};

Result<OneGpu> one_gpu_layer(const LoadedLayer& l) {
  OneGpu g;
  g.layer = l.layer;
  QL_ASSIGN_OR_RETURN(Platform platform, Platform::cuda_device(0));
  QL_ASSIGN_OR_RETURN(g.kernel, select_kernel(g.layer.config, platform));
  QL_RETURN_IF_ERROR(g.kernel->process_weights_after_loading(g.layer));
  if (l.bias.defined()) {
    QL_ASSIGN_OR_RETURN(g.bias, cuda::to_device(l.bias, 0));
  }
  return g;
}

}  // namespace

int run_tensor_parallel(const TpCheckInput& in) {
  const int w = in.tp;
  const LoadedModel& full = in.model;
  if (!tp::available()) {
    std::fprintf(stderr, "qlinear run --tp %d: %s\n", w, tp::Group::create({0}).message().c_str());
    return 1;
  }
  std::vector<int> devices(static_cast<size_t>(w));
  for (int r = 0; r < w; ++r) devices[static_cast<size_t>(r)] = r;
  auto group = tp::Group::create(devices);
  if (!group) {
    std::fprintf(stderr, "qlinear run --tp %d: %s\n", w, group.message().c_str());
    return 1;
  }
  std::vector<LoadedModel> ranks;
  for (int r = 0; r < w; ++r) {
    LoadOptions o = in.options;
    o.tp_rank = r;
    o.tp_size = w;
    auto m = load_checkpoint(full.path, o);
    if (!m) {
      std::fprintf(stderr, "qlinear run --tp %d: rank %d: %s\n", w, r, m.message().c_str());
      return 1;
    }
    ranks.push_back(std::move(*m));
  }
  if (!in.json) {
    std::printf("%s: %zu quantized layers on %d GPUs (tensor parallel), checked against one GPU\n\n",
                full.path.c_str(), full.layers.size(), w);
    std::printf("%-44s %-20s %-7s %-26s %6s %11s %10s %10s\n", "layer", "scheme", "split", "kernel (rank 0)", "M",
                "vs 1 GPU", "1 GPU ms", "TP ms");
  }
  nlohmann::json records = nlohmann::json::array();
  int failures = 0;
  uint64_t seed = 7;
  std::string row_reduction;  // ParallelLinear::reduction of the row-parallel layers, printed at the end
  for (size_t i = 0; i < full.layers.size(); ++i) {
    const LoadedLayer& l = full.layers[i];
    auto fail = [&](const std::string& why) {
      std::fprintf(stderr, "qlinear run --tp %d: %s: %s\n", w, l.layer.name.c_str(), why.c_str());
      ++failures;
    };
    std::vector<LoadedLayer> slices;
    for (int r = 0; r < w; ++r) {
      const auto& layers = ranks[static_cast<size_t>(r)].layers;
      if (i >= layers.size() || layers[i].layer.name != l.layer.name) {
        fail("rank " + std::to_string(r) + " did not load the same layers");
        break;
      }
      slices.push_back(layers[i]);
    }
    if (static_cast<int>(slices.size()) != w) continue;
    auto one = one_gpu_layer(l);
    if (!one) {
      fail("one GPU: " + one.message());
      continue;
    }
    auto pl = tp::ParallelLinear::create(**group, std::move(slices), in.parallel);
    if (!pl) {
      fail(pl.message());
      continue;
    }
    const bool row = (*pl)->parallelism() == Parallelism::kRow;
    if (row) row_reduction = (*pl)->reduction();
    const int64_t n = l.full_n, k = l.full_k, k_r = k / w;
    for (int64_t m : in.ms) {
      const Tensor x = random_normal(l.layer.config.input_dtype, {m, k}, seed++);
      // One GPU.
      auto x0 = cuda::to_device(x, 0);
      auto y1 = cuda::empty(l.layer.config.out_dtype, {m, n}, 0);
      if (!x0 || !y1) {
        fail(!x0 ? x0.message() : y1.message());
        continue;
      }
      const auto t0 = std::chrono::steady_clock::now();
      Status s = one->kernel->apply(one->layer, Activation::dense(*x0), one->bias.defined() ? &one->bias : nullptr, *y1);
      if (s.is_ok()) s = cuda::synchronize();
      const double one_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!s.is_ok()) {
        fail("one GPU M=" + std::to_string(m) + ": " + s.message());
        continue;
      }
      auto ref = cuda::to_host(*y1);
      // Tensor parallel: the whole input on every rank (column) or each rank's input columns (row).
      std::vector<Tensor> xs(static_cast<size_t>(w)), ys(static_cast<size_t>(w));
      Status prep = Status::ok();
      for (int r = 0; r < w && prep.is_ok(); ++r) {
        Tensor part = x;
        if (row) part = x.narrow(1, r * k_r, k_r).value().contiguous();
        auto xd = cuda::to_device(part, r);
        auto yd = cuda::empty(l.layer.config.out_dtype, {m, n}, r);
        if (!xd || !yd) prep = !xd ? xd.status() : yd.status();
        else {
          xs[static_cast<size_t>(r)] = *xd;
          ys[static_cast<size_t>(r)] = *yd;
        }
      }
      if (!prep.is_ok()) {
        fail(prep.message());
        continue;
      }
      const auto t1 = std::chrono::steady_clock::now();
      s = (*group)->run([&](int r) {
        return (*pl)->forward(r, xs[static_cast<size_t>(r)], ys[static_cast<size_t>(r)]);
      });
      const double tp_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
      if (!s.is_ok()) {
        fail("M=" + std::to_string(m) + ": " + s.message());
        if (s.message().find("aborted") != std::string::npos) break;
        continue;
      }
      double worst = 0;
      for (int r = 0; r < w; ++r) {
        auto got = cuda::to_host(ys[static_cast<size_t>(r)]);
        if (!got || !ref) {
          worst = HUGE_VAL;
          continue;
        }
        worst = std::max(worst, rel_diff(*got, *ref));
      }
      // Column splits compute the same dot products; row splits add W f32 partials: a few output ulps (W
      // more roundings with partials in the output dtype).
      const bool ok = worst <= 1e-2;
      failures += ok ? 0 : 1;
      const std::string kname((*pl)->kernel(0).name());
      if (in.json) {
        records.push_back({{"layer", l.layer.name}, {"scheme", l.scheme->name}, {"split", row ? "row" : "column"},
                           {"kernel_rank0", kname}, {"m", m}, {"n", n}, {"k", k}, {"tp", w},
                           {"rel_diff_one_gpu", worst}, {"one_gpu_ms", one_ms}, {"tp_ms", tp_ms},
                           {"reduction", (*pl)->reduction()}, {"ok", ok}});
      } else {
        std::printf("%-44s %-20.*s %-7s %-26s %6lld %9.2e%s %10.3f %10.3f\n", l.layer.name.c_str(),
                    static_cast<int>(l.scheme->name.size()), l.scheme->name.data(), row ? "row" : "column",
                    kname.c_str(), static_cast<long long>(m), worst, ok ? "  " : " !", one_ms, tp_ms);
      }
    }
  }
  if (in.json) std::printf("%s\n", records.dump(2).c_str());
  if (failures > 0 && !in.json) std::printf("\n%d check(s) failed\n", failures);
  if (!in.json) {
    if (!row_reduction.empty()) std::printf("\n%s\n", row_reduction.c_str());
    std::printf("(times: wall clock of one call each, first call included; `qlinear bench` and the TP benchmark "
                "measure speed)\n");
  }
  return failures == 0 ? 0 : 1;
}

#else

int run_tensor_parallel(const TpCheckInput& in) {
  std::fprintf(stderr, "qlinear run --tp %d: %s\n", in.tp, tp::Group::create({0}).message().c_str());
  return 1;
}

#endif  // QLINEAR_WITH_CUDA

}  // namespace qlinear::cli
