// The processed-weight cache: export/import round trips for every kernel that supports them, the cache's
// hits, and every way an entry can be wrong (truncated, flipped bytes, another key, changed checkpoint), each
// of which must fall back to processing with a reason and the same output.
#include <omp.h>

#include <fstream>

#include "cache/cache_test_util.hpp"
#include "qlinear/safetensors.hpp"
#include "qlinear/weight_cache.hpp"

namespace qlinear {
namespace {

using cache_test::same_bytes;
using cache_test::scheme_layer;
using cache_test::ScratchDir;

const Platform& host() {
  static const Platform p = Platform::host_cpu();
  return p;
}

Tensor run_layer(const LinearKernel& k, const LinearLayer& layer, uint64_t seed) {
  const Tensor x = random_normal(layer.config.input_dtype, {5, layer.config.k}, seed, 1.0);
  const Tensor bias = random_normal(DType::kF32, {layer.config.n}, seed + 1, 0.5);
  auto y = k.apply(layer, Activation::dense(x), &bias);
  EXPECT_TRUE(y) << y.message();
  return y ? *y : Tensor();
}

void expect_same_export(const ProcessedWeights& a, const ProcessedWeights& b) {
  EXPECT_EQ(a.layout_version, b.layout_version);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    EXPECT_TRUE(same_bytes(a.tensors[i].second, b.tensors[i].second)) << a.tensors[i].first;
  }
}

// Every kernel of the CPU priority list that declares support, on every scheme it implements (and a fused
// layer with per-shard scales): process -> export -> import into a fresh copy gives the same state (exported
// again byte for byte, the same row-major weight) and, where the host runs the kernel, the same output.
TEST(ProcessedWeights, RoundTripEveryKernelEveryScheme) {
  int round_trips = 0, applied = 0;
  for (const Scheme& s : all_schemes()) {
    for (bool fused : {false, true}) {
      const LinearLayer base = scheme_layer(s, 11, fused ? std::vector<int64_t>{16, 8, 16} : std::vector<int64_t>{});
      for (const LinearKernel* k : priority_list(host())) {
        if (k->family() != s.family || !k->can_implement(base.config)) continue;
        SCOPED_TRACE(std::string(k->name()) + " " + std::string(s.name) + (fused ? " fused" : ""));
        ASSERT_TRUE(k->supports_pre_processed_weights()) << "every CPU kernel exports its state";
        LinearLayer processed = base, imported = base;
        ASSERT_TRUE(k->process_weights_after_loading(processed));
        auto w = k->export_processed(processed);
        ASSERT_TRUE(w) << w.message();
        Status is = k->import_processed(imported, *w);
        ASSERT_TRUE(is) << is.message();
        EXPECT_EQ(imported.processed_by, k->name());
        auto w2 = k->export_processed(imported);
        ASSERT_TRUE(w2) << w2.message();
        expect_same_export(*w, *w2);
        auto rw1 = k->row_major_weight(processed), rw2 = k->row_major_weight(imported);
        ASSERT_TRUE(rw1 && rw2);
        EXPECT_TRUE(same_bytes(*rw1, *rw2));
        ++round_trips;
        if (k->is_supported(host())) {
          EXPECT_TRUE(same_bytes(run_layer(*k, processed, 7), run_layer(*k, imported, 7)));
          ++applied;
        }
      }
    }
  }
  EXPECT_GE(round_trips, 40);  // 13 schemes x 2 layouts x (a fast kernel or more + the reference)
  EXPECT_GE(applied, 26);
}

TEST(ProcessedWeights, ImportRefusesWrongLayoutShapeAndDtypeAndLeavesTheLayerUnprocessed) {
  const Scheme& s = *find_scheme("w8a8-int8-dynamic");
  const LinearLayer base = scheme_layer(s, 3);
  const LinearKernel& k = *find_kernel("x86_avx2_int8");
  LinearLayer processed = base;
  ASSERT_TRUE(k.process_weights_after_loading(processed));
  const ProcessedWeights good = *k.export_processed(processed);

  auto expect_refused = [&](ProcessedWeights w, const std::string& needle) {
    LinearLayer l = base;
    Status st = k.import_processed(l, w);
    ASSERT_FALSE(st);
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
    EXPECT_TRUE(l.processed_by.empty());
    EXPECT_TRUE(l.has("weight"));
    EXPECT_EQ(l.kernel_state, nullptr);
  };
  ProcessedWeights w = good;
  w.layout_version = 2;
  expect_refused(w, "layout version 2");
  w = good;
  for (auto& [n, t] : w.tensors) {
    if (n == "packed") t = Tensor::zeros(DType::kI8, {t.numel() - 1});
  }
  expect_refused(w, "processed tensor 'packed' is i8[");
  w = good;
  for (auto& [n, t] : w.tensors) {
    if (n == "w_scale") t = Tensor::zeros(DType::kI32, t.shape());
  }
  expect_refused(w, "processed tensor 'w_scale'");
  w = good;
  std::erase_if(w.tensors, [](const auto& p) { return p.first == "colsum"; });
  expect_refused(w, "no tensor 'colsum'");
  // A state made for another shape (meta) is refused even when every tensor would fit.
  LinearLayer other = x86_test::make_layer(s, {5, 48, 256}, 3);
  Status st = k.import_processed(other, good);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("processed field n is 40, the layer implies 48"), std::string::npos) << st.message();
}

TEST(ProcessedWeights, KernelsWithoutSupportRefuseExport) {
  struct NoCache final : LinearKernel {
    std::string_view name() const override { return "test_no_cache"; }
    Family family() const override { return Family::kFp8ScaledMM; }
    std::string_view summary() const override { return ""; }
    Verdict is_supported(const Platform&) const override { return Verdict::yes(); }
    Verdict can_implement(const LinearConfig&) const override { return Verdict::yes(); }

   protected:
    Status process_impl(LinearLayer&) const override { return Status::ok(); }
    Status apply_impl(const LinearLayer&, const Activation&, const Tensor*, Tensor&) const override {
      return Status::ok();
    }
  } k;
  LinearLayer l = scheme_layer(*find_scheme("w8a8-fp8-tensor"), 1);
  ASSERT_TRUE(k.process_weights_after_loading(l));
  auto w = k.export_processed(l);
  ASSERT_FALSE(w);
  EXPECT_NE(w.message().find("does not support pre-processed weights"), std::string::npos) << w.message();
  ScratchDir dir("nosupport");
  LinearLayer l2 = scheme_layer(*find_scheme("w8a8-fp8-tensor"), 1);
  auto out = WeightCache(dir.str()).process(l2, k, host());
  ASSERT_TRUE(out) << out.message();
  EXPECT_FALSE(out->hit);
  EXPECT_FALSE(out->stored);
  EXPECT_NE(out->miss_reason.find("does not support pre-processed weights"), std::string::npos);
}

TEST(ContentHash, DetectsOneBitAndIgnoresThreadCount) {
  Tensor t = random_normal(DType::kF32, {3 << 20}, 5);  // 12 MiB: several parallel chunks
  const uint64_t h = content_hash(t.raw(), t.nbytes());
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  EXPECT_EQ(content_hash(t.raw(), t.nbytes()), h);
  omp_set_num_threads(threads);
  for (int64_t byte : {int64_t{0}, int64_t{4 << 20}, t.nbytes() - 1}) {
    t.data<uint8_t>()[byte] ^= 0x10;
    EXPECT_NE(content_hash(t.raw(), t.nbytes()), h) << byte;
    t.data<uint8_t>()[byte] ^= 0x10;
  }
  EXPECT_NE(content_hash(t.raw(), 100), content_hash(t.raw(), 101));
  EXPECT_EQ(hash_hex(0x1234), "0000000000001234");
}

// ---- The cache -------------------------------------------------------------------------------------------

struct CacheFixture : ::testing::Test {
  ScratchDir dir{"fixture"};
  WeightCache cache{dir.str()};
  const Scheme& scheme = *find_scheme("w8a8-int8-dynamic");
  const LinearKernel& kernel = *find_kernel("x86_avx2_int8");
  LinearLayer base = scheme_layer(scheme, 21);
  Tensor want;  // the output of the layer processed without the cache

  void SetUp() override {
    if (!kernel.is_supported(host())) GTEST_SKIP() << "host lacks AVX2";
    LinearLayer l = base;
    ASSERT_TRUE(kernel.process_weights_after_loading(l));
    want = run_layer(kernel, l, 9);
  }

  // Runs the layer through the cache; checks that the output is the uncached one whatever happened.
  WeightCacheOutcome through_cache(LinearLayer l, const Platform& p, std::string_view scheme_name = "s") {
    auto out = cache.process(l, kernel, p, scheme_name);
    EXPECT_TRUE(out) << out.message();
    if (!out) return {};
    EXPECT_TRUE(same_bytes(run_layer(kernel, l, 9), want));
    return *out;
  }
  WeightCacheOutcome through_cache(LinearLayer l) { return through_cache(std::move(l), host()); }

  // A miss whose reason contains `needle`, after which the entry is rewritten and the next load hits.
  // (The reload uses the same platform and scheme as the load that missed.)
  void expect_miss_then_hit(const WeightCacheOutcome& o, const std::string& needle, const Platform& p = host(),
                            std::string_view scheme_name = "s") {
    EXPECT_FALSE(o.hit);
    EXPECT_NE(o.miss_reason.find(needle), std::string::npos) << o.miss_reason;
    EXPECT_TRUE(o.stored) << o.store_error;
    EXPECT_TRUE(through_cache(base, p, scheme_name).hit);
  }

  std::string path() const { return cache.entry_path(base); }
  void flip_byte(uint64_t offset) {
    std::fstream f(path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char c;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x01);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&c, 1);
  }
};

TEST_F(CacheFixture, FirstLoadStoresSecondHits) {
  const WeightCacheOutcome first = through_cache(base);
  EXPECT_FALSE(first.hit);
  EXPECT_NE(first.miss_reason.find("no entry"), std::string::npos) << first.miss_reason;
  EXPECT_TRUE(first.stored) << first.store_error;
  EXPECT_TRUE(std::filesystem::exists(path()));
  const WeightCacheOutcome second = through_cache(base);
  EXPECT_TRUE(second.hit) << second.miss_reason;
  EXPECT_EQ(second.process_ms, 0.0);
  EXPECT_FALSE(second.stored);
}

TEST_F(CacheFixture, TruncatedEntryFallsBack) {
  through_cache(base);
  const auto size = std::filesystem::file_size(path());
  for (uint64_t keep : {size - 1, size / 2, uint64_t{5}, uint64_t{0}}) {
    SCOPED_TRACE(keep);
    std::filesystem::resize_file(path(), keep);
    expect_miss_then_hit(through_cache(base), "unusable");
  }
}

TEST_F(CacheFixture, FlippedPayloadByteFallsBack) {
  through_cache(base);
  auto f = SafetensorsFile::open(path());
  ASSERT_TRUE(f);
  // One byte in the middle of each payload tensor (the names copied: f is reopened inside the loop).
  const std::vector<std::string> names = f->names();
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const SafetensorsEntry e = *f->entry(name);
    flip_byte(f->data_offset() + (e.begin + e.end) / 2);
    expect_miss_then_hit(through_cache(base), "checksum mismatch");
    f = SafetensorsFile::open(path());
    ASSERT_TRUE(f);
  }
}

TEST_F(CacheFixture, FlippedHeaderByteFallsBack) {
  through_cache(base);
  auto f = SafetensorsFile::open(path());
  ASSERT_TRUE(f);
  // Every 11th byte of the JSON header: each flip breaks the JSON, a key, a checksum or a tensor entry.
  int checked = 0;
  for (uint64_t off = 8; off < f->data_offset(); off += 11) {
    std::ifstream in(path(), std::ios::binary);
    in.seekg(static_cast<std::streamoff>(off));
    const char c = static_cast<char>(in.get());
    if (c == ' ') continue;  // trailing padding: '!' is not JSON either, but keep the cases meaningful
    flip_byte(off);
    const WeightCacheOutcome o = through_cache(base);
    EXPECT_FALSE(o.hit) << "flipped header byte " << off << " ('" << c << "') went unnoticed";
    EXPECT_FALSE(o.miss_reason.empty());
    ASSERT_TRUE(o.stored);
    ++checked;
  }
  EXPECT_GT(checked, 60);
}

TEST_F(CacheFixture, ChangedCheckpointContentFallsBack) {
  through_cache(base);
  LinearLayer changed = base;
  Tensor w = changed.params.at("weight").clone();
  w.data<int8_t>()[77] = static_cast<int8_t>(w.data<int8_t>()[77] + 1);
  changed.params["weight"] = w;
  auto o = cache.process(changed, kernel, host(), "s");
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->hit);
  EXPECT_NE(o->miss_reason.find("key field checkpoint_hash differs"), std::string::npos) << o->miss_reason;
  // A changed scale as well (a non-weight tensor).
  LinearLayer rescaled = base;
  Tensor ws = rescaled.params.at("weight_scale").clone();
  ws.data<float>()[0] *= 2;
  rescaled.params["weight_scale"] = ws;
  o = cache.process(rescaled, kernel, host(), "s");
  ASSERT_TRUE(o);
  EXPECT_NE(o->miss_reason.find("checkpoint_hash"), std::string::npos) << o->miss_reason;
}

TEST_F(CacheFixture, OtherKernelSchemeRankPlatformOrVersionMisses) {
  through_cache(base);
  // Another kernel for the same layer.
  {
    LinearLayer l = base;
    const LinearKernel& ref = *find_kernel("reference_int8_scaled_mm");
    auto o = cache.process(l, ref, host(), "s");
    ASSERT_TRUE(o);
    EXPECT_FALSE(o->hit);
    EXPECT_NE(o->miss_reason.find("key field kernel differs: the entry has 'x86_avx2_int8', this load needs "
                                  "'reference_int8_scaled_mm'"),
              std::string::npos)
        << o->miss_reason;
    through_cache(base);  // back to the kernel's entry
  }
  // Another scheme name.
  expect_miss_then_hit(through_cache(base, host(), "other-scheme"), "key field scheme differs", host(), "other-scheme");
  through_cache(base);  // back to this scheme's entry
  // Another platform on which the same kernel runs.
  CpuFeatures more = host().cpu;
  more.avx512f = !more.avx512f;
  const Platform other = Platform::synthetic_cpu(more);
  expect_miss_then_hit(through_cache(base, other), "key field platform_capability differs", other);
  through_cache(base);  // back to this host's entry
  // An entry of rank 0 found under rank 1's name (a copied or misnamed file).
  {
    LinearLayer r1 = base;
    r1.tp_rank = 1;
    r1.tp_size = 2;
    std::filesystem::copy_file(path(), cache.entry_path(r1));
    auto o = cache.process(r1, kernel, host(), "s");
    ASSERT_TRUE(o);
    EXPECT_NE(o->miss_reason.find("key field tp_rank differs"), std::string::npos) << o->miss_reason;
  }
  // Entries written by another qlinear version, cache format or kernel layout version.
  for (const auto& [field, value, needle] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"qlinear_version", "0.0.1", "key field qlinear_version differs"},
           {"layout_version", "0", "key field layout_version differs"},
           {"format_version", "2", "cache format version '2'"}}) {
    SCOPED_TRACE(field);
    LinearLayer l = base;
    ASSERT_TRUE(kernel.process_weights_after_loading(l));
    WeightCacheKey key = weight_cache_key(base, kernel, host(), "s");
    for (auto& [k, v] : key.fields) {
      if (k == field) v = value;
    }
    ASSERT_TRUE(cache.store(l, kernel, key));
    expect_miss_then_hit(through_cache(base), needle);
  }
}

TEST_F(CacheFixture, UnwritableDirectoryProcessesAnyway) {
  ScratchDir parent("ro");
  const std::string file = (parent.path / "not_a_dir").string();
  std::ofstream(file) << "x";
  LinearLayer l = base;
  auto o = WeightCache(file).process(l, kernel, host(), "s");
  ASSERT_TRUE(o) << o.message();
  EXPECT_FALSE(o->stored);
  EXPECT_FALSE(o->store_error.empty());
  EXPECT_TRUE(same_bytes(run_layer(kernel, l, 9), want));
}

TEST_F(CacheFixture, ListVerifyAndClear) {
  through_cache(base);
  LinearLayer second = scheme_layer(scheme, 22);
  second.name = "model.layers.1.other";
  ASSERT_TRUE(cache.process(second, kernel, host(), "s"));
  std::ofstream(dir.path / "unrelated.txt") << "keep me";
  auto list = list_weight_cache(dir.str(), true);
  ASSERT_TRUE(list) << list.message();
  ASSERT_EQ(list->size(), 2u);
  for (const WeightCacheEntryInfo& e : *list) {
    EXPECT_TRUE(e.ok) << e.problem;
    EXPECT_EQ(e.key.at("kernel"), "x86_avx2_int8");
    EXPECT_GT(e.payload_bytes, uint64_t{40 * 256});
  }
  // Corrupt one payload byte: verify names the entry and the tensor; a plain listing does not read payloads.
  auto f = SafetensorsFile::open(path());
  const SafetensorsEntry e = *f->entry("packed");
  flip_byte(f->data_offset() + e.begin + 3);
  list = list_weight_cache(dir.str(), true);
  ASSERT_TRUE(list);
  int bad = 0;
  for (const WeightCacheEntryInfo& i : *list) {
    if (!i.ok) {
      ++bad;
      EXPECT_EQ(i.path, path());
      EXPECT_NE(i.problem.find("'packed' checksum mismatch"), std::string::npos) << i.problem;
    }
  }
  EXPECT_EQ(bad, 1);
  auto removed = clear_weight_cache(dir.str());
  ASSERT_TRUE(removed) << removed.message();
  EXPECT_EQ(*removed, 2);
  EXPECT_TRUE(std::filesystem::exists(dir.path / "unrelated.txt"));
  EXPECT_EQ(list_weight_cache(dir.str(), false)->size(), 0u);
  EXPECT_FALSE(list_weight_cache((dir.path / "missing").string(), false));
}

// Every supporting kernel through the cache: a miss that stores, then a hit with the same output.
TEST(WeightCache, EveryHostKernelHitsWithIdenticalOutput) {
  ScratchDir dir("every");
  WeightCache cache(dir.str());
  int hits = 0;
  for (const Scheme& s : all_schemes()) {
    const LinearLayer base = scheme_layer(s, 31);
    for (const LinearKernel* k : cache_test::host_kernels_for(base.config, host())) {
      SCOPED_TRACE(std::string(k->name()) + " " + std::string(s.name));
      LinearLayer direct = base, first = base, second = base;
      ASSERT_TRUE(k->process_weights_after_loading(direct));
      auto o1 = cache.process(first, *k, host(), s.name);
      auto o2 = cache.process(second, *k, host(), s.name);
      ASSERT_TRUE(o1 && o2);
      EXPECT_FALSE(o1->hit);
      EXPECT_TRUE(o1->stored) << o1->store_error;
      EXPECT_TRUE(o2->hit) << o2->miss_reason;
      const Tensor want = run_layer(*k, direct, 4);
      EXPECT_TRUE(same_bytes(run_layer(*k, first, 4), want));
      EXPECT_TRUE(same_bytes(run_layer(*k, second, 4), want));
      hits += o2->hit ? 1 : 0;
    }
  }
  EXPECT_GE(hits, 26);  // 13 schemes, a fast kernel and the reference each on an AVX2 host
}

}  // namespace
}  // namespace qlinear
