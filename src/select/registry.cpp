#include "qlinear/registry.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "qlinear/log.hpp"
#include "select/priority_lists.hpp"

namespace qlinear {

std::span<const LinearKernel* const> all_kernels() {
  static const std::vector<const LinearKernel*> all = [] {
    std::vector<const LinearKernel*> v;
    for (auto list : {detail::x86_cpu_priority(), detail::cuda_priority()}) {
      for (const LinearKernel* k : list) {
        if (std::find(v.begin(), v.end(), k) == v.end()) v.push_back(k);
      }
    }
    return v;
  }();
  return all;
}

const LinearKernel* find_kernel(std::string_view name) {
  for (const LinearKernel* k : all_kernels()) {
    if (k->name() == name) return k;
  }
  return nullptr;
}

std::span<const LinearKernel* const> priority_list(const Platform& platform) {
  return platform.kind == PlatformKind::kCuda ? detail::cuda_priority() : detail::x86_cpu_priority();
}

Result<std::vector<std::string>> parse_kernel_list(std::string_view text, std::string_view source) {
  std::vector<std::string> names;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string item(text.substr(pos, end - pos));
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) {
      if (find_kernel(item) == nullptr) {
        std::string known;
        for (const LinearKernel* k : all_kernels()) known += (known.empty() ? "" : ", ") + std::string(k->name());
        return Status::error(std::string(source) + ": unknown kernel '" + item + "'; known kernels: " + known);
      }
      names.push_back(item);
    }
    pos = end + 1;
  }
  return names;
}

namespace {

struct Overrides {
  std::vector<std::string> disabled;
  std::string force;
  std::string error;  // a bad environment variable makes selection fail with this message
};

Overrides read_overrides(const SelectOptions& options, std::span<const LinearKernel* const> list) {
  Overrides o;
  o.disabled = options.disabled;
  o.force = options.force;
  if (options.read_environment) {
    if (const char* env = std::getenv("QLINEAR_DISABLED_KERNELS")) {
      auto parsed = parse_kernel_list(env, "QLINEAR_DISABLED_KERNELS");
      if (!parsed) {
        o.error = parsed.message();
      } else {
        o.disabled.insert(o.disabled.end(), parsed->begin(), parsed->end());
      }
    }
    if (const char* env = std::getenv("QLINEAR_FORCE_KERNEL"); o.force.empty() && env != nullptr) o.force = env;
  }
  // A forced kernel that does not exist is a typo, not a reason to fall back silently.
  const bool known = o.force.empty() || find_kernel(o.force) != nullptr ||
                     std::any_of(list.begin(), list.end(), [&](const LinearKernel* k) { return k->name() == o.force; });
  if (!known && o.error.empty()) {
    auto parsed = parse_kernel_list(o.force, "forced kernel (QLINEAR_FORCE_KERNEL)");
    o.error = parsed.message();
  }
  return o;
}

Verdict judge(const LinearKernel& k, const LinearConfig& config, const Platform& platform, const Overrides& o) {
  if (std::find(o.disabled.begin(), o.disabled.end(), k.name()) != o.disabled.end()) {
    return Verdict::no("disabled by QLINEAR_DISABLED_KERNELS / SelectOptions::disabled");
  }
  if (!o.force.empty() && o.force != k.name()) return Verdict::no("not the forced kernel " + o.force);
  if (Verdict v = k.is_supported(platform); !v) return Verdict::no("not supported here: " + v.reason);
  if (Verdict v = k.can_implement(config); !v) return Verdict::no("cannot implement: " + v.reason);
  return Verdict::yes();
}

}  // namespace

Selection explain_selection(const LinearConfig& config, const Platform& platform, const SelectOptions& options) {
  return explain_selection_in(priority_list(platform), config, platform, options);
}

Selection explain_selection_in(std::span<const LinearKernel* const> list, const LinearConfig& config,
                               const Platform& platform, const SelectOptions& options) {
  Selection sel;
  const Overrides o = read_overrides(options, list);
  sel.forced = o.force;
  const Verdict config_ok = check_config(config);
  for (const LinearKernel* k : list) {
    if (k->family() != config.family) continue;
    CandidateVerdict cv;
    cv.kernel = k;
    Verdict v = !o.error.empty() ? Verdict::no(o.error)
                : !config_ok     ? Verdict::no("invalid config: " + config_ok.reason)
                                 : judge(*k, config, platform, o);
    if (v && sel.kernel == nullptr) {
      cv.chosen = true;
      cv.routes = k->m_routes(config);
      // Itself for every M with nothing to say: no route lines.
      if (cv.routes.size() == 1 && cv.routes[0].kernel == k->name() && cv.routes[0].why.empty()) cv.routes.clear();
      sel.kernel = k;
    } else if (v) {
      cv.reason = "lower priority than " + std::string(sel.kernel->name());
    } else {
      cv.reason = v.reason;
    }
    sel.candidates.push_back(std::move(cv));
  }
  return sel;
}

std::string Selection::explain() const {
  size_t width = 0;
  for (const CandidateVerdict& c : candidates) width = std::max(width, c.kernel->name().size());
  std::ostringstream s;
  for (const CandidateVerdict& c : candidates) {
    std::string n(c.kernel->name());
    n.resize(width, ' ');
    s << "  " << n << "  " << (c.chosen ? "selected" : "no: " + c.reason) << "\n";
    for (const MRoute& r : c.routes) {
      s << "  " << std::string(width, ' ') << "    " << r.range() << ": " << r.kernel
        << (r.why.empty() ? std::string() : " (" + r.why + ")") << "\n";
    }
  }
  return s.str();
}

Result<const LinearKernel*> select_kernel(const LinearConfig& config, const Platform& platform,
                                          const SelectOptions& options) {
  return select_kernel_in(priority_list(platform), config, platform, options);
}

Result<const LinearKernel*> select_kernel_in(std::span<const LinearKernel* const> list, const LinearConfig& config,
                                             const Platform& platform, const SelectOptions& options) {
  const Selection sel = explain_selection_in(list, config, platform, options);
  const bool log = log_enabled("dispatch");
  if (sel.kernel != nullptr) {
    if (log) {
      log_line("dispatch", config.to_string() + " on " + platform.describe() + " -> " +
                               std::string(sel.kernel->name()) + "\n" + sel.explain());
    }
    return sel.kernel;
  }
  std::string msg = "no kernel can implement " + config.to_string() + " on " + platform.describe();
  if (!sel.forced.empty()) msg += " (forced kernel: " + sel.forced + ")";
  msg += ". Candidates:\n" + (sel.candidates.empty() ? std::string("  (none registered for this family)\n")
                                                     : sel.explain());
  if (log) log_line("dispatch", msg);
  return Status::error(msg);
}

}  // namespace qlinear
