// Regression tests of the problems the reliability work found (docs/RELIABILITY.md, "Findings" R1-R7), each
// first written as a reproducer that failed (crash, undefined behaviour, bogus result or an internal
// error), and kept now that the fix has landed. Run them with:
//   build/tests/test_reliability --gtest_filter='Finding.*'
#include <stdexcept>

#include "checkpoint/strict_json.hpp"
#include "qlinear/loader.hpp"
#include "qlinear/quant_config.hpp"
#include "qlinear/name_pattern.hpp"
#include "reliability_util.hpp"


namespace qlinear::reliability {
namespace {

void expect_contains(const std::string& text, const std::string& piece) {
  EXPECT_NE(text.find(piece), std::string::npos) << "expected \"" << piece << "\" in:\n" << text.substr(0, 2000);
}

// R1 (src/checkpoint/quant_config.cpp, parse_quant_config): a number beyond double's range anywhere in
// config.json threw nlohmann's out_of_range.406 out of the library (only parse_error was caught): "internal
// error", exit 1. Fixed in cc7b68a (every Json::exception is an error value).
TEST(Finding, R1_ConfigNumberOverflowIsAnErrorValue) {
  Result<QuantConfig> r = Status::error("not run");
  EXPECT_NO_THROW(r = parse_quant_config(R"({"quantization_config": {"quant_method": "quark"}, "x": 1e400})",
                                         "config.json"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("config.json"), std::string::npos) << r.message();
}

// R2 (src/cli/platform_option.cpp, parse_platform): "cuda:N" / "smN" with N beyond int went to std::stoi,
// which threw: "internal error: stoi", exit 1. Fixed in cc7b68a (std::from_chars, a usage error).
TEST(Finding, R2_PlatformIndexOverflowIsAUsageError) {
  for (const char* p : {"cuda:99999999999", "sm99999999999"}) {
    const CliResult r = run_cli({"kernels", "--platform", p});
    EXPECT_EQ(r.signal, 0) << r.describe();
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    EXPECT_NE(r.err.find("--platform"), std::string::npos) << r.describe();
  }
}

// R3 (src/core/tensor.cpp, Tensor::empty / numel; src/formats/formats.cpp, storage_bytes; the CLI's size
// options): the element count was a product of int64 dims without an overflow check (undefined behaviour):
// a shape whose count overflowed allocated a 64-byte buffer and carried on. `qlinear demo --n
// 9223372036854775807` died of SIGSEGV; `qlinear bench ... --m 4611686018427387904` printed a timing.
// Fixed: checked products (std::length_error naming the shape), and --m/--n/--k/--tp-size have maxima.
TEST(Finding, R3_OverflowingShapeIsALengthErrorNamingTheShape) {
  EXPECT_EQ(checked_numel({INT64_MAX, 2}), std::nullopt);
  EXPECT_EQ(checked_numel({int64_t{1} << 62, 16, 0}), 0);  // no elements, whatever overflowed before the 0
  EXPECT_EQ(checked_numel({4, -1}), std::nullopt);
  EXPECT_EQ(checked_numel({int64_t{1} << 31, int64_t{1} << 31}), int64_t{1} << 62);
  EXPECT_EQ(checked_storage_bytes(DType::kF32, int64_t{1} << 61), std::nullopt);  // 2^63 bytes
  EXPECT_EQ(checked_storage_bytes(DType::kF4E2M1, INT64_MAX), int64_t{1} << 62);  // two codes a byte
  EXPECT_EQ(checked_storage_bytes(DType::kF32, -1), std::nullopt);
  EXPECT_THROW((void)storage_bytes(DType::kF32, int64_t{1} << 61), std::length_error);
  try {
    (void)Tensor::empty(DType::kF32, {INT64_MAX, 2});
    ADD_FAILURE() << "no exception";
  } catch (const std::length_error& e) {
    expect_contains(e.what(), "f32[9223372036854775807, 2]");
  }
  EXPECT_THROW(Tensor::empty(DType::kBF16, {int64_t{1} << 62, 16}), std::length_error);  // count wraps to 0
  EXPECT_THROW(Tensor::empty(DType::kF32, {int64_t{1} << 62}), std::length_error);      // bytes overflow
  EXPECT_THROW(Tensor::zeros(DType::kF32, {8, -1}), std::length_error);
  EXPECT_THROW(Tensor::from_blob(nullptr, DType::kF32, {INT64_MAX, 2}, nullptr), std::length_error);
  EXPECT_NO_THROW(Tensor::empty(DType::kF32, {int64_t{1} << 62, 0}));  // an empty tensor is fine
  // A reshape whose product wraps to the element count (0 here) is refused, not accepted.
  const Tensor empty = Tensor::empty(DType::kF32, {0});
  EXPECT_FALSE(empty.reshape({int64_t{1} << 62, 4}));
}

TEST(Finding, R3_CliSizeOptionsAreBoundedWithTheRangeInTheMessage) {
  const std::string ckpt = std::string(QLINEAR_SOURCE_DIR) + "/tests/fixtures/w8a8-fp8-tensor";
  const std::string range = "(allowed: 1 to 1048576)";
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"demo", "--n", "9223372036854775807"}, "option --n: 9223372036854775807 is above the maximum 1048576 " + range},
      {{"demo", "--m", "1048577"}, "option --m: 1048577 is above the maximum 1048576 " + range},
      {{"bench", "--scheme", "w8a16-mxfp8", "--n", "64", "--k", "64", "--m", "4611686018427387904", "--reps", "1"},
       "option --m: 4611686018427387904 is above the maximum 1048576 " + range},
      {{"bench", "--scheme", "w8a16-mxfp8", "--n", "4611686018427387904", "--k", "64", "--m", "1", "--reps", "1"},
       "option --n: 4611686018427387904 is above the maximum"},
      {{"bench", "--scheme", "w8a16-mxfp8", "--n", "64", "--k", "4000000000", "--m", "1", "--reps", "1"},
       "option --k: 4000000000 is above the maximum"},
      {{"kernels", "--explain", "--scheme", "w8a16-mxfp8", "--k", "9223372036854775807"}, "option --k: "},
      {{"run", ckpt, "--m", "1,1099511627776"}, "option --m: 1099511627776 is above the maximum 1048576 " + range},
      {{"run", ckpt, "--tp-size", "9223372036854775807"}, "option --tp-size: 9223372036854775807 is above the maximum 4096"},
      {{"inspect", ckpt, "--tp-rank", "4096", "--tp-size", "4096"}, "option --tp-rank: 4096 is above the maximum 4095"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.args));
    const CliResult r = run_cli(c.args, {"ASAN_OPTIONS=allocator_may_return_null=1"});
    EXPECT_EQ(r.signal, 0) << r.describe();
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    expect_contains(r.err, c.expected);
  }
  // At the maximum the size is accepted (and the command runs).
  const CliResult ok = run_cli({"kernels", "--explain", "--scheme", "w8a16-mxfp8", "--n", "1048576", "--k", "1048576"});
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
}

// R4 (src/cli/cmd_bench.cpp, src/cli/cmd_run.cpp): --reps was an int64 narrowed with static_cast<int>:
// 2^63-1 became -1, no repetition ran and the median of nothing was read: SIGSEGV. Fixed in cc7b68a (a
// maximum, now Args::get_int's, and LayerRunner::measure refuses reps < 1).
TEST(Finding, R4_HugeRepsIsAUsageError) {
  const CliResult r = run_cli({"bench", "--scheme", "w8a16-mxfp8", "--n", "64", "--k", "64", "--m", "1", "--reps",
                               "9223372036854775807"});
  EXPECT_EQ(r.signal, 0) << r.describe();
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_NE(r.err.find("--reps"), std::string::npos) << r.describe();
}


// R5 (libstdc++ 12, bits/regex_compiler.tcc; reached from quant_config.cpp's "re:" targets and ignore lists,
// the loader's --layers regex and quantize's --ignore): a brace count or back-reference number longer than 18
// digits overflowed a signed long inside std::regex's compiler (undefined behaviour; UBSan stopped the
// program). Fixed: patterns are compiled by RE2 (src/checkpoint/name_pattern.cpp); counts over 1000 and
// backreferences are refused; the message names the pattern and where it came from.
TEST(Finding, R5_RegexWithAHugeCountIsRefused) {
  auto r = parse_quant_config(R"({"quantization_config": {"quant_method": "compressed-tensors",
      "config_groups": {"g": {"targets": ["re:a{99999999999999999999}"],
      "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false}}}}})",
                              "config.json");
  ASSERT_FALSE(r);
  expect_contains(r.message(), "config.json: quantization_config.config_groups.g.targets[0]: regex "
                               "\"a{99999999999999999999}\" uses a repetition count over 1000");
  auto ignore = parse_quant_config(R"({"quantization_config": {"quant_method": "compressed-tensors",
      "ignore": ["re:x\\1234567890"], "config_groups": {}}})",
                                   "config.json");
  ASSERT_FALSE(ignore);
  expect_contains(ignore.message(), "quantization_config.ignore[0]: regex \"x\\1234567890\" uses a backreference");
  EXPECT_TRUE(NamePattern::compile("model\\.layers\\.[0-9]{1,3}\\.mlp\\.(gate|up)_proj", NamePattern::Anchor::kStart));

  // --layers (the loader) and quantize --ignore (the CLI).
  LoadOptions o;
  o.layer_regex = "proj{0,99999999999999999999}";
  auto model = load_checkpoint(std::string(QLINEAR_SOURCE_DIR) + "/tests/fixtures/w8a8-fp8-tensor", o);
  ASSERT_FALSE(model);
  expect_contains(model.message(), "layer regex (--layers): regex \"proj{0,99999999999999999999}\" uses a repetition count over 1000");
  TempDir dir;
  const CliResult q = run_cli({"quantize", "--scheme", "w8a8-fp8-channel", "--ignore", "a{99999999999999999999}",
                               std::string(QLINEAR_SOURCE_DIR) + "/tests/fixtures/w8a8-fp8-tensor", dir / "out"});
  EXPECT_EQ(q.signal, 0) << q.describe();
  EXPECT_EQ(q.exit_code, 2) << q.describe();
  expect_contains(q.err, "qlinear quantize: --ignore: regex \"a{99999999999999999999}\" uses a repetition count over 1000");
}


// R8 (std::regex in quant_config.cpp's "re:" entries, --layers, --ignore): found by fuzz_quant_config (591 527
// executions): a Quark "exclude" entry "re:.********layers\\.0\\..*" made std::regex backtrack exponentially on
// every layer name it did not match; a replay did not end in 10 minutes. So did patterns without nested
// repetition, such as "(a|a)*c" (overlapping alternatives). Fixed: RE2 matches every pattern in linear time.
// The exponential patterns are accepted now; the test guards the hang: each is matched against long names
// (as a config's ignore list, and through the CLI with --layers, which is killed after 60 s).
TEST(Finding, R8_ExponentialPatternsMatchInLinearTime) {
  // ".**" is not a pattern (Python refuses it too: "multiple repeat").
  auto quark = parse_quant_config(R"({"quantization_config": {"quant_method": "quark",
      "global_quant_config": {"weight": {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": false}},
      "exclude": ["lm_head", "re:.********layers\\.0\\..*"], "export": {"pack_method": "reorder"}}})",
                                  "config.json");
  ASSERT_FALSE(quark);
  expect_contains(quark.message(), "config.json: quantization_config.exclude[1]: regex \".********layers\\.0\\..*\" "
                                   "does not compile: bad repetition operator");
  // Through the config's ignore list, as the loader matches it, against a 10,000-letter layer name.
  const std::string long_name(10000, 'a');
  for (const char* p : {"(a|a)*c", "(a*)*b", "(.*.*)*x", "(a+)+b", "((ab)*c)+", "(a{2,5})*z"}) {
    auto config = parse_quant_config(R"({"quantization_config": {"quant_method": "compressed-tensors",
        "ignore": ["re:)" + std::string(p) + R"("], "config_groups": {"g": {"targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false}}}}})",
                                     "config.json");
    ASSERT_TRUE(config) << p << ": " << config.message();
    const auto start = std::chrono::steady_clock::now();
    auto group = match_layer(*config, long_name);
    ASSERT_TRUE(group) << group.message();
    EXPECT_NE(*group, nullptr) << p << " ignored " << long_name.substr(0, 20) << "...";
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0) << p;
  }
  // End to end: a config whose ignore list holds "re:(a|a)*c" and --layers
  // "(.*proj)+x" against a fixture: the loader finishes (and --layers then selects nothing).
  TempDir dir;
  const std::string ckpt = dir / "ckpt";
  std::filesystem::create_directories(ckpt);
  const std::string fixture = std::string(QLINEAR_SOURCE_DIR) + "/tests/fixtures/w8a16-fp8";
  std::filesystem::copy_file(fixture + "/model.safetensors", ckpt + "/model.safetensors");
  std::ifstream in(fixture + "/config.json");
  auto config = nlohmann::ordered_json::parse(in);
  config["quantization_config"]["ignore"] = {"lm_head", "re:(a|a)*c", "re:(.*.*)*x"};
  std::ofstream(ckpt + "/config.json") << config.dump(2);
  const CliResult inspect = run_cli({"inspect", ckpt}, {}, 60);
  EXPECT_EQ(inspect.signal, 0) << inspect.describe();
  EXPECT_EQ(inspect.exit_code, 0) << inspect.describe();
  const CliResult layers = run_cli({"run", ckpt, "--layers", "(.*proj)+x", "--m", "1"}, {}, 60);
  EXPECT_EQ(layers.signal, 0) << layers.describe();
  EXPECT_EQ(layers.exit_code, 1) << layers.describe();
  expect_contains(layers.err, "no quantized linear layer matches --layers '(.*proj)+x'");
}

// A copy of a real fixture whose config.json or model.safetensors is replaced by `text`.
std::string fixture_with(const TempDir& dir, const std::string& file, const std::string& bytes) {
  const std::string ckpt = dir / "ckpt";
  std::filesystem::create_directories(ckpt);
  for (const char* f : {"config.json", "model.safetensors"}) {
    std::filesystem::copy_file(std::string(QLINEAR_SOURCE_DIR) + "/tests/fixtures/w8a16-fp8/" + f, ckpt + "/" + f,
                               std::filesystem::copy_options::overwrite_existing);
  }
  std::ofstream(ckpt + "/" + file, std::ios::binary | std::ios::trunc) << bytes;
  return ckpt;
}

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string safetensors_with_header(const std::string& header) {
  std::string b(8, '\0');
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  return b + header;
}

void expect_clean_failure(const std::string& ckpt, const std::string& piece) {
  const CliResult r = run_cli({"inspect", ckpt});
  EXPECT_EQ(r.signal, 0) << r.describe().substr(0, 600);
  EXPECT_EQ(r.exit_code, 1) << r.describe().substr(0, 600);
  EXPECT_NE(r.err.find(piece), std::string::npos) << r.describe().substr(0, 600);
  EXPECT_LT(r.err.size(), 1024u) << "the message quotes the whole value";
}

// R6 (src/checkpoint/safetensors.cpp parse_entry / parse_metadata; src/checkpoint/quant_config.cpp describe):
// error messages quoted the offending JSON value with nlohmann's dump(), which recurses once per nesting
// level: a 200 KB header or config.json nesting 100000 arrays deep overflowed the stack (SIGSEGV); 10000
// levels gave a 20 KB message. Fixed: nesting deeper than 64 levels is refused while parsing (safetensors
// headers, index.json, config.json, quantize's base config), and messages quote at most 100 characters.
TEST(Finding, R6_DeeplyNestedJsonIsAnErrorNotAStackOverflow) {
  TempDir dir;
  const std::string too_deep = "arrays and objects nest deeper than 64 levels";
  expect_clean_failure(fixture_with(dir, "model.safetensors",
                                    safetensors_with_header(R"({"w": {"dtype": "U8", "shape": )" + nested(100000) +
                                                            R"(, "data_offsets": [0, 0]}})")),
                       too_deep);
  expect_clean_failure(fixture_with(dir, "config.json",
                                    R"({"quantization_config": {"quant_method": "compressed-tensors", "ignore": [)" +
                                        nested(100000) + R"(], "config_groups": {}}})"),
                       "config.json: invalid JSON: " + too_deep);
  // Depth outside quantization_config counts too: the whole document is bounded.
  expect_clean_failure(fixture_with(dir, "config.json", "{\"x\": " + nested(65) + "}"), too_deep);
}

TEST(Finding, R6_NestingUpTo64LevelsParsesAndDeeperIsRefused) {
  // The top-level value is level 1: 64 nested arrays parse, 65 do not.
  EXPECT_TRUE(detail::parse_json_bounded(nested(64)));
  auto r = detail::parse_json_bounded(nested(65));
  ASSERT_FALSE(r);
  expect_contains(r.message(), "deeper than 64 levels");
  EXPECT_TRUE(detail::parse_json_bounded("{\"a\": " + nested(63) + "}"));
  EXPECT_FALSE(detail::parse_json_bounded("{\"a\": " + nested(64) + "}"));
}

TEST(Finding, R6_MessagesQuoteAtMostAHundredCharactersOfAValue) {
  // A wide value (no depth needed): a 100 KB shape array and a 100 KB dtype string.
  std::string wide = "[";
  for (int i = 0; i < 20000; ++i) wide += (i ? ",\"x\"" : "\"x\"");
  wide += "]";
  TempDir dir;
  expect_clean_failure(fixture_with(dir, "model.safetensors",
                                    safetensors_with_header(R"({"w": {"dtype": "U8", "shape": )" + wide +
                                                            R"(, "data_offsets": [0, 0]}})")),
                       "shape[0] = \"x\" is not a non-negative integer");
  expect_clean_failure(fixture_with(dir, "model.safetensors",
                                    safetensors_with_header(R"({"w": {"dtype": )" + wide +
                                                            R"(, "shape": [], "data_offsets": [0, 0]}})")),
                       "'dtype' is not a string (got [\"x\", \"x\", ");
  expect_clean_failure(fixture_with(dir, "config.json",
                                    R"({"quantization_config": {"quant_method": "compressed-tensors", "ignore": )" +
                                        std::string("\"") + std::string(100000, 'y') + "\", \"config_groups\": {}}}"),
                       "quantization_config.ignore: expected a list of strings, got \"yyyy");
  const std::string excerpt = detail::json_excerpt(nlohmann::ordered_json::parse(wide));
  EXPECT_EQ(excerpt.size(), 100u);
  EXPECT_EQ(excerpt.substr(excerpt.size() - 3), "...");
  EXPECT_EQ(detail::json_excerpt(nlohmann::ordered_json::parse(R"({"a": [1, 2]})")), R"({"a": [1, 2]})");
}

// R7 (src/checkpoint/quant_config.cpp, "re:" targets and ignore entries; same for --layers and --ignore):
// std::regex compiled a pattern recursively, once per nesting level: a config.json target
// "re:((((...a...))))" nested 100000 deep (200 KB) overflowed the stack: SIGSEGV. Fixed: patterns longer than
// 4096 characters are refused before they are compiled (RE2 also bounds its own nesting and memory).
TEST(Finding, R7_HugeRegexIsRefused) {
  TempDir dir;
  const std::string re = "re:" + std::string(100000, '(') + ".*" + std::string(100000, ')');
  expect_clean_failure(fixture_with(dir, "config.json",
                                    R"({"quantization_config": {"quant_method": "compressed-tensors",
                                        "config_groups": {"g": {"targets": [")" + re + R"("],
                                        "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                                                    "symmetric": true, "dynamic": false}}}}})"),
                       "config.json: quantization_config.config_groups.g.targets[0]: regex \"((((");
  const CliResult layers = run_cli({"run", std::string(QLINEAR_SOURCE_DIR) + "/tests/fixtures/w8a8-fp8-tensor",
                                    "--layers", std::string(20000, '(') + "x" + std::string(20000, ')')});
  EXPECT_EQ(layers.signal, 0) << layers.describe().substr(0, 600);
  EXPECT_EQ(layers.exit_code, 1) << layers.describe().substr(0, 600);
  expect_contains(layers.err, "layer regex (--layers): regex \"((((");
  expect_contains(layers.err, "(40001 characters) is longer than the 4096 characters qlinear accepts");
  EXPECT_LT(layers.err.size(), 1024u);
  EXPECT_TRUE(NamePattern::compile(std::string(kMaxPatternChars, 'a'), NamePattern::Anchor::kStart));
  EXPECT_FALSE(NamePattern::compile(std::string(kMaxPatternChars + 1, 'a'), NamePattern::Anchor::kStart));
  // Nested 2000 deep within the cap: RE2 refuses it ("expression nested too deeply") or compiles it; no crash.
  (void)NamePattern::compile(std::string(2000, '(') + "x" + std::string(2000, ')'), NamePattern::Anchor::kStart);
}

}  // namespace
}  // namespace qlinear::reliability
