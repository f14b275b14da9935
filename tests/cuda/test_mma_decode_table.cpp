// The tuned table of the tensor-core decode GEMM (backends/cuda/tuning/mma_decode_table.hpp) on the CPU (no
// GPU needed): every checked-in entry runs as written and is the source `qlinear tune --decode --out`
// writes; the lookup takes the smallest bucket at or above M for the exact device, code and shape; and (CUDA
// builds) the route functions take a matching entry's choice, the same choice as the forced variant the tuner
// timed for it, and today's rules wherever no entry matches, a variant is forced or the scales are promoted.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/tuning/mma_decode_table.hpp"

#if QLINEAR_WITH_CUDA
#include "backends/cuda/mma_decode.hpp"
#include "backends/cuda/mma_decode_wgmma.hpp"
#include "cuda/mma_variants.hpp"
#endif

namespace qlinear {
namespace {

using cuda::MmaCode;
using cuda::MmaDecodeRoute;
using cuda::MmaDecodeTunedEntry;

constexpr const char* kTestGpu = "Test GPU (mma_decode_table tests)";

// Entries of a fake GPU, looked up as if checked in, for the scope.
class ExtraEntries {
 public:
  explicit ExtraEntries(std::vector<MmaDecodeTunedEntry> e) : entries_(std::move(e)) {
    cuda::mma_decode_tuned_extra_entries(entries_);
  }
  ~ExtraEntries() { cuda::mma_decode_tuned_extra_entries({}); }
  ExtraEntries(const ExtraEntries&) = delete;
  ExtraEntries& operator=(const ExtraEntries&) = delete;

 private:
  std::vector<MmaDecodeTunedEntry> entries_;
};

TEST(MmaDecodeTable, EveryEntryRunsAsWrittenOnceAndIsTheTunersSource) {
  std::stringstream text;  // every GPU's generated file, tuning/mma_decode_tuned_<gpu>.inc
  int files = 0;
  const std::filesystem::path dir = std::filesystem::path(QLINEAR_SOURCE_DIR) / "src/backends/cuda/tuning";
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    const std::string name = f.path().filename().string();
    if (name.rfind("mma_decode_tuned_", 0) != 0 || f.path().extension() != ".inc") continue;
    std::ifstream in(f.path());
    ASSERT_TRUE(in) << name;
    text << in.rdbuf();
    ++files;
  }
  EXPECT_GE(files, 2) << "the H200's and the H100's tables";
  std::set<std::tuple<std::string, MmaCode, int64_t, int64_t, int64_t>> keys;
  ASSERT_FALSE(cuda::mma_decode_tuned_table().empty());
  for (const MmaDecodeTunedEntry& e : cuda::mma_decode_tuned_table()) {
    const std::string src = cuda::mma_decode_entry_source(e);
    EXPECT_EQ(cuda::mma_decode_entry_problem(e), "") << src;
    EXPECT_TRUE(keys.insert({e.device, e.code, e.n, e.k, e.m_max}).second) << "twice: " << src;
    EXPECT_NE(text.str().find(src), std::string::npos) << "not as `qlinear tune --decode --out` writes it: " << src;
    if (e.route == MmaDecodeRoute::kWgmma && e.rows == 256) {
      EXPECT_EQ(e.tokens, 64) << src;
    }
  }
}

TEST(MmaDecodeTable, EntryProblemsNameWhatCannotRun) {
  const MmaDecodeTunedEntry ok{kTestGpu, MmaCode::kE4M3, 8192, 8192, 64, MmaDecodeRoute::kWgmma, 64, 256, 0};
  EXPECT_EQ(cuda::mma_decode_entry_problem(ok), "");
  MmaDecodeTunedEntry e = ok;
  e.tokens = 128;
  e.m_max = 128;
  EXPECT_EQ(cuda::mma_decode_entry_problem(e), "256 rows run only with 64-token tiles");
  e.rows = 128;
  e.m_max = 64;
  EXPECT_EQ(cuda::mma_decode_entry_problem(e), "128-token tiles for M <= 64");
  e = ok;
  e.tokens = 96;
  EXPECT_EQ(cuda::mma_decode_entry_problem(e), "tokens must be 64, 128 or 256");
  e = ok;
  e.m_max = 16;
  EXPECT_EQ(cuda::mma_decode_entry_problem(e), "M bucket 16 ends below 17");
  e = ok;
  e.code = MmaCode::kE3M2;
  EXPECT_EQ(cuda::mma_decode_entry_problem(e), "FP6 entries are keyed E2M3 (both FP6 codes run one kernel)");
  e = ok;
  e.route = MmaDecodeRoute::kWiden;
  EXPECT_EQ(cuda::mma_decode_entry_problem(e), "tokens, rows and splits belong to the wgmma route");
}

TEST(MmaDecodeTable, LookupTakesTheSmallestBucketAtOrAboveMForTheExactDeviceCodeAndShape) {
  const ExtraEntries extra({
      {kTestGpu, MmaCode::kE2M1, 4096, 14336, 256, MmaDecodeRoute::kWiden},
      {kTestGpu, MmaCode::kE2M1, 4096, 14336, 32, MmaDecodeRoute::kRule},
      {kTestGpu, MmaCode::kE2M1, 4096, 14336, 64, MmaDecodeRoute::kWgmma, 64, 256, 2},
      {kTestGpu, MmaCode::kE2M3, 4096, 14336, 64, MmaDecodeRoute::kMmaSync},
  });
  auto bucket = [](std::string_view device, MmaCode code, int64_t n, int64_t k, int64_t m) -> int64_t {
    const MmaDecodeTunedEntry* e = cuda::mma_decode_tuned_entry(device, code, n, k, m);
    return e == nullptr ? -1 : e->m_max;
  };
  for (const auto& [m, want] : std::vector<std::pair<int64_t, int64_t>>{
           {17, 32}, {32, 32}, {33, 64}, {64, 64}, {65, 256}, {256, 256}, {257, -1}}) {
    EXPECT_EQ(bucket(kTestGpu, MmaCode::kE2M1, 4096, 14336, m), want) << "M=" << m;
  }
  EXPECT_EQ(cuda::mma_decode_tuned_entry(kTestGpu, MmaCode::kE2M1, 4096, 14336, 50)->splits, 2);
  EXPECT_EQ(bucket("NVIDIA H20", MmaCode::kE2M1, 4096, 14336, 64), -1);  // another device
  EXPECT_EQ(bucket(kTestGpu, MmaCode::kE4M3, 4096, 14336, 64), -1);                  // another code
  EXPECT_EQ(bucket(kTestGpu, MmaCode::kE2M1, 4096, 4096, 64), -1);                   // another shape
  EXPECT_EQ(bucket(kTestGpu, MmaCode::kE2M1, 14336, 4096, 64), -1);                  // N and K swapped
  // Both FP6 codes run one kernel: E3M2 layers take the E2M3 entries.
  EXPECT_EQ(cuda::mma_decode_tuned_entry(kTestGpu, MmaCode::kE3M2, 4096, 14336, 64)->route, MmaDecodeRoute::kMmaSync);
}

// The checked-in H200 table (qlinear tune --decode on the llama3-70b shapes, FP8 and MXFP4 weights): what it
// measured faster there. Each of its entries is one the tuner writes (MmaDecodeTable.EntriesAreValid...).
TEST(MmaDecodeTable, H200TableHoldsTheMeasuredWinners) {
  for (const MmaCode code : {MmaCode::kE4M3, MmaCode::kE2M1}) {
    // 256 weight rows per unit at 64 tokens on 70b.down, gate_up and qkv (8-25% faster at M = 32 and 64).
    for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{{8192, 28672}, {57344, 8192}, {10240, 8192}}) {
      for (const int64_t m : {17, 32, 33, 64}) {
        const MmaDecodeTunedEntry* e = cuda::mma_decode_tuned_entry("NVIDIA H200", code, n, k, m);
        ASSERT_NE(e, nullptr) << n << "x" << k << " M=" << m;
        EXPECT_EQ(e->route, MmaDecodeRoute::kWgmma);
        EXPECT_EQ(e->tokens, 64);
        EXPECT_EQ(e->rows, 256);
      }
    }
    // 70b.o at M 129..256: 128-token tiles (the rule's 256 leave 64 units for 132 SMs; 1.5x faster).
    const MmaDecodeTunedEntry* o = cuda::mma_decode_tuned_entry("NVIDIA H200", code, 8192, 8192, 200);
    ASSERT_NE(o, nullptr);
    EXPECT_EQ(o->route, MmaDecodeRoute::kWgmma);
    EXPECT_EQ(o->tokens, 128);
    EXPECT_EQ(cuda::mma_decode_tuned_entry("NVIDIA H200", code, 8192, 8192, 257), nullptr);  // beyond the table
  }
  // FP6 (keyed E2M3, E3M2 takes its entries): 70b.down at M 33..64 as well, with 4 K splits (9% faster).
  const MmaDecodeTunedEntry* fp6 = cuda::mma_decode_tuned_entry("NVIDIA H200", MmaCode::kE2M3, 8192, 28672, 64);
  ASSERT_NE(fp6, nullptr);
  EXPECT_EQ(fp6->route, MmaDecodeRoute::kWgmma);
  EXPECT_EQ(fp6->rows, 256);
  EXPECT_EQ(fp6->splits, 4);
  // The 8B layers are in the table too: 8b.gate_up FP8 at M 129..256, 128-token tiles (27% faster).
  const MmaDecodeTunedEntry* g8 = cuda::mma_decode_tuned_entry("NVIDIA H200", MmaCode::kE4M3, 28672, 4096, 256);
  ASSERT_NE(g8, nullptr);
  EXPECT_EQ(g8->route, MmaDecodeRoute::kWgmma);
  EXPECT_EQ(g8->tokens, 128);
}

// The checked-in H100 table (the same tuner command on an H100): its own winners, found by its own device
// name, and no H200 entry answers for an H100.
TEST(MmaDecodeTable, H100TableHoldsItsOwnMeasuredWinners) {
  const char* h100 = "NVIDIA H100 80GB HBM3";
  for (const MmaCode code : {MmaCode::kE4M3, MmaCode::kE2M3, MmaCode::kE2M1}) {
    // 70b.o and 8b.gate_up at M 129..256: 128-token tiles (70b.o FP8 111 -> 72 us, 8b.gate_up 272 -> 162).
    for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{{8192, 8192}, {28672, 4096}}) {
      const MmaDecodeTunedEntry* e = cuda::mma_decode_tuned_entry(h100, code, n, k, 256);
      ASSERT_NE(e, nullptr) << n << "x" << k;
      EXPECT_EQ(std::string(e->device), h100);
      EXPECT_EQ(e->route, MmaDecodeRoute::kWgmma);
      EXPECT_EQ(e->tokens, 128);
    }
  }
  EXPECT_EQ(cuda::mma_decode_tuned_entry("NVIDIA H100 PCIe", MmaCode::kE4M3, 8192, 8192, 256), nullptr);
}

TEST(MmaDecodeTable, TunerCandidatesRunAsWrittenAndFitTheirBucket) {
  for (const int64_t m : {17, 32, 64, 65, 128, 129, 256, 1024}) {
    int wgmma = 0, widen = 0, mma_sync = 0;
    for (MmaDecodeTunedEntry c : cuda::mma_decode_candidates(m)) {
      c.device = kTestGpu;
      c.n = 4096;
      c.k = 4096;
      EXPECT_EQ(cuda::mma_decode_entry_problem(c), "") << "M=" << m << " " << cuda::describe(c);
      EXPECT_EQ(c.m_max, m);
      wgmma += c.route == MmaDecodeRoute::kWgmma;
      widen += c.route == MmaDecodeRoute::kWiden;
      mma_sync += c.route == MmaDecodeRoute::kMmaSync;
    }
    // 64 tokens x 128 and x 256 rows; 128 tokens above M = 64; 256 above 128; four split choices each.
    const int tiles = 2 + (m > 64) + (m > 128);
    EXPECT_EQ(wgmma, 4 * tiles) << "M=" << m;
    EXPECT_EQ(widen, 1);
    EXPECT_EQ(mma_sync, 1);
  }
}

#if QLINEAR_WITH_CUDA

// What the route functions choose for these arguments: the route, then the wgmma plan or the mma.sync
// tile and split.
std::string chosen(const cuda::MmaDecodeArgs& a) {
  if (cuda::mma_takes_wgmma_route(a)) {
    const cuda::MmaWgmmaPlan p = cuda::mma_wgmma_plan(a);
    return "wgmma " + std::to_string(p.tokens) + "x" + std::to_string(p.rows) + " splits " +
           std::to_string(p.splits) + " grid " + std::to_string(p.grid);
  }
  if (cuda::mma_takes_widen_route(a)) return "widen";
  const cuda::MmaTileConfig t = cuda::mma_config_for(a);
  return "mma.sync " + std::to_string(8 * t.token_tiles) + "x" + std::to_string(64 * t.n16_per_warp) + " splits " +
         std::to_string(cuda::mma_decode_splits(a));
}

cuda::MmaDecodeArgs args_of(MmaCode code, int64_t n, int64_t k, int64_t m, const char* device) {
  cuda::MmaDecodeArgs a;
  a.layout.code = code;
  a.layout.scale = code == MmaCode::kE4M3 ? cuda::MmaScale::kRow : cuda::MmaScale::kMx32;
  a.layout.n = n;
  a.layout.k = k;
  a.m = m;
  a.device_name = device;
  return a;
}

// Each candidate the tuner times, checked in as an entry, is run by the route functions exactly as the
// forced variant that timed it: route, token tile, rows, splits and grid.
TEST(MmaDecodeTable, RouteFunctionsRunAnEntryAsTheTunerTimedIt) {
  for (const MmaCode code : {MmaCode::kE4M3, MmaCode::kE2M3, MmaCode::kE2M1}) {
    for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{{6144, 4096}, {8192, 28672}}) {
      for (const int64_t m : {17, 64, 100, 256}) {
        for (MmaDecodeTunedEntry c : cuda::mma_decode_candidates(m)) {
          c.device = kTestGpu;
          c.code = code;
          c.n = n;
          c.k = k;
          const ExtraEntries extra({c});
          const std::string what = std::to_string(n) + "x" + std::to_string(k) + " M=" + std::to_string(m) + " " +
                                   std::string(cuda::mma_code_name(code)) + " " + cuda::describe(c);
          const cuda::MmaDecodeArgs tuned = args_of(code, n, k, m, kTestGpu);
          ASSERT_NE(cuda::mma_tuned_choice(tuned), nullptr) << what;
          const std::string from_table = chosen(tuned);
          EXPECT_EQ(cuda::mma_route_description(tuned).rfind("tuned table (" + std::string(kTestGpu), 0), 0) << what;
          cuda::mma_decode_force(cuda::mma_decode_force_of(c));
          EXPECT_EQ(chosen(args_of(code, n, k, m, nullptr)), from_table) << what;
          EXPECT_EQ(cuda::mma_tuned_choice(tuned), nullptr) << what << ": a forced variant skips the table";
          EXPECT_EQ(chosen(tuned), from_table) << what;
          cuda::mma_decode_force({});
        }
      }
    }
  }
}

// Where no entry matches (another device, shape or M, no device name, a forced variant, promoted MX scales,
// a kRule entry) the route functions choose as the built-in rules do.
TEST(MmaDecodeTable, WithoutAMatchTheBuiltInRulesDecide) {
  const MmaDecodeTunedEntry wide{kTestGpu, MmaCode::kE2M1, 8192, 28672, 64, MmaDecodeRoute::kWgmma, 64, 256, 4};
  const ExtraEntries extra({wide, {kTestGpu, MmaCode::kE2M1, 8192, 28672, 128, MmaDecodeRoute::kRule}});
  for (const int64_t m : {1, 16, 17, 64, 65, 128, 129, 256, 1024}) {
    const std::string rule = chosen(args_of(MmaCode::kE2M1, 8192, 28672, m, nullptr));
    EXPECT_EQ(chosen(args_of(MmaCode::kE2M1, 8192, 28672, m, "NVIDIA H20")), rule) << m;
    EXPECT_EQ(chosen(args_of(MmaCode::kE2M1, 8192, 8192, m, kTestGpu)), rule) << m;
    EXPECT_EQ(chosen(args_of(MmaCode::kE4M3, 8192, 28672, m, kTestGpu)), rule) << m;
    if (m <= 16 || m > 64) {
      EXPECT_EQ(chosen(args_of(MmaCode::kE2M1, 8192, 28672, m, kTestGpu)), rule) << m;
    }
    cuda::MmaDecodeArgs promoted = args_of(MmaCode::kE2M1, 8192, 28672, m, kTestGpu);
    promoted.fold = false;
    cuda::MmaDecodeArgs promoted_rule = promoted;
    promoted_rule.device_name = nullptr;
    EXPECT_EQ(chosen(promoted), chosen(promoted_rule)) << m;
  }
  const cuda::MmaDecodeArgs at64 = args_of(MmaCode::kE2M1, 8192, 28672, 64, kTestGpu);
  EXPECT_EQ(chosen(at64).rfind("wgmma 64x256 splits ", 0), 0u) << chosen(at64);
  cuda::MmaDecodeForce f;
  f.wgmma_stages = 4;  // any forced field: the forced variant runs, with the built-in rules around it
  cuda::mma_decode_force(f);
  EXPECT_EQ(chosen(at64).rfind("wgmma 64x128 ", 0), 0u) << chosen(at64);
  cuda::mma_decode_force({});
}

TEST(MmaDecodeTable, ExplainSaysWhenTheTunedTableChose) {
  const cuda::MmaDecodeArgs a = args_of(MmaCode::kE4M3, 8192, 28672, 64, "NVIDIA H200");
  const std::string why = cuda::mma_route_description(a);
  const std::string want = "tuned table (NVIDIA H200, bucket M <= 64): swap-AB wgmma kernel: 64 tokens (wgmma N) x 256";
  EXPECT_EQ(why.rfind(want, 0), 0u) << why;
  EXPECT_EQ(cuda::mma_route_description(args_of(MmaCode::kE4M3, 8192, 28672, 65, "NVIDIA H200")).find("tuned"),
            std::string::npos);
  // The explain's M buckets end where the table's do.
  const ExtraEntries extra({{kTestGpu, MmaCode::kE4M3, 8192, 28672, 100, MmaDecodeRoute::kWiden}});
  const std::vector<int64_t> ends = cuda::mma_route_bucket_ends(args_of(MmaCode::kE4M3, 8192, 28672, 1, kTestGpu));
  EXPECT_NE(std::find(ends.begin(), ends.end(), 100), ends.end());
  EXPECT_TRUE(std::is_sorted(ends.begin(), ends.end()));
  const std::vector<int64_t> rule_ends = cuda::mma_route_bucket_ends(args_of(MmaCode::kE4M3, 8192, 28672, 1, nullptr));
  EXPECT_EQ(std::find(rule_ends.begin(), rule_ends.end(), 100), rule_ends.end());
}

// The shared-memory variant's plan (host code, no GPU): 128 tokens per block, 256 weight rows unless 128 are
// forced, the split-K wave rule on its units, no clusters or stream-K (the swap-AB kernel's options), and an
// explain line that names it.
TEST(MmaDecodeTable, SharedMemoryVariantPlansTokensAsWgmmaM) {
  cuda::MmaDecodeForce f;
  f.wgmma = 1;
  f.wgmma_smem_b = 1;
  {
    cuda::MmaDecodeForce ignored = f;  // the swap-AB kernel's schedules, not this variant's
    ignored.wgmma_cluster = 2;
    ignored.wgmma_stream_k = 1;
    const cuda_test::ForceScope force(ignored);
    const cuda::MmaDecodeArgs a = args_of(MmaCode::kE2M1, 8192, 28672, 1024, nullptr);
    const cuda::MmaWgmmaPlan p = cuda::mma_wgmma_plan(a);
    EXPECT_TRUE(p.smem_b);
    EXPECT_EQ(p.tokens, 128);
    EXPECT_EQ(p.rows, 256);
    EXPECT_EQ(p.n_blocks, 32);
    EXPECT_EQ(p.m_tiles, 8);
    EXPECT_EQ(p.cluster, 1);
    EXPECT_FALSE(p.stream_k);
    EXPECT_EQ(p.splits, 1);  // 256 units already fill 132 SMs
    EXPECT_EQ(p.units, 256);
    EXPECT_NE(cuda::mma_wgmma_description(a).find("shared-memory B"), std::string::npos);
  }
  // M = 256 on 70b.o: 2 token tiles x 32 row blocks leave SMs idle, so K splits in two; with 128 rows, 64
  // row blocks fill them unsplit.
  const cuda::MmaDecodeArgs o = args_of(MmaCode::kE4M3, 8192, 8192, 256, nullptr);
  {
    const cuda_test::ForceScope force(f);
    const cuda::MmaWgmmaPlan p = cuda::mma_wgmma_plan(o);
    EXPECT_EQ(p.splits, 2);
    EXPECT_EQ(p.units, 64 * p.splits);
  }
  f.wgmma_rows = 128;
  const cuda_test::ForceScope force(f);
  const cuda::MmaWgmmaPlan p = cuda::mma_wgmma_plan(o);
  EXPECT_EQ(p.rows, 128);
  EXPECT_EQ(p.n_blocks, 64);
  EXPECT_EQ(p.splits, 1);
  EXPECT_EQ(p.units, 128);
}

#endif  // QLINEAR_WITH_CUDA

}  // namespace
}  // namespace qlinear
