#include "qlinear/platform.hpp"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/threads.hpp"

namespace qlinear {

int cpu_threads() { return threads::max_threads(); }
void set_cpu_threads(int n) { threads::set_max_threads(n); }

std::string_view platform_kind_name(PlatformKind kind) {
  return kind == PlatformKind::kX86Cpu ? "x86_cpu" : "cuda";
}

std::string CpuFeatures::to_string() const {
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512vnni, "avx512_vnni");
  add(avx512bf16, "avx512_bf16");
  add(avx512vbmi, "avx512_vbmi");
  add(avx512fp16, "avx512_fp16");
  add(avx_vnni, "avx_vnni");
  add(amx_tile, "amx_tile");
  add(amx_int8, "amx_int8");
  add(amx_bf16, "amx_bf16");
  return s.empty() ? "scalar" : s;
}

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  // The OS must save the vector state (XCR0) for the ISA to be usable, not just present.
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  const bool ymm_ok = (xcr0 & 0x6) == 0x6;
  const bool zmm_ok = (xcr0 & 0xE6) == 0xE6;
  const bool amx_ok = (xcr0 & (3ull << 17)) == (3ull << 17);
  if (!ymm_ok) f.fma = f.f16c = false;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = ymm_ok && (b & (1u << 5));
    f.avx512f = zmm_ok && (b & (1u << 16));
    f.avx512dq = zmm_ok && (b & (1u << 17));
    f.avx512bw = zmm_ok && (b & (1u << 30));
    f.avx512vl = zmm_ok && (b & (1u << 31));
    f.avx512vnni = zmm_ok && (c & (1u << 11));
    f.avx512vbmi = zmm_ok && (c & (1u << 1));
    f.avx512fp16 = zmm_ok && (d & (1u << 23));
    f.amx_bf16 = amx_ok && (d & (1u << 22));
    f.amx_tile = amx_ok && (d & (1u << 24));
    f.amx_int8 = amx_ok && (d & (1u << 25));
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    f.avx_vnni = ymm_ok && (a & (1u << 4));
    f.avx512bf16 = zmm_ok && (a & (1u << 5));
  }
  return f;
}

const std::string& amx_tile_permission_refusal() {
  // ARCH_REQ_XCOMP_PERM (asm/prctl.h) for XFEATURE_XTILEDATA (state component 18): without it the first tile
  // instruction faults. The grant is per process, so every thread may use tiles after one request.
  static const std::string refusal = [] {
    const CpuFeatures f = detect_cpu_features();
    if (!f.amx_tile) return std::string("CPU (or the OS's XCR0) lacks AMX tiles");
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
      return std::string("the OS refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA failed)");
    }
    return std::string();
  }();
  return refusal;
}

namespace {
// QLINEAR_CPU_ISA masks features away so tests and benchmarks can run the lower ISA paths here.
CpuFeatures mask_features(CpuFeatures f) {
  const char* env = std::getenv("QLINEAR_CPU_ISA");
  if (env == nullptr) return f;
  const std::string isa(env);
  if (isa == "avx2" || isa == "scalar") {
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512vnni = f.avx512bf16 = f.avx512vbmi = f.avx512fp16 = false;
    f.amx_tile = f.amx_int8 = f.amx_bf16 = false;
  }
  if (isa == "avx512") f.amx_tile = f.amx_int8 = f.amx_bf16 = false;
  if (isa == "scalar") f.avx2 = f.fma = f.f16c = f.avx_vnni = false;
  return f;
}
}  // namespace

Platform Platform::host_cpu() {
  Platform p;
  p.kind = PlatformKind::kX86Cpu;
  p.cpu = mask_features(detect_cpu_features());
  p.num_threads = threads::max_threads();
  return p;
}

Platform Platform::synthetic_cpu(const CpuFeatures& features, int threads) {
  Platform p;
  p.kind = PlatformKind::kX86Cpu;
  p.cpu = features;
  p.num_threads = threads;
  return p;
}

Platform Platform::synthetic_cuda(int compute_capability) {
  Platform p;
  p.kind = PlatformKind::kCuda;
  p.cpu = detect_cpu_features();
  CudaDeviceInfo info;
  info.compute_capability = compute_capability;
  info.name = "synthetic sm_" + std::to_string(compute_capability);
  p.cuda = info;
  return p;
}

std::string Platform::describe() const {
  if (kind == PlatformKind::kCuda && cuda) {
    return "cuda device " + std::to_string(cuda->index) + " (" + cuda->name + ", sm_" +
           std::to_string(cuda->compute_capability) + ")";
  }
  return "x86 cpu (" + cpu.to_string() + "; " + std::to_string(num_threads) + " threads)";
}

}  // namespace qlinear
