// Name patterns ("re:" entries of configs, --layers, quantize --ignore) are matched by RE2 in linear time:
// patterns that make a backtracking matcher take exponential time finish in milliseconds against long names,
// each under a watchdog that ends the test program if it does not; constructs that need backtracking are
// refused naming the construct; the anchoring is vLLM's (re.match for "re:" entries).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "qlinear/name_pattern.hpp"
#include "qlinear/quant_config.hpp"

namespace qlinear {
namespace {

// Ends the process (exit status 3, with a message) unless destroyed within `seconds`: a hang must fail the
// test run, not stall it until ctest's own timeout.
class Watchdog {
 public:
  Watchdog(const std::string& what, int seconds) : what_(what) {
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) {
        std::fprintf(stderr, "watchdog: %s did not finish within %d s\n", what_.c_str(), seconds);
        std::fflush(stderr);
        std::_Exit(3);
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

NamePattern compiled(const std::string& p, NamePattern::Anchor a = NamePattern::Anchor::kStart) {
  auto r = NamePattern::compile(p, a);
  EXPECT_TRUE(r) << p << ": " << r.message();
  return r ? std::move(*r) : NamePattern{};
}

TEST(NamePattern, ExponentialBacktrackingPatternsRunInLinearTime) {
  const std::string name(10000, 'a');
  for (const char* p : {"(a|a)*c", "(a*)*b", "(.*.*)*x", "(a+)+b", "(a|aa)*c", "(?:a?){30}a{30}c"}) {
    Watchdog dog(std::string("matching \"") + p + "\" against 10,000 letters a", 5);
    const auto start = std::chrono::steady_clock::now();
    for (auto anchor : {NamePattern::Anchor::kStart, NamePattern::Anchor::kSearch}) {
      EXPECT_FALSE(compiled(p, anchor).matches(name)) << p;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(s, 2.0) << p;  // well under a millisecond per pattern in a Release build
  }
}

TEST(NamePattern, DotStarAgainstAFourMegabyteName) {
  const std::string name(4 << 20, 'x');
  Watchdog dog("matching \"re:.*\" against a 4 MB name", 10);
  EXPECT_TRUE(compiled(".*").matches(name));
  EXPECT_TRUE(compiled(".*x$").matches(name));
  EXPECT_FALSE(compiled(".*y").matches(name));
  EXPECT_FALSE(compiled("(x|x)*y", NamePattern::Anchor::kSearch).matches(name));
}

TEST(NamePattern, ConfigEntriesAreMatchedAtTheStartAsReMatch) {
  const NamePattern p = compiled(".*mlp\\.gate_proj");
  EXPECT_TRUE(p.matches("model.layers.0.mlp.gate_proj"));
  EXPECT_TRUE(p.matches("model.layers.0.mlp.gate_proj_extra"));  // re.match: may end anywhere
  const NamePattern layers = compiled("layers\\.0");
  EXPECT_FALSE(layers.matches("model.layers.0.mlp"));  // not at the start
  EXPECT_TRUE(compiled("layers\\.0", NamePattern::Anchor::kSearch).matches("model.layers.0.mlp"));
  EXPECT_TRUE(compiled("(?P<which>q|k)_proj").matches("k_proj"));  // Python's named groups are RE2 syntax
  EXPECT_TRUE(compiled("model\\.layers\\.\\d+\\.self_attn").matches("model.layers.17.self_attn.q_proj"));
  EXPECT_FALSE(compiled("a.b").matches("a\nb"));  // '.' does not match a newline, as in Python
}

TEST(NamePattern, BacktrackingConstructsAreRefusedNamingTheConstruct) {
  const std::pair<const char*, const char*> cases[] = {
      {"(a)\\1", "a backreference \"\\1\" at character 4"},
      {"(?P<x>a)(?P=x)", "a named backreference \"(?P=\" at character 9"},
      {"model(?=\\.layers)", "a lookahead \"(?=\" at character 6"},
      {"(?!lm_head).*", "a negative lookahead \"(?!\" at character 1"},
      {"(?<=mlp\\.)gate", "a lookbehind \"(?<=\" at character 1"},
      {"(?<!x)y", "a negative lookbehind \"(?<!\" at character 1"},
      {"(?>a+)b", "an atomic group \"(?>\" at character 1"},
      {"a*+b", "a possessive quantifier \"*+\" at character 2"},
  };
  for (const auto& [pattern, construct] : cases) {
    auto r = NamePattern::compile(pattern, NamePattern::Anchor::kStart);
    ASSERT_FALSE(r) << pattern;
    EXPECT_NE(r.message().find(std::string("regex \"") + pattern + "\" uses " + construct), std::string::npos)
        << r.message();
  }
  // In a class, "\1" and "(?=" are not those constructs (RE2 decides what they are).
  EXPECT_TRUE(NamePattern::compile("[(?=]x", NamePattern::Anchor::kStart));
}

TEST(NamePattern, ConfigFieldIsNamedWithTheConstruct) {
  auto r = parse_quant_config(R"({"quantization_config": {"quant_method": "compressed-tensors",
      "ignore": ["lm_head", "re:(?!model).*"], "config_groups": {"g": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false}}}}})",
                              "config.json");
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("config.json: quantization_config.ignore[1]: regex \"(?!model).*\" uses a negative "
                             "lookahead"),
            std::string::npos)
      << r.message();
}

TEST(NamePattern, LengthCapAndSyntaxErrorsQuoteThePattern) {
  EXPECT_TRUE(NamePattern::compile(std::string(kMaxPatternChars, 'a'), NamePattern::Anchor::kStart));
  auto long_one = NamePattern::compile(std::string(kMaxPatternChars + 1, 'a'), NamePattern::Anchor::kStart);
  ASSERT_FALSE(long_one);
  EXPECT_NE(long_one.message().find("(4097 characters) is longer than the 4096"), std::string::npos);
  auto bad = NamePattern::compile("(", NamePattern::Anchor::kSearch);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.message().find("regex \"(\" does not compile: missing )"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace qlinear
