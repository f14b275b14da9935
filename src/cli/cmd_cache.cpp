// qlinear cache ls|verify|clear DIR: what a processed-weight cache directory holds (weight_cache.hpp),
// whether every entry's checksums still hold, and removing its entries (nothing else in DIR).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "qlinear/weight_cache.hpp"

namespace qlinear::cli {

namespace {

const std::vector<OptionSpec> kSpecs = {
    {"--json", "", "machine-readable output"},
    {"--help", "", "this help"},
};

constexpr const char* kUsage =
    "Usage: qlinear cache ls|verify|clear DIR [--json]\n\n"
    "  ls      list the entries: layer, kernel, scheme, tensor-parallel rank, platform, size\n"
    "  verify  also check every entry's payload and metadata checksums (exit 1 when one is corrupt)\n"
    "  clear   remove every entry (*.qlcache and their temporary files), nothing else\n\n";

nlohmann::json entry_json(const WeightCacheEntryInfo& e) {
  nlohmann::json j = {{"path", e.path}, {"file_bytes", e.file_bytes}, {"payload_bytes", e.payload_bytes},
                      {"key", e.key}, {"ok", e.ok}};
  if (e.verified) j["verified"] = true;
  if (!e.ok) j["problem"] = e.problem;
  return j;
}

std::string field(const WeightCacheEntryInfo& e, const std::string& k) {
  auto it = e.key.find(k);
  return it == e.key.end() ? std::string("?") : it->second;
}

}  // namespace

int cmd_cache(int argc, char** argv) {
  auto args = Args::parse(argc, argv, 2, kSpecs, 2);
  if (!args) {
    std::fprintf(stderr, "qlinear cache: %s\n", args.message().c_str());
    return 2;
  }
  if (args->flag("--help")) {
    std::printf("%s%s", kUsage, options_help(kSpecs).c_str());
    return 0;
  }
  const auto& pos = args->positional();
  if (pos.size() != 2) {
    std::fprintf(stderr, "qlinear cache: expected an action (ls, verify or clear) and DIR, got %zu argument(s)\n",
                 pos.size());
    return 2;
  }
  const std::string& action = pos[0];
  const std::string& dir = pos[1];
  const bool json = args->flag("--json");
  if (action == "clear") {
    auto removed = clear_weight_cache(dir);
    if (!removed) {
      std::fprintf(stderr, "qlinear cache clear: %s\n", removed.message().c_str());
      return 1;
    }
    if (json) {
      std::printf("%s\n", nlohmann::json({{"dir", dir}, {"removed", *removed}}).dump(2).c_str());
    } else {
      std::printf("removed %d file(s) from %s\n", *removed, dir.c_str());
    }
    return 0;
  }
  if (action != "ls" && action != "verify") {
    std::fprintf(stderr, "qlinear cache: unknown action '%s' (expected ls, verify or clear)\n", action.c_str());
    return 2;
  }
  const bool verify = action == "verify";
  auto entries = list_weight_cache(dir, verify);
  if (!entries) {
    std::fprintf(stderr, "qlinear cache %s: %s\n", action.c_str(), entries.message().c_str());
    return 1;
  }
  int bad = 0;
  for (const WeightCacheEntryInfo& e : *entries) bad += e.ok ? 0 : 1;
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (const WeightCacheEntryInfo& e : *entries) j.push_back(entry_json(e));
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s: %zu entr%s\n", dir.c_str(), entries->size(), entries->size() == 1 ? "y" : "ies");
    if (!entries->empty()) {
      std::printf("%-44s %-28s %-20s %-6s %10s  %s\n", "layer", "kernel", "scheme", "tp", "MiB", verify ? "status" : "");
    }
    for (const WeightCacheEntryInfo& e : *entries) {
      const std::string tp = field(e, "tp_rank") + "/" + field(e, "tp_size");
      std::printf("%-44s %-28s %-20s %-6s %10.2f  %s\n", field(e, "layer").c_str(), field(e, "kernel").c_str(),
                  field(e, "scheme").c_str(), tp.c_str(), static_cast<double>(e.file_bytes) / (1 << 20),
                  e.ok ? (verify ? "ok" : "") : ("BAD: " + e.problem + " (" + e.path + ")").c_str());
    }
    if (verify) std::printf("%d of %zu entries corrupt\n", bad, entries->size());
  }
  return bad == 0 ? 0 : 1;
}

}  // namespace qlinear::cli
