#pragma once
// What this machine can run: x86 ISA features from CPUID and, when qlinear is built with CUDA, the device
// and its compute capability. Kernels answer is_supported(Platform) from it; tests build synthetic ones.
#include <cstdint>
#include <optional>
#include <string>

#include "qlinear/status.hpp"

namespace qlinear {

enum class PlatformKind : uint8_t { kX86Cpu, kCuda };
std::string_view platform_kind_name(PlatformKind kind);  // "x86_cpu", "cuda"

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx512vbmi = false;
  bool avx512fp16 = false;
  bool avx_vnni = false;
  bool amx_tile = false;
  bool amx_int8 = false;
  bool amx_bf16 = false;
  std::string to_string() const;  // "avx2 fma f16c avx512f ..."
};

struct CudaDeviceInfo {
  int index = 0;
  int compute_capability = 0;  // major * 10 + minor (90 for Hopper)
  std::string name;
  int sm_count = 0;
  int64_t memory_bytes = 0;
};

struct Platform {
  PlatformKind kind = PlatformKind::kX86Cpu;
  CpuFeatures cpu;
  std::optional<CudaDeviceInfo> cuda;
  int num_threads = 1;  // threads CPU kernels may use

  std::string describe() const;

  // This machine's CPU (CPUID), honouring QLINEAR_CPU_ISA=avx2|avx512|scalar to mask features away
  // (for testing the lower ISA paths on a machine that has the higher ones).
  static Platform host_cpu();
  // CUDA device `index`; an error when qlinear is built without CUDA or no such device is present.
  static Result<Platform> cuda_device(int index = 0);
  // Synthetic platforms for tests and `qlinear kernels --platform`.
  static Platform synthetic_cpu(const CpuFeatures& features, int threads = 1);
  static Platform synthetic_cuda(int compute_capability);
};

// The most threads one CPU kernel call uses (a call with little work uses fewer, down to the calling thread
// alone): set_cpu_threads(n) for n > 0, else QLINEAR_NUM_THREADS, else OMP_NUM_THREADS, else the CPUs this
// process may use (its affinity mask, lowered by a cgroup CPU quota). set_cpu_threads(0) restores that.
int cpu_threads();
void set_cpu_threads(int n);

// CPUID of the running machine, unmasked.
CpuFeatures detect_cpu_features();
// Linux keeps the AMX tile data state (XTILEDATA) off until a process asks for it: asks the OS once
// (arch_prctl ARCH_REQ_XCOMP_PERM) and remembers the answer. Empty when granted, else why not.
const std::string& amx_tile_permission_refusal();
// True when qlinear was compiled with its CUDA backend.
bool built_with_cuda();

}  // namespace qlinear
