#include "cli/args.hpp"

#include <charconv>

namespace qlinear::cli {

Result<Args> Args::parse(int argc, char** argv, int first, const std::vector<OptionSpec>& specs,
                         int max_positional) {
  Args args;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() > 2 && a.rfind("--", 0) == 0) {
      std::string value;
      const size_t eq = a.find('=');
      const bool inline_value = eq != std::string::npos;
      if (inline_value) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
      }
      const OptionSpec* spec = nullptr;
      for (const OptionSpec& s : specs) {
        if (s.name == a) spec = &s;
      }
      if (spec == nullptr) {
        std::string known;
        for (const OptionSpec& s : specs) known += (known.empty() ? "" : ", ") + s.name;
        return Status::error("unknown option " + a + " (options here: " + known + ")");
      }
      if (spec->value.empty()) {
        if (inline_value) return Status::error("option " + a + " takes no value");
        args.values_[a] = "1";
        continue;
      }
      if (!inline_value) {
        if (i + 1 >= argc) return Status::error("option " + a + " needs a value: " + a + " " + spec->value);
        value = argv[++i];
      }
      args.values_[a] = value;
      continue;
    }
    if (static_cast<int>(args.positional_.size()) >= max_positional) {
      return Status::error("unexpected argument '" + a + "'");
    }
    args.positional_.push_back(a);
  }
  return args;
}

std::optional<std::string> Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::get_or(const std::string& name, const std::string& fallback) const {
  return get(name).value_or(fallback);
}

namespace {
Result<int64_t> parse_int(const std::string& flag, const std::string& text, int64_t min_value, int64_t max_value) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || text.empty()) {
    return Status::error("option " + flag + ": '" + text + "' is not an integer");
  }
  const std::string range = " (allowed: " + std::to_string(min_value) + " to " + std::to_string(max_value) + ")";
  if (v < min_value) {
    return Status::error("option " + flag + ": " + text + " is below the minimum " + std::to_string(min_value) + range);
  }
  if (v > max_value) {
    return Status::error("option " + flag + ": " + text + " is above the maximum " + std::to_string(max_value) + range);
  }
  return v;
}
}  // namespace

Result<int64_t> Args::get_int(const std::string& name, int64_t fallback, int64_t min_value,
                               int64_t max_value) const {
  auto v = get(name);
  if (!v) return fallback;
  return parse_int(name, *v, min_value, max_value);
}

Result<std::vector<int64_t>> Args::get_int_list(const std::string& name, const std::vector<int64_t>& fallback,
                                                int64_t min_value, int64_t max_value) const {
  auto v = get(name);
  if (!v) return fallback;
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= v->size()) {
    size_t end = v->find(',', pos);
    if (end == std::string::npos) end = v->size();
    QL_ASSIGN_OR_RETURN(int64_t x, parse_int(name, v->substr(pos, end - pos), min_value, max_value));
    out.push_back(x);
    pos = end + 1;
  }
  return out;
}

std::string options_help(const std::vector<OptionSpec>& specs) {
  size_t width = 0;
  for (const OptionSpec& s : specs) width = std::max(width, s.name.size() + 1 + s.value.size());
  std::string out = "Options:\n";
  for (const OptionSpec& s : specs) {
    std::string head = s.name + (s.value.empty() ? "" : " " + s.value);
    head.resize(width, ' ');
    out += "  " + head + "  " + s.help + "\n";
  }
  return out;
}

}  // namespace qlinear::cli
