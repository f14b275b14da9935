#include "cli/bench_record.hpp"

namespace qlinear::cli {

double BenchRow::ratio(const std::string& kind) const {
  auto it = compare.find(kind);
  if (it == compare.end() || it->second.median_ms <= 0 || ours.median_ms <= 0) return -1;
  return it->second.median_ms / ours.median_ms;
}

nlohmann::json BenchRun::to_json() const {
  using nlohmann::json;
  json machine_json = json::object();
  for (const auto& [key, value] : machine) machine_json[key] = value;
  json rows_json = json::array();
  for (const BenchRow& r : rows) {
    json j = {{"scheme", r.scheme},
              {"family", r.family},
              {"kernel", r.kernel},
              {"shape", r.shape},
              {"m", r.ours.m},
              {"n", r.n},
              {"k", r.k},
              {"median_ms", r.ours.median_ms},
              {"min_ms", r.ours.min_ms},
              {"reps", r.ours.reps},
              {"tflops", r.ours.tflops},
              {"weight_gbps", r.ours.weight_gbps},
              {"ops_per_byte", r.ops_per_byte}};
    if (r.ours.host_us >= 0) j["host_us"] = r.ours.host_us;
    if (!r.ours.note.empty()) j["note"] = r.ours.note;
    if (r.roofline_fraction >= 0) j["roofline_fraction"] = r.roofline_fraction;
    if (r.ours.rel_err >= 0) j["rel_err_reference"] = r.ours.rel_err;
    if (!r.compare.empty()) {
      json c = json::object();
      for (const auto& [kind, a] : r.compare) {
        json aj = {{"name", a.name}};
        if (a.error.empty()) {
          aj["median_ms"] = a.median_ms;
          aj["min_ms"] = a.min_ms;
          aj["ratio"] = r.ratio(kind);
          if (!a.impl.empty()) aj["impl"] = a.impl;
          if (!a.note.empty()) aj["note"] = a.note;
        } else {
          aj["error"] = a.error;
        }
        c[kind] = aj;
      }
      j["compare"] = c;
    }
    rows_json.push_back(j);
  }
  json out = {{"machine", machine_json}, {"command", command}, {"backend", backend}, {"schemes", schemes},
              {"anchors", anchors},      {"load", load},       {"rows", rows_json}};
  out["roofline"] = have_roofline ? roofline.to_json() : json(nullptr);
  if (!interrupted.empty()) out["interrupted"] = interrupted;
  json skipped_json = json::array();
  for (const SkippedRow& s : skipped) {
    skipped_json.push_back({{"scheme", s.scheme}, {"shape", s.shape}, {"m", s.m}, {"reason", s.reason}});
  }
  out["skipped"] = skipped_json;
  return out;
}

}  // namespace qlinear::cli
