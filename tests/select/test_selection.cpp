// Selection: golden choices and reasons over synthetic platforms and fake kernels, overrides through the
// API and the environment, and the all-reasons error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "qlinear/registry.hpp"
#include "qlinear/scheme.hpp"

namespace qlinear {
namespace {

// A kernel that needs AVX-512 VNNI (or sm90) and K % 64 == 0: enough to exercise every kind of refusal.
class FakeKernel final : public LinearKernel {
 public:
  FakeKernel(std::string name, Family family, bool needs_vnni, int min_cc)
      : name_(std::move(name)), family_(family), needs_vnni_(needs_vnni), min_cc_(min_cc) {}
  std::string_view name() const override { return name_; }
  Family family() const override { return family_; }
  std::string_view summary() const override { return "fake"; }
  Verdict is_supported(const Platform& p) const override {
    if (min_cc_ > 0) {
      if (p.kind != PlatformKind::kCuda) return Verdict::no("needs a CUDA device");
      if (p.cuda->compute_capability < min_cc_) {
        return Verdict::no("needs compute capability >= " + std::to_string(min_cc_) + ", device has " +
                           std::to_string(p.cuda->compute_capability));
      }
      return Verdict::yes();
    }
    if (p.kind != PlatformKind::kX86Cpu) return Verdict::no("runs on the x86 CPU only");
    if (needs_vnni_ && !p.cpu.avx512vnni) return Verdict::no("needs AVX-512 VNNI");
    return Verdict::yes();
  }
  Verdict can_implement(const LinearConfig& c) const override {
    if (c.k % 64 != 0) return Verdict::no("K=" + std::to_string(c.k) + " is not a multiple of 64");
    return Verdict::yes();
  }

 protected:
  Status process_impl(LinearLayer&) const override { return Status::ok(); }
  Status apply_impl(const LinearLayer&, const Activation&, const Tensor*, Tensor&) const override {
    return Status::ok();
  }

 private:
  std::string name_;
  Family family_;
  bool needs_vnni_;
  int min_cc_;
};

const FakeKernel kGpu("fake_sm90_int8", Family::kInt8ScaledMM, false, 90);
const FakeKernel kVnni("fake_avx512vnni_int8", Family::kInt8ScaledMM, true, 0);
const FakeKernel kAvx2("fake_avx2_int8", Family::kInt8ScaledMM, false, 0);
const FakeKernel kOtherFamily("fake_avx2_mxfp8", Family::kMxfp8, false, 0);
// Built on first use: registered kernels may live in other translation units, constructed after this one.
struct TestList {
  const LinearKernel* kernels[5];
  operator std::span<const LinearKernel* const>() const { return kernels; }
};
TestList list() { return {{&kGpu, &kVnni, &kAvx2, &kOtherFamily, find_kernel("reference_int8_scaled_mm")}}; }

LinearConfig int8_config(int64_t k = 4096) {
  return make_config(*find_scheme("w8a8-int8-dynamic"), 4096, k);
}

CpuFeatures avx512_vnni() {
  CpuFeatures f;
  f.avx2 = f.fma = f.avx512f = f.avx512bw = f.avx512vl = f.avx512vnni = true;
  return f;
}
CpuFeatures avx2_only() {
  CpuFeatures f;
  f.avx2 = f.fma = true;
  return f;
}

SelectOptions no_env() {
  SelectOptions o;
  o.read_environment = false;
  return o;
}

TEST(Selection, PicksFirstFittingKernelPerPlatform) {
  EXPECT_EQ(select_kernel_in(list(), int8_config(), Platform::synthetic_cpu(avx512_vnni()), no_env()).value()->name(),
            "fake_avx512vnni_int8");
  EXPECT_EQ(select_kernel_in(list(), int8_config(), Platform::synthetic_cpu(avx2_only()), no_env()).value()->name(),
            "fake_avx2_int8");
  EXPECT_EQ(select_kernel_in(list(), int8_config(), Platform::synthetic_cuda(90), no_env()).value()->name(),
            "fake_sm90_int8");
  // sm80: the sm90 kernel declines, the CPU kernels decline, the reference takes it.
  EXPECT_EQ(select_kernel_in(list(), int8_config(), Platform::synthetic_cuda(80), no_env()).value()->name(),
            "reference_int8_scaled_mm");
}

TEST(Selection, ExplainGivesEveryCandidateOfTheFamilyWithItsReason) {
  const Selection sel = explain_selection_in(list(), int8_config(), Platform::synthetic_cuda(80), no_env());
  ASSERT_EQ(sel.candidates.size(), 4u);  // the MXFP8 kernel is not a candidate for an INT8 layer
  EXPECT_EQ(sel.candidates[0].reason, "not supported here: needs compute capability >= 90, device has 80");
  EXPECT_EQ(sel.candidates[1].reason, "not supported here: runs on the x86 CPU only");
  EXPECT_TRUE(sel.candidates[3].chosen);
  EXPECT_NE(sel.explain().find("fake_sm90_int8"), std::string::npos);
}

TEST(Selection, LowerPriorityKernelsThatFitSaySo) {
  const Selection sel = explain_selection_in(list(), int8_config(), Platform::synthetic_cpu(avx512_vnni()), no_env());
  EXPECT_TRUE(sel.candidates[1].chosen);
  EXPECT_EQ(sel.candidates[2].reason, "lower priority than fake_avx512vnni_int8");
}

TEST(Selection, CanImplementReasonReachesTheUser) {
  const Selection sel =
      explain_selection_in(list(), int8_config(4000), Platform::synthetic_cpu(avx512_vnni()), no_env());
  EXPECT_EQ(sel.candidates[1].reason, "cannot implement: K=4000 is not a multiple of 64");
  EXPECT_EQ(sel.kernel->name(), "reference_int8_scaled_mm");
}

TEST(Selection, DisabledKernelsAreSkippedWithReason) {
  SelectOptions o = no_env();
  o.disabled = {"fake_avx512vnni_int8"};
  const Selection sel = explain_selection_in(list(), int8_config(), Platform::synthetic_cpu(avx512_vnni()), o);
  EXPECT_EQ(sel.kernel->name(), "fake_avx2_int8");
  EXPECT_NE(sel.candidates[1].reason.find("disabled"), std::string::npos);
}

TEST(Selection, ForcedKernelWinsOrFailsWithItsReason) {
  SelectOptions o = no_env();
  o.force = "fake_avx2_int8";
  EXPECT_EQ(select_kernel_in(list(), int8_config(), Platform::synthetic_cpu(avx512_vnni()), o).value()->name(),
            "fake_avx2_int8");
  o.force = "fake_avx512vnni_int8";
  auto r = select_kernel_in(list(), int8_config(), Platform::synthetic_cpu(avx2_only()), o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("forced kernel: fake_avx512vnni_int8"), std::string::npos);
  EXPECT_NE(r.message().find("needs AVX-512 VNNI"), std::string::npos);
  // Forcing an unknown name is an error listing the known kernels, never a silent fallback.
  o.force = "fake_typo";
  r = select_kernel_in(list(), int8_config(), Platform::synthetic_cpu(avx2_only()), o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("unknown kernel 'fake_typo'"), std::string::npos);
}

TEST(Selection, NoKernelErrorListsEveryCandidateAndReason) {
  SelectOptions o = no_env();
  o.disabled = {"reference_int8_scaled_mm"};
  auto r = select_kernel_in(list(), int8_config(4000), Platform::synthetic_cuda(80), o);
  ASSERT_FALSE(r);
  for (const char* part : {"no kernel can implement int8_scaled_mm N=4096 K=4000", "fake_sm90_int8",
                           "needs compute capability >= 90", "fake_avx2_int8", "runs on the x86 CPU only",
                           "reference_int8_scaled_mm", "disabled"}) {
    EXPECT_NE(r.message().find(part), std::string::npos) << part << "\n" << r.message();
  }
}

TEST(Selection, InvalidConfigIsRefusedBeforeAnyKernel) {
  LinearConfig c = make_config(*find_scheme("w8a8-mxfp8"), 256, 100);
  auto r = select_kernel(c, Platform::host_cpu(), no_env());
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("K=100 is not a multiple of 32 (MX block)"), std::string::npos) << r.message();
}

TEST(Selection, EnvironmentOverrides) {
  const LinearConfig c = make_config(*find_scheme("w8a8-mxfp8"), 256, 256);
  // Every kernel of the family disabled: nothing is left, and the error says why for each.
  std::string all;
  for (const LinearKernel* k : priority_list(Platform::host_cpu())) {
    if (k->family() == Family::kMxfp8) all += (all.empty() ? "" : ",") + std::string(k->name());
  }
  ::setenv("QLINEAR_DISABLED_KERNELS", all.c_str(), 1);
  auto r = select_kernel(c, Platform::host_cpu());
  ::unsetenv("QLINEAR_DISABLED_KERNELS");
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("disabled by QLINEAR_DISABLED_KERNELS"), std::string::npos);

  ::setenv("QLINEAR_DISABLED_KERNELS", "no_such_kernel", 1);
  r = select_kernel(c, Platform::host_cpu());
  ::unsetenv("QLINEAR_DISABLED_KERNELS");
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("QLINEAR_DISABLED_KERNELS: unknown kernel 'no_such_kernel'"), std::string::npos);

  ::setenv("QLINEAR_FORCE_KERNEL", "reference_mxfp8", 1);
  r = select_kernel(c, Platform::host_cpu());
  ::unsetenv("QLINEAR_FORCE_KERNEL");
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r.value()->name(), "reference_mxfp8");
}

TEST(Selection, EveryFamilyHasAKernelOnEveryPlatform) {
  for (const Platform& p : {Platform::host_cpu(), Platform::synthetic_cpu(avx2_only()), Platform::synthetic_cuda(80),
                            Platform::synthetic_cuda(90)}) {
    for (const Scheme& s : all_schemes()) {
      auto r = select_kernel(make_config(s, 512, 1024), p, no_env());
      EXPECT_TRUE(r) << s.name << " on " << p.describe() << ": " << r.message();
    }
  }
}

TEST(Selection, KernelNamesAreUniqueAndEveryKernelIsListed) {
  std::set<std::string_view> names;
  for (const LinearKernel* k : all_kernels()) EXPECT_TRUE(names.insert(k->name()).second) << k->name();
  // Reference kernels come last in their family on every platform.
  for (const Platform& p : {Platform::host_cpu(), Platform::synthetic_cuda(90)}) {
    for (int f = 0; f < kNumFamilies; ++f) {
      const LinearKernel* last = nullptr;
      for (const LinearKernel* k : priority_list(p)) {
        if (static_cast<int>(k->family()) == f) last = k;
      }
      ASSERT_NE(last, nullptr);
      EXPECT_EQ(last->name().rfind("reference_", 0), 0u) << last->name();
    }
  }
}

}  // namespace
}  // namespace qlinear

namespace qlinear {
namespace {

// Golden selections with the real priority lists on synthetic platforms: what a layer gets where.
TEST(GoldenSelection, RealKernelsOnSyntheticPlatforms) {
  CpuFeatures zen4;
  zen4.avx2 = zen4.fma = zen4.f16c = true;
  zen4.avx512f = zen4.avx512bw = zen4.avx512vl = zen4.avx512dq = zen4.avx512vnni = zen4.avx512bf16 = true;
  zen4.avx512vbmi = true;
  CpuFeatures zen4_no_vbmi = zen4;  // AVX-512 BF16 without VBMI: the FP engine's decoders need vpermb
  zen4_no_vbmi.avx512vbmi = false;
  CpuFeatures avx2;
  avx2.avx2 = avx2.fma = avx2.f16c = true;
  CpuFeatures spr = zen4;  // with AMX tiles
  spr.amx_tile = spr.amx_int8 = spr.amx_bf16 = true;
  struct Case {
    Platform platform;
    const char* scheme;
    const char* kernel;
  };
  const Case cases[] = {
      {Platform::synthetic_cpu(zen4), "w8a8-int8-dynamic", "x86_avx512vnni_int8"},
      {Platform::synthetic_cpu(zen4), "w8a8-int8-static-asym", "x86_avx512vnni_int8"},
      {Platform::synthetic_cpu(zen4), "w8a16-fp8", "x86_avx512bf16_fp8_w8a16"},
      {Platform::synthetic_cpu(zen4), "w8a16-mxfp8", "x86_avx512bf16_mxfp8_w8a16"},
      {Platform::synthetic_cpu(zen4), "w4a16-mxfp4", "x86_avx512bf16_mxfp4_w4a16"},
      {Platform::synthetic_cpu(zen4), "w8a8-mxfp8", "x86_avx512bf16_mxfp8"},
      {Platform::synthetic_cpu(zen4), "w4a4-mxfp4", "x86_avx512bf16_mxfp4"},
      {Platform::synthetic_cpu(zen4), "w4a4-nvfp4", "x86_avx512bf16_nvfp4"},
      {Platform::synthetic_cpu(zen4), "w6a16-mxfp6-e2m3", "x86_avx512bf16_mxfp6"},
      {Platform::synthetic_cpu(zen4), "w8a8-fp8-tensor", "x86_avx512bf16_fp8_scaled_mm"},
      {Platform::synthetic_cpu(zen4), "w8a8-fp8-block", "x86_avx512bf16_fp8_block_scaled"},
      {Platform::synthetic_cpu(spr), "w8a8-fp8-block", "x86_avx512bf16_fp8_block_scaled"},  // no AMX variant
      {Platform::synthetic_cpu(zen4_no_vbmi), "w8a8-fp8-block", "x86_avx2_fp8_block_scaled"},
      {Platform::synthetic_cpu(avx2), "w8a8-fp8-block", "x86_avx2_fp8_block_scaled"},
      {Platform::synthetic_cpu(zen4_no_vbmi), "w8a8-mxfp8", "x86_avx2_mxfp8"},
      {Platform::synthetic_cpu(avx2), "w4a4-nvfp4", "x86_avx2_nvfp4"},
      {Platform::synthetic_cpu(avx2), "w8a8-int8-dynamic", "x86_avx2_int8"},
      {Platform::synthetic_cpu(avx2), "w8a16-fp8", "x86_avx2_fp8_weight_only"},
      {Platform::synthetic_cpu(avx2), "w6a16-mxfp6-e2m3", "x86_avx2_mxfp6"},
      {Platform::synthetic_cpu(CpuFeatures{}), "w6a16-mxfp6-e2m3", "reference_mxfp6"},
      {Platform::synthetic_cpu(CpuFeatures{}), "w8a8-int8-dynamic", "reference_int8_scaled_mm"},
      {Platform::synthetic_cuda(90), "w8a8-fp8-tensor", "sm90_fp8_scaled_mm"},
      {Platform::synthetic_cuda(90), "w8a8-fp8-block", "sm90_fp8_block_scaled"},
      {Platform::synthetic_cuda(90), "w8a16-mxfp8", "sm90_mma_decode_mxfp8"},
      {Platform::synthetic_cuda(90), "w6a16-mxfp6-e3m2", "sm90_mma_decode_mxfp6"},
      {Platform::synthetic_cuda(90), "w8a8-int8-dynamic", "sm90_int8_scaled_mm"},
      {Platform::synthetic_cuda(90), "w8a16-fp8", "sm90_mma_decode_fp8_weight_only"},
      {Platform::synthetic_cuda(80), "w8a8-fp8-tensor", "reference_fp8_scaled_mm"},
      {Platform::synthetic_cuda(80), "w8a16-mxfp8", "reference_mxfp8"},
  };
  SelectOptions o;
  o.read_environment = false;
  for (const Case& c : cases) {
    if (std::string(c.kernel).rfind("sm90", 0) == 0 && !built_with_cuda()) continue;  // not registered
    auto r = select_kernel(make_config(*find_scheme(c.scheme), 4096, 4096), c.platform, o);
    ASSERT_TRUE(r) << c.scheme << " on " << c.platform.describe() << ": " << r.message();
    EXPECT_EQ(r.value()->name(), c.kernel) << c.scheme << " on " << c.platform.describe() << "\n"
                                           << explain_selection(make_config(*find_scheme(c.scheme), 4096, 4096),
                                                                c.platform, o)
                                                  .explain();
  }
}

}  // namespace
}  // namespace qlinear
