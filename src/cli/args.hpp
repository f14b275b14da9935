#pragma once
// A small, strict option parser for the qlinear subcommands: every option is declared with its help; an
// unknown option, a missing value or a malformed number is an error that names the flag and what was
// expected.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "qlinear/status.hpp"

namespace qlinear::cli {

// Upper bounds of the size options. --m, --n and --k stay at or below 2^20: far above real layers (the
// widest LLM projections and vocabularies are below 2^18), and small enough that M*N*K, and so the
// 2*M*N*K flops of a run, fits int64 with room to spare; what is too big for memory fails as
// "out of memory", never as an overflowed size.
inline constexpr int64_t kMaxDimension = int64_t{1} << 20;
inline constexpr int64_t kMaxReps = 100'000;
inline constexpr int64_t kMaxTensorParallel = 4096;  // --tp-size (and so --tp-rank)

struct OptionSpec {
  std::string name;   // "--m"
  std::string value;  // "LIST" (empty for a boolean flag)
  std::string help;
};

class Args {
 public:
  // Parses argv[first..argc) against `specs`; positional arguments are collected in order.
  static Result<Args> parse(int argc, char** argv, int first, const std::vector<OptionSpec>& specs,
                            int max_positional);

  bool flag(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> get(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& fallback) const;
  // An integer in [min_value, max_value]; a value outside is an error naming the flag and the range.
  Result<int64_t> get_int(const std::string& name, int64_t fallback, int64_t min_value, int64_t max_value) const;
  Result<std::vector<int64_t>> get_int_list(const std::string& name, const std::vector<int64_t>& fallback,
                                            int64_t min_value, int64_t max_value) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

// "Options:\n  --m LIST   token counts ...\n"
std::string options_help(const std::vector<OptionSpec>& specs);

}  // namespace qlinear::cli
