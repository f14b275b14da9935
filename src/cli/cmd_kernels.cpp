// qlinear kernels: every registered kernel and whether it runs here; schemes; why a layer gets its kernel.
#include <cstdio>
#include <optional>
#include <nlohmann/json.hpp>

#include "backends/cuda/tuning/cublaslt_table.hpp"
#include "backends/cuda/tuning/mma_decode_table.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/platform_option.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear::cli {

namespace {

const std::vector<OptionSpec> kSpecs = {
    {"--explain", "", "explain the selection for one layer (with --scheme, --n, --k) and the chosen kernel's routes by M"},
    {"--scheme", "S", "scheme of the layer to explain (see --list-schemes)"},
    {"--n", "N", "output features (default 4096)"},
    {"--k", "K", "input features (default 4096)"},
    {"--out", "DTYPE", "output dtype: bf16 (default), f16, f32"},
    {"--platform", "P", "cpu (default), cuda, cuda:N, sm80, sm90, avx512, avx2, scalar"},
    {"--list-schemes", "", "list the schemes"},
    {"--json", "", "machine-readable output"},
    {"--help", "", "this help"},
};

// The cuBLASLt GEMM kind of a scheme's CUDA cuBLASLt route (route_cublaslt_fp8.cpp, route_int8.cpp), if any.
std::optional<cuda::LtKind> cublaslt_kind(const Scheme& s) {
  switch (s.family) {
    case Family::kFp8ScaledMM:
      return s.weight_key.scale.group.is_per_tensor() && s.activation_key &&
                     s.activation_key->scale.group.is_per_tensor()
                 ? cuda::LtKind::kFp8Tensor
                 : cuda::LtKind::kFp8Rowwise;
    case Family::kFp8BlockScaled: return cuda::LtKind::kFp8Block;
    case Family::kInt8ScaledMM: return cuda::LtKind::kInt8;
    default: return std::nullopt;
  }
}

// The tuned cuBLASLt algorithm per M bucket for this layer's GEMM (the table `qlinear tune` writes).
nlohmann::json tuned_cublaslt(const Scheme& s, int64_t n, int64_t k) {
  nlohmann::json out = nlohmann::json::array();
  const auto kind = cublaslt_kind(s);
  if (!kind) return out;
  const int64_t k_gemm = (k + 31) / 32 * 32;  // the routes run K padded to 32 (layer_state.cpp)
  int64_t m_min = 1;
  std::string device;
  for (const cuda::LtTunedEntry* e : cuda::lt_tuned_entries(*kind, n, k_gemm)) {
    if (device != e->device) m_min = 1;
    device = e->device;
    out.push_back({{"device", e->device},
                   {"kind", cuda::lt_kind_name(e->kind)},
                   {"m_min", m_min},
                   {"m_max", e->m_max},
                   {"config", e->config.algo_id < 0 ? std::string("cuBLASLt's heuristic choice (no candidate >= 5% faster)")
                                                    : cuda::describe(e->config)}});
    m_min = e->m_max + 1;
  }
  return out;
}

// The weight code of a scheme's tensor-core decode kernel (mma_decode_kernels.hpp), if its family has one.
std::optional<cuda::MmaCode> mma_decode_code(const Scheme& s) {
  switch (s.family) {
    case Family::kFp8WeightOnly:
    case Family::kMxfp8: return cuda::MmaCode::kE4M3;
    case Family::kMxfp6:
      return s.weight_key.dtype == DType::kF6E3M2 ? cuda::MmaCode::kE3M2 : cuda::MmaCode::kE2M3;
    case Family::kMxfp4:
    case Family::kNvfp4: return cuda::MmaCode::kE2M1;
    default: return std::nullopt;
  }
}

// The tuned decode routes per M bucket for this layer (the table `qlinear tune --decode` writes).
nlohmann::json tuned_mma_decode(const Scheme& s, int64_t n, int64_t k) {
  nlohmann::json out = nlohmann::json::array();
  const auto code = mma_decode_code(s);
  if (!code) return out;
  int64_t m_min = 17;  // the table's routes start above M = 16
  std::string device;
  for (const cuda::MmaDecodeTunedEntry* e : cuda::mma_decode_tuned_entries(*code, n, k)) {
    if (device != e->device) m_min = 17;
    device = e->device;
    out.push_back({{"device", e->device},
                   {"code", cuda::mma_code_name(e->code)},
                   {"m_min", m_min},
                   {"m_max", e->m_max},
                   {"route", cuda::describe(*e)}});
    m_min = e->m_max + 1;
  }
  return out;
}

int list_schemes(bool json) {
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Scheme& s : all_schemes()) {
      out.push_back({{"scheme", s.name},
                     {"family", family_name(s.family)},
                     {"weight_key", key_name(s.weight_key)},
                     {"activation_key", s.activation_key ? key_name(*s.activation_key) : "none"},
                     {"description", s.description}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%-22s %-17s %s\n", "scheme", "family", "description");
  for (const Scheme& s : all_schemes()) {
    std::printf("%-22.*s %-17.*s %.*s\n", static_cast<int>(s.name.size()), s.name.data(),
                static_cast<int>(family_name(s.family).size()), family_name(s.family).data(),
                static_cast<int>(s.description.size()), s.description.data());
  }
  return 0;
}

int list_kernels(const Platform& platform, bool json) {
  nlohmann::json out = nlohmann::json::array();
  if (!json) std::printf("Kernels for %s, in priority order:\n", platform.describe().c_str());
  for (const LinearKernel* k : priority_list(platform)) {
    const Verdict v = k->is_supported(platform);
    if (json) {
      out.push_back({{"kernel", k->name()},
                     {"family", family_name(k->family())},
                     {"supported", v.ok},
                     {"reason", v.reason},
                     {"summary", k->summary()}});
    } else {
      std::printf("  %-32.*s %-17.*s %s\n", static_cast<int>(k->name().size()), k->name().data(),
                  static_cast<int>(family_name(k->family()).size()), family_name(k->family()).data(),
                  v.ok ? "supported" : ("not supported: " + v.reason).c_str());
    }
  }
  if (json) std::printf("%s\n", nlohmann::json({{"platform", platform.describe()}, {"kernels", out}}).dump(2).c_str());
  return 0;
}

}  // namespace

int cmd_kernels(int argc, char** argv) {
  auto args = Args::parse(argc, argv, 2, kSpecs, 0);
  if (!args) {
    std::fprintf(stderr, "qlinear kernels: %s\n", args.message().c_str());
    return 2;
  }
  if (args->flag("--help")) {
    std::printf("Usage: qlinear kernels [--explain --scheme S --n N --k K] [--list-schemes] [--json]\n\n%s",
                options_help(kSpecs).c_str());
    return 0;
  }
  const bool json = args->flag("--json");
  if (args->flag("--list-schemes")) return list_schemes(json);
  auto platform = parse_platform(args->get_or("--platform", "cpu"));
  if (!platform) {
    std::fprintf(stderr, "qlinear kernels: %s\n", platform.message().c_str());
    return 2;
  }
  if (!args->flag("--explain")) {
    if (args->get("--scheme")) {
      std::fprintf(stderr, "qlinear kernels: --scheme needs --explain\n");
      return 2;
    }
    return list_kernels(*platform, json);
  }
  const auto scheme_name = args->get("--scheme");
  if (!scheme_name) {
    std::fprintf(stderr, "qlinear kernels --explain: --scheme is required (one of: %s)\n", scheme_names().c_str());
    return 2;
  }
  const Scheme* scheme = find_scheme(*scheme_name);
  if (scheme == nullptr) {
    std::fprintf(stderr, "qlinear kernels: unknown scheme '%s' for --scheme; schemes: %s\n", scheme_name->c_str(),
                 scheme_names().c_str());
    return 2;
  }
  auto n = args->get_int("--n", 4096, 1, kMaxDimension);
  auto k = args->get_int("--k", 4096, 1, kMaxDimension);
  auto out = dtype_from_name(args->get_or("--out", "bf16"));
  if (!n || !k) {
    std::fprintf(stderr, "qlinear kernels: %s\n", (!n ? n.message() : k.message()).c_str());
    return 2;
  }
  if (!out || !(*out == DType::kBF16 || *out == DType::kF16 || *out == DType::kF32)) {
    std::fprintf(stderr, "qlinear kernels: --out must be bf16, f16 or f32\n");
    return 2;
  }
  const LinearConfig config = make_config(*scheme, *n, *k, DType::kBF16, *out);
  const Selection sel = explain_selection(config, *platform);
  if (json) {
    nlohmann::json cands = nlohmann::json::array();
    for (const CandidateVerdict& c : sel.candidates) {
      nlohmann::json entry = {{"kernel", c.kernel->name()}, {"selected", c.chosen}, {"reason", c.reason}};
      if (!c.routes.empty()) {
        nlohmann::json routes = nlohmann::json::array();
        for (const MRoute& r : c.routes) {
          routes.push_back({{"m_min", r.m_min},
                            {"m_max", r.m_max == MRoute::kNoLimit ? nlohmann::json(nullptr) : nlohmann::json(r.m_max)},
                            {"kernel", r.kernel},
                            {"why", r.why}});
        }
        entry["routes"] = std::move(routes);
      }
      cands.push_back(std::move(entry));
    }
    nlohmann::json doc = {{"scheme", scheme->name},
                          {"config", config.to_string()},
                          {"platform", platform->describe()},
                          {"selected", sel.kernel ? nlohmann::json(sel.kernel->name()) : nlohmann::json(nullptr)},
                          {"summary", sel.kernel ? nlohmann::json(sel.kernel->summary()) : nlohmann::json(nullptr)},
                          {"candidates", cands},
                          {"cublaslt_tuned", tuned_cublaslt(*scheme, *n, *k)},
                          {"mma_decode_tuned", tuned_mma_decode(*scheme, *n, *k)}};
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("%s on %s\n%s", config.to_string().c_str(), platform->describe().c_str(), sel.explain().c_str());
    if (sel.kernel == nullptr) std::printf("no kernel can implement this layer here\n");
    // The summary says what runs for which M where a kernel hands small M to another code path (AMX).
    if (sel.kernel != nullptr) {
      std::printf("%s: %s\n", std::string(sel.kernel->name()).c_str(), std::string(sel.kernel->summary()).c_str());
    }
    if (const auto kind = cublaslt_kind(*scheme)) {
      const nlohmann::json tuned = tuned_cublaslt(*scheme, *n, *k);
      std::printf("cuBLASLt %s GEMM, N=%lld K=%lld: ", std::string(cuda::lt_kind_name(*kind)).c_str(),
                  static_cast<long long>(*n), static_cast<long long>(*k));
      if (tuned.empty()) {
        std::printf("no tuned entry (cuBLASLt's heuristic choice; `qlinear tune` measures the candidates)\n");
      } else {
        std::printf("tuned algorithm by M (above the last bucket: its algorithm)\n");
        for (const auto& e : tuned) {
          std::printf("  %s  M %lld..%lld: %s\n", e["device"].get<std::string>().c_str(), e["m_min"].get<long long>(),
                      e["m_max"].get<long long>(), e["config"].get<std::string>().c_str());
        }
      }
    }
    if (const auto code = mma_decode_code(*scheme)) {
      const nlohmann::json tuned = tuned_mma_decode(*scheme, *n, *k);
      std::printf("tensor-core decode GEMM, %s N=%lld K=%lld: ", std::string(cuda::mma_code_name(*code)).c_str(),
                  static_cast<long long>(*n), static_cast<long long>(*k));
      if (tuned.empty()) {
        std::printf("no tuned entry (the built-in rules; `qlinear tune --decode` measures the candidates)\n");
      } else {
        std::printf("tuned routes by M (elsewhere the built-in rules)\n");
        for (const auto& e : tuned) {
          std::printf("  %s  M %lld..%lld: %s\n", e["device"].get<std::string>().c_str(), e["m_min"].get<long long>(),
                      e["m_max"].get<long long>(), e["route"].get<std::string>().c_str());
        }
      }
    }
  }
  return sel.kernel ? 0 : 1;
}

}  // namespace qlinear::cli
