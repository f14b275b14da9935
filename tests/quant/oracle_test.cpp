// Codes and scales of quantize() bit-equal to the independent Python oracle (tools/gen_quant_oracle.py)
// for every key, every MX scale rule, and inputs with zero rows, huge / tiny / subnormal values and ties.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qlinear/quantize.hpp"

namespace qlinear {
namespace {

using nlohmann::json;

const std::string kDir = std::string(QLINEAR_TEST_DATA) + "/quant/";

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const json& manifest() {
  static const json m = [] {
    std::ifstream in(kDir + "manifest.json");
    return in ? json::parse(in) : json::object();
  }();
  return m;
}

DType dtype_of(const json& j) {
  const auto d = dtype_from_name(j.get<std::string>());
  EXPECT_TRUE(d.has_value()) << j;
  return d.value_or(DType::kU8);
}

Shape shape_of(const json& j) { return j.get<std::vector<int64_t>>(); }

// A tensor from a manifest section {dtype, shape, offset, nbytes} of `blob`.
Tensor section_tensor(const json& s, const std::vector<uint8_t>& blob) {
  Tensor t = Tensor::empty(dtype_of(s["dtype"]), shape_of(s["shape"]));
  const auto offset = s["offset"].get<size_t>(), nbytes = s["nbytes"].get<size_t>();
  EXPECT_LE(offset + nbytes, blob.size());
  EXPECT_EQ(static_cast<size_t>(t.nbytes()), nbytes);
  if (offset + nbytes <= blob.size()) std::memcpy(t.raw(), blob.data() + offset, nbytes);
  return t;
}

// A tensor from an options entry {dtype, shape, values}.
Tensor option_tensor(const json& o) {
  const DType d = dtype_of(o["dtype"]);
  Tensor t = Tensor::empty(d, shape_of(o["shape"]));
  const auto values = o["values"].get<std::vector<double>>();
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < t.numel(); ++i) {
    if (d == DType::kF32) t.data<float>()[i] = static_cast<float>(values[i]);
    else if (d == DType::kI32) t.data<int32_t>()[i] = static_cast<int32_t>(values[i]);
    else static_cast<uint8_t*>(t.raw())[i] = static_cast<uint8_t>(values[i]);
  }
  return t;
}

QuantKey key_of(const json& j) {
  auto scale_desc = [](const json& s) {
    const auto g = s["group"].get<std::vector<int64_t>>();
    return ScaleDesc{dtype_of(s["dtype"]), s["static"].get<bool>(), GroupShape{g[0], g[1]}};
  };
  QuantKey key;
  key.dtype = dtype_of(j["dtype"]);
  key.scale = scale_desc(j["scale"]);
  if (!j["scale2"].is_null()) key.scale2 = scale_desc(j["scale2"]);
  key.symmetric = j["symmetric"].get<bool>();
  return key;
}

QuantizeOptions options_of(const json& o) {
  QuantizeOptions opts;
  if (o.contains("mx_rule")) {
    const auto rule = o["mx_rule"].get<std::string>();
    opts.mx_rule = rule == "floor_log2" ? MxScaleRule::kFloorLog2
                   : rule == "ocp"      ? MxScaleRule::kOcp
                                        : MxScaleRule::kCeilOverMax;
  }
  if (o.contains("scale_ub")) opts.scale_ub = o["scale_ub"].get<float>();
  if (o.contains("nvfp4_global_scale")) opts.nvfp4_global_scale = o["nvfp4_global_scale"].get<float>();
  if (o.contains("static_scale")) opts.static_scale = option_tensor(o["static_scale"]);
  if (o.contains("static_zero_point")) opts.static_zero_point = option_tensor(o["static_zero_point"]);
  return opts;
}

struct OracleCase {
  std::string name;
  json entry;
};

std::vector<OracleCase> oracle_cases() {
  std::vector<OracleCase> cases;
  if (!manifest().contains("cases")) return cases;
  for (const json& c : manifest()["cases"]) cases.push_back({c["name"].get<std::string>(), c});
  return cases;
}

void PrintTo(const OracleCase& c, std::ostream* os) { *os << c.name; }

class QuantOracle : public ::testing::TestWithParam<OracleCase> {};

TEST(QuantOracleData, ManifestCoversEveryNamedKeyAndRule) {
  ASSERT_TRUE(manifest().contains("cases")) << "missing " << kDir << "manifest.json";
  for (const NamedKey& named : named_keys()) {
    int n = 0;
    for (const json& c : manifest()["cases"]) n += c["key_name"] == named.name;
    EXPECT_GT(n, 0) << named.name << " has no oracle case";
  }
  for (const char* rule : {"ceil_over_max", "floor_log2", "ocp"}) {
    for (const char* key : {"kMxfp8Dynamic", "kMxfp6E2M3Dynamic", "kMxfp6E3M2Dynamic", "kMxfp4Dynamic"}) {
      int n = 0;
      for (const json& c : manifest()["cases"]) {
        n += c["key_name"] == key && c["options"].value("mx_rule", "") == rule;
      }
      EXPECT_GT(n, 0) << key << " with rule " << rule << " has no oracle case";
    }
  }
}

TEST_P(QuantOracle, CodesAndScalesBitEqual) {
  static const std::vector<uint8_t> inputs = read_bytes(kDir + "inputs.bin");
  static const std::vector<uint8_t> expected = read_bytes(kDir + "expected.bin");
  const json& c = GetParam().entry;
  const QuantKey key = key_of(c["key"]);
  if (!c["key_name"].get<std::string>().empty()) {
    ASSERT_EQ(key_name(key), c["key_name"].get<std::string>());  // the oracle's key table mirrors quant_key.hpp
  }
  const Tensor x = section_tensor(manifest()["inputs"][c["input"].get<std::string>()], inputs);

  const Result<QuantizedTensor> q = quantize(x, key, options_of(c["options"]));
  ASSERT_TRUE(q.is_ok()) << q.message();
  EXPECT_EQ(q->rows, x.size(0));
  EXPECT_EQ(q->cols, x.size(1));
  for (const json& s : c["expected"]) {
    const std::string field = s["field"].get<std::string>();
    const Tensor want = section_tensor(s, expected);
    const Tensor& got = field == "data"    ? q->data
                        : field == "scale" ? q->scale
                        : field == "scale2" ? q->scale2
                                            : q->zero_point;
    ASSERT_TRUE(got.defined()) << field;
    ASSERT_EQ(got.describe(), want.describe()) << field;
    const auto* a = static_cast<const uint8_t*>(got.raw());
    const auto* b = static_cast<const uint8_t*>(want.raw());
    const int64_t n = want.nbytes();
    int64_t first = -1, count = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (a[i] != b[i]) {
        if (first < 0) first = i;
        ++count;
      }
    }
    EXPECT_EQ(count, 0) << field << ": " << count << " of " << n << " bytes differ, first at byte " << first
                        << " (got 0x" << std::hex << int{first >= 0 ? a[first] : 0} << ", want 0x"
                        << int{first >= 0 ? b[first] : 0} << ")";
  }
  // The oracle writes no field the key does not have.
  bool has_scale2 = false, has_zp = false;
  for (const json& s : c["expected"]) {
    has_scale2 = has_scale2 || s["field"] == "scale2";
    has_zp = has_zp || s["field"] == "zero_point";
  }
  EXPECT_EQ(q->scale2.defined(), has_scale2);
  EXPECT_EQ(q->zero_point.defined(), has_zp);
}

std::string case_test_name(const ::testing::TestParamInfo<OracleCase>& info) {
  std::string name = info.param.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Cases, QuantOracle, ::testing::ValuesIn(oracle_cases()), case_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(QuantOracle);

// The committed tables are what the oracle generates today (`gen_quant_oracle.py --check`).
TEST(QuantOracleData, CommittedTablesMatchTheGenerator) {
  if (std::system("python3 -c 'import ml_dtypes, numpy' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with numpy and ml_dtypes is not available (tools/setup.sh installs them)";
  }
  const std::string cmd = "python3 " + std::string(QLINEAR_SOURCE_DIR) + "/tools/gen_quant_oracle.py --check";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace qlinear
