#include "checkpoint/strict_json.hpp"

#include <optional>
#include <unordered_set>

namespace qlinear::detail {

using nlohmann::ordered_json;

namespace {

// Thrown from the parser callback to stop at the first level too deep: the callback cannot fail otherwise,
// and stopping there keeps the partial value small. (nlohmann 3.11 parses and destroys values without
// recursion, so neither the partial value nor unwinding through the parser recurses per level.)
struct TooDeep {};

// One character budget shared by the whole excerpt; recursion depth is bounded by the budget too.
void append_excerpt(const ordered_json& v, size_t limit, std::string& out) {
  if (out.size() > limit) return;
  if (v.is_object() || v.is_array()) {
    const bool object = v.is_object();
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() <= limit; ++it) {
      out += first ? "" : ", ";
      first = false;
      if (object) {
        out += ordered_json(it.key().substr(0, limit)).dump(-1, ' ', false, ordered_json::error_handler_t::replace);
        out += ": ";
      }
      append_excerpt(*it, limit, out);
    }
    out += object ? '}' : ']';
  } else if (v.is_string()) {
    // Only as much of a long string as can be shown; replace invalid UTF-8 rather than throw.
    out += ordered_json(v.get_ref<const std::string&>().substr(0, limit + 1))
               .dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  } else {
    out += v.dump();  // a number, true/false or null: short
  }
}

}  // namespace

Result<ordered_json> parse_json_bounded(std::string_view text, const DuplicateKeyMessage* on_duplicate) {
  // nlohmann's callback parser reports each container's start with its depth, and each key before its
  // value; a stack of the keys seen per open object finds duplicates at any depth. The first duplicate is
  // remembered and reported once parsing ends.
  struct Level {
    bool is_object;
    std::unordered_set<std::string> keys;
    std::string current_key;
  };
  std::vector<Level> levels;
  std::optional<std::string> duplicate;
  auto callback = [&](int depth, ordered_json::parse_event_t event, ordered_json& parsed) {
    using E = ordered_json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        // `depth` counts the containers around this one: the top-level value starts at 0.
        if (depth >= kMaxJsonNesting) throw TooDeep{};
        if (on_duplicate != nullptr) levels.push_back({event == E::object_start, {}, "[]"});
        break;
      case E::object_end:
      case E::array_end:
        if (!levels.empty()) levels.pop_back();
        break;
      case E::key: {
        if (levels.empty() || !levels.back().is_object) break;
        std::string key = parsed.get<std::string>();
        if (!levels.back().keys.insert(key).second && !duplicate) {
          std::vector<std::string> path;
          for (size_t i = 0; i + 1 < levels.size(); ++i) path.push_back(levels[i].current_key);
          duplicate = (*on_duplicate)(path, key);
        }
        levels.back().current_key = std::move(key);
        break;
      }
      case E::value: break;
    }
    return true;
  };
  ordered_json value;
  try {
    value = ordered_json::parse(text.begin(), text.end(), callback);
  } catch (const TooDeep&) {
    return Status::error("invalid JSON: arrays and objects nest deeper than " + std::to_string(kMaxJsonNesting) +
                         " levels (qlinear's limit; real files nest fewer than 10)");
  } catch (const ordered_json::exception& e) {  // parse_error; out_of_range for numbers beyond double (1e400)
    return Status::error(std::string("invalid JSON: ") + e.what());
  }
  if (duplicate) return Status::error(*duplicate);
  return value;
}

std::string json_excerpt(const ordered_json& v, size_t max_chars) {
  std::string out;
  append_excerpt(v, max_chars, out);
  if (out.size() <= max_chars) return out;
  out.resize(max_chars > 3 ? max_chars - 3 : 0);
  // Do not end inside a UTF-8 sequence: drop continuation bytes, then the lead byte they belonged to.
  while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
  if (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0xC0) out.pop_back();
  return out + "...";
}

}  // namespace qlinear::detail
