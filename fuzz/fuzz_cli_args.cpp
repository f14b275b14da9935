// libFuzzer target: the qlinear command's option parsing (src/cli/args.cpp) and the value parsers the
// commands apply to what it returns (integers, integer lists, --platform, --out, --scheme), with the option
// specs every `qlinear <command>` declares (extracted from src/cli/cmd_*.cpp by fuzz/CMakeLists.txt).
//
// Input: an argv, one argument per line: "run\n/ckpt\n--m\n1,16\n--tp-rank=3". The first line picks the
// command's specs (an unknown command takes one by its first byte). Contract checked: nothing throws, and
// every error names the flag or argument it is about.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cli/args.hpp"
#include "cli/platform_option.hpp"
#include "qlinear/formats.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear::cli {
#include "cli_specs.inc"
}  // namespace qlinear::cli

namespace {

using qlinear::cli::Args;
using qlinear::cli::OptionSpec;

[[noreturn]] void broken_promise(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_cli_args: broken promise: %s: %s\n", what, detail.c_str());
  std::abort();
}

void expect_named(const qlinear::Status& s, const std::string& name, const char* what) {
  if (!s.is_ok() && s.message().find(name) == std::string::npos) broken_promise(what, s.message());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> words = {"qlinear"};
  std::string word;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      words.push_back(word);
      word.clear();
    } else {
      word += static_cast<char>(data[i]);
    }
  }
  words.push_back(word);
  for (std::string& w : words) w = std::string(w.c_str());  // an argv string ends at its first NUL
  if (words.size() > 64) return 0;  // argv length is not what this target is about
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const int argc = static_cast<int>(words.size());

  const auto& table = qlinear::cli::kCommandSpecs;
  const std::vector<OptionSpec>* specs = nullptr;
  for (const auto& [name, s] : table) {
    if (words[1] == name) specs = s;
  }
  if (specs == nullptr) specs = table[words[1].empty() ? 0 : static_cast<uint8_t>(words[1][0]) % table.size()].second;
  const int max_positional = words[1] == "quantize" ? 2 : 1;

  try {
    auto args = Args::parse(argc, argv.data(), 2, *specs, max_positional);
    if (!args) {
      // "unknown option --x", "option --m needs a value", "unexpected argument 'y'": the word is in the message.
      bool named = false;
      for (int i = 2; i < argc && !named; ++i) {
        const std::string& w = words[i];
        const std::string flag = w.substr(0, w.find('='));  // "--x=1" is reported as --x
        named = args.message().find("'" + w + "'") != std::string::npos ||
                (flag.size() >= 2 && args.message().find(flag) != std::string::npos);
      }
      if (!named) broken_promise("a parse error that names no argument", args.message());
      return 0;
    }
    (void)qlinear::cli::options_help(*specs);
    if (static_cast<int>(args->positional().size()) > max_positional) broken_promise("too many positionals", "");
    for (const OptionSpec& s : *specs) {
      const auto value = args->get(s.name);
      if (s.value.empty()) {
        if (value && !args->flag(s.name)) broken_promise("flag() disagrees with get()", s.name);
        continue;
      }
      if (!value) continue;
      using qlinear::cli::kMaxDimension;
      expect_named(args->get_int(s.name, 0, 0, INT64_MAX).status(), s.name, "get_int error without the flag");
      auto one = args->get_int(s.name, 1, 1, kMaxDimension);
      expect_named(one.status(), s.name, "get_int error without the flag");
      if (one && (*one < 1 || *one > kMaxDimension)) broken_promise("get_int returned a value out of range", s.name);
      auto list = args->get_int_list(s.name, {1}, 1, kMaxDimension);
      expect_named(list.status(), s.name, "get_int_list error without the flag");
      if (list) {
        for (int64_t x : *list) {
          if (x < 1 || x > kMaxDimension) broken_promise("get_int_list returned a value out of range", s.name);
        }
      }
      if (s.name == "--platform" || s.name == "--backend") {
        // No exception may escape (R2 was std::stoi's out_of_range for "cuda:99999999999").
        const qlinear::Result<qlinear::Platform> p = qlinear::cli::parse_platform(*value);
        // "cuda" and "cuda:N" ask for a real device: its absence is reported by Platform::cuda_device.
        if (*value != "cuda" && value->rfind("cuda:", 0) != 0) {
          expect_named(p.status(), "--platform", "parse_platform error without the flag");
        }
      }
      if (s.name == "--out") (void)qlinear::dtype_from_name(*value);
      if (s.name == "--scheme") (void)qlinear::find_scheme(*value);
    }
  } catch (const std::exception& e) {
    // The CLI's main() would turn this into "internal error" and exit 1; the parsers promise error values.
    broken_promise("exception", e.what());
  }
  return 0;
}
