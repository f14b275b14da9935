// Tensor parallelism with one process per GPU (tp::Group::join), the way engines run it: the group id as
// hex text, a rank that never joins ends the join with the reason, a group of one process runs the
// one-GPU layer, and on 2 GPUs two processes (this test program started twice as workers) equal the one-GPU
// layer with either row reduction and give both ranks the same output bytes.
#include <gtest/gtest.h>
#include <unistd.h>
#if QLINEAR_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "qlinear/cuda.hpp"
#include "qlinear/random.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/tensor_parallel.hpp"

namespace qlinear {
namespace {

TEST(TensorParallelProcesses, GroupIdsTravelAsHex) {
  if (!tp::available()) {
    EXPECT_FALSE(tp::UniqueId::from_hex(std::string(256, '0')));
    return;
  }
  tp::UniqueId id;
  for (size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<uint8_t>(i * 37 + 11);
  const std::string hex = id.hex();
  ASSERT_EQ(hex.size(), 256u);
  auto back = tp::UniqueId::from_hex(hex);
  ASSERT_TRUE(back) << back.message();
  EXPECT_EQ(back->bytes, id.bytes);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  ASSERT_TRUE(tp::UniqueId::from_hex(upper));
  EXPECT_EQ(tp::UniqueId::from_hex(upper)->bytes, id.bytes);

  auto short_id = tp::UniqueId::from_hex(hex.substr(1));
  ASSERT_FALSE(short_id);
  EXPECT_NE(short_id.message().find("256 hex digits"), std::string::npos) << short_id.message();
  std::string bad = hex;
  bad[7] = 'g';
  auto not_hex = tp::UniqueId::from_hex(bad);
  ASSERT_FALSE(not_hex);
  EXPECT_NE(not_hex.message().find("character 7 is 'g'"), std::string::npos) << not_hex.message();
}

#if QLINEAR_WITH_CUDA

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

#define QL_REQUIRE_GPUS(n)                                                                              \
  do {                                                                                                  \
    if (!tp::available()) GTEST_SKIP() << "built without NCCL: " << tp::Group::create({0}).message();   \
    if (gpu_count() < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs, found " << gpu_count();          \
  } while (0)

// Sets an environment variable for one test.
struct EnvScope {
  std::string name;
  EnvScope(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~EnvScope() { unsetenv(name.c_str()); }
};

TEST(TensorParallelProcesses, ARankThatNeverJoinsEndsTheJoinWithTheReason) {
  QL_REQUIRE_GPUS(1);
  EnvScope timeout("QLINEAR_TP_TIMEOUT_S", "5");
  auto id = tp::UniqueId::create();
  ASSERT_TRUE(id) << id.message();
  auto g = tp::Group::join(*id, 0, 2, 0);  // rank 1 never comes
  ASSERT_FALSE(g);
  EXPECT_NE(g.message().find("rank 0 of 2"), std::string::npos) << g.message();
  EXPECT_NE(g.message().find("did not all join within 5 s"), std::string::npos) << g.message();

  auto outside = tp::Group::join(*id, 2, 2, 0);
  ASSERT_FALSE(outside);
  EXPECT_NE(outside.message().find("rank must be in [0, size)"), std::string::npos) << outside.message();
}

// max |a - b| / max |b| over two host tensors of one shape.
double rel_diff(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = element_as_double(a, i), y = element_as_double(b, i);
    num = std::isfinite(x) ? std::max(num, std::fabs(x - y)) : HUGE_VAL;
    den = std::max(den, std::fabs(y));
  }
  return den > 0 ? num / den : num;
}

uint64_t fnv1a(const Tensor& t) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const uint8_t*>(t.raw());
  for (int64_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Every layer of a fixture on this process's rank(s) of `group` against the same layer on one GPU (the
// rank's device): one JSON record per layer and M.
std::vector<nlohmann::json> check_fixture(tp::Group& group, const std::string& fixture, tp::RowReduction reduction) {
  std::vector<nlohmann::json> records;
  const int w = group.size();
  const int rank = group.local_ranks().at(0);
  const int dev = group.device(rank);
  auto full = load_checkpoint(test_cli::fixture(fixture), LoadOptions{});
  LoadOptions o;
  o.tp_rank = rank;
  o.tp_size = w;
  auto mine = load_checkpoint(test_cli::fixture(fixture), o);
  EXPECT_TRUE(full && mine) << (full ? mine.message() : full.message());
  if (!full || !mine) return records;
  tp::ParallelOptions po;
  po.row_reduction = reduction;
  uint64_t seed = 3;
  for (size_t i = 0; i < full->layers.size(); ++i) {
    const LoadedLayer& l = full->layers[i];
    LinearLayer one = l.layer;
    auto platform = Platform::cuda_device(dev);
    auto kernel = select_kernel(one.config, *platform);
    EXPECT_TRUE(kernel) << kernel.message();
    if (!kernel) continue;
    EXPECT_TRUE((*kernel)->process_weights_after_loading(one).is_ok());
    cuda::DeviceGuard guard;
    EXPECT_TRUE(guard.set(dev).is_ok());
    Tensor bias;
    if (l.bias.defined()) bias = cuda::to_device(l.bias, dev).value();
    auto pl = tp::ParallelLinear::create(group, {mine->layers[i]}, po);
    EXPECT_TRUE(pl) << pl.message();
    if (!pl) continue;
    const bool row = (*pl)->parallelism() == Parallelism::kRow;
    const int64_t n = l.full_n, k = l.full_k, k_r = k / w;
    for (int64_t m : {1, 7, 64, 257}) {
      const Tensor x = random_normal(one.config.input_dtype, {m, k}, seed++);
      Tensor x0 = cuda::to_device(x, dev).value();
      Tensor y1 = cuda::empty(one.config.out_dtype, {m, n}, dev).value();
      EXPECT_TRUE((*kernel)->apply(one, Activation::dense(x0), bias.defined() ? &bias : nullptr, y1).is_ok());
      const Tensor ref = cuda::to_host(y1).value();
      Tensor part = row ? x.narrow(1, rank * k_r, k_r).value().contiguous() : x;
      Tensor xd = cuda::to_device(part, dev).value();
      Tensor yd = cuda::empty(one.config.out_dtype, {m, n}, dev).value();
      EXPECT_TRUE(cuda::fill_bytes(yd, 0xFF).is_ok());
      const Status s = group.run([&](int r) { return (*pl)->forward(r, xd, yd); });
      EXPECT_TRUE(s.is_ok()) << s.message();
      const Tensor got = cuda::to_host(yd).value();
      records.push_back({{"fixture", fixture}, {"layer", l.layer.name}, {"split", row ? "row" : "column"},
                         {"reduction", reduction == tp::RowReduction::kF32 ? "f32" : "output"}, {"m", m},
                         {"rel", rel_diff(got, ref)}, {"hash", std::to_string(fnv1a(got))}, {"ok", s.is_ok()}});
    }
  }
  return records;
}

const char* const kFixtures[] = {"w8a8-fp8-channel", "w8a16-mxfp8", "w8a8-int8-dynamic", "w4a16-mxfp4"};

TEST(TensorParallelProcesses, AGroupOfOneProcessRunsTheOneGpuLayer) {
  QL_REQUIRE_GPUS(1);
  auto id = tp::UniqueId::create();
  ASSERT_TRUE(id) << id.message();
  auto g = tp::Group::join(*id, 0, 1, 0);
  ASSERT_TRUE(g) << g.message();
  EXPECT_EQ((*g)->size(), 1);
  EXPECT_EQ((*g)->local_ranks(), std::vector<int>{0});
  EXPECT_FALSE((*g)->is_local(1));
  int checked = 0;
  for (const char* f : kFixtures) {
    for (const nlohmann::json& r : check_fixture(**g, f, tp::RowReduction::kF32)) {
      EXPECT_TRUE(r["ok"].get<bool>()) << r.dump();
      EXPECT_EQ(r["rel"].get<double>(), 0.0) << r.dump();  // one rank: the one-GPU kernel on the same input
      ++checked;
    }
  }
  EXPECT_GE(checked, 4 * 4 * 4);
}

// Run by TwoProcessesEqualOneGpu (QLINEAR_TP_ID / _RANK / _SIZE set); prints one "TPRESULT {json}" line
// per layer, M and reduction.
TEST(TensorParallelProcesses, DISABLED_Worker) {
  const char* id_hex = std::getenv("QLINEAR_TP_ID");
  if (id_hex == nullptr) GTEST_SKIP() << "started by TwoProcessesEqualOneGpu";
  const int rank = std::atoi(std::getenv("QLINEAR_TP_RANK"));
  const int size = std::atoi(std::getenv("QLINEAR_TP_SIZE"));
  auto id = tp::UniqueId::from_hex(id_hex);
  ASSERT_TRUE(id) << id.message();
  auto g = tp::Group::join(*id, rank, size, rank % gpu_count());
  ASSERT_TRUE(g) << g.message();
  for (const char* f : kFixtures) {
    for (tp::RowReduction red : {tp::RowReduction::kF32, tp::RowReduction::kOutputDtype}) {
      for (const nlohmann::json& r : check_fixture(**g, f, red)) std::printf("TPRESULT %s\n", r.dump().c_str());
    }
  }
  std::fflush(stdout);
}

std::string self_exe() {
  std::array<char, 4096> buf{};
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), static_cast<size_t>(n)) : std::string();
}

TEST(TensorParallelProcesses, TwoProcessesEqualOneGpu) {
  QL_REQUIRE_GPUS(2);
  auto id = tp::UniqueId::create();  // this process hosts the bootstrap root until both workers joined
  ASSERT_TRUE(id) << id.message();
  std::array<FILE*, 2> pipes{};
  for (int r = 0; r < 2; ++r) {
    const std::string cmd = "QLINEAR_TP_ID=" + id->hex() + " QLINEAR_TP_RANK=" + std::to_string(r) +
                            " QLINEAR_TP_SIZE=2 QLINEAR_TP_TIMEOUT_S=120 " + self_exe() +
                            " --gtest_also_run_disabled_tests"
                            " --gtest_filter=TensorParallelProcesses.DISABLED_Worker 2>&1";
    pipes[r] = ::popen(cmd.c_str(), "r");
    ASSERT_NE(pipes[r], nullptr);
  }
  std::array<std::string, 2> out;
  std::array<int, 2> code{};
  for (int r = 0; r < 2; ++r) {
    std::array<char, 4096> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), pipes[r])) > 0) out[r].append(buf.data(), n);
    code[r] = ::pclose(pipes[r]);
  }
  std::array<std::map<std::string, nlohmann::json>, 2> by_key;
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("worker " + std::to_string(r) + ":\n" + out[r]);
    EXPECT_EQ(code[r], 0);
    std::istringstream lines(out[r]);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("TPRESULT ", 0) != 0) continue;
      const nlohmann::json j = nlohmann::json::parse(line.substr(9));
      by_key[r][j["fixture"].get<std::string>() + "/" + j["layer"].get<std::string>() + "/" +
                j["reduction"].get<std::string>() + "/" + std::to_string(j["m"].get<int64_t>())] = j;
    }
  }
  ASSERT_EQ(by_key[0].size(), by_key[1].size());
  EXPECT_GE(by_key[0].size(), 4u * 2 * 4 * 4);
  bool saw_row = false;
  for (const auto& [key, a] : by_key[0]) {
    SCOPED_TRACE(key);
    ASSERT_TRUE(by_key[1].count(key));
    const nlohmann::json& b = by_key[1].at(key);
    EXPECT_TRUE(a["ok"].get<bool>() && b["ok"].get<bool>());
    // Column splits compute the one-GPU dot products, but on half the rows a kernel may split K
    // differently (another f32 summation order): the f32 row bound, two output ulps, as `qlinear run --tp`
    // allows. Row splits add two partials: f32, or in the output dtype with one more rounding each.
    const double bound = a["reduction"] == "output" && a["split"] == "row" ? 2e-2 : 8e-3;
    EXPECT_LE(a["rel"].get<double>(), bound) << a.dump();
    EXPECT_LE(b["rel"].get<double>(), bound) << b.dump();
    if (a["split"] == "row") {
      saw_row = true;
      EXPECT_EQ(a["hash"], b["hash"]) << "the ranks' outputs differ";
    }
  }
  EXPECT_TRUE(saw_row);
}

#endif  // QLINEAR_WITH_CUDA

}  // namespace
}  // namespace qlinear
