#include "cli/platform_option.hpp"

#include <charconv>

namespace qlinear::cli {

Result<Platform> parse_platform(const std::string& text) {
  if (text == "cpu") return Platform::host_cpu();
  if (text == "cuda") return Platform::cuda_device(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string idx = text.substr(5);
    if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos) {
      return Status::error("--platform " + text + ": expected cuda:N with N a device index");
    }
    int index = 0;
    auto [ptr, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), index);
    if (ec != std::errc() || ptr != idx.data() + idx.size()) {
      return Status::error("--platform " + text + ": device index out of range");
    }
    return Platform::cuda_device(index);
  }
  if (text.rfind("sm", 0) == 0 && text.size() >= 4 && text.find_first_not_of("0123456789", 2) == std::string::npos) {
    int cc = 0;
    const std::string digits = text.substr(2);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), cc);
    if (ec != std::errc() || ptr != digits.data() + digits.size() || cc > 1000) {
      return Status::error("--platform " + text + ": expected smNN with a compute capability like 80 or 90");
    }
    return Platform::synthetic_cuda(cc);
  }
  CpuFeatures f = detect_cpu_features();
  if (text == "avx512") {
    // A Zen 4 / Sapphire Rapids class CPU, whatever this machine has: for exploring the selection.
    f.avx2 = f.fma = f.f16c = true;
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512vnni = f.avx512bf16 = true;
    return Platform::synthetic_cpu(f, Platform::host_cpu().num_threads);
  }
  if (text == "avx2" || text == "scalar") {
    f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512vnni = f.avx512bf16 = f.avx512fp16 = false;
    f.amx_tile = f.amx_int8 = f.amx_bf16 = false;
    if (text == "scalar") f.avx2 = f.fma = f.f16c = f.avx_vnni = false;
    return Platform::synthetic_cpu(f, Platform::host_cpu().num_threads);
  }
  return Status::error("--platform " + text + ": expected cpu, cuda, cuda:N, smNN (e.g. sm90), avx512 (synthetic), avx2 or scalar");
}

}  // namespace qlinear::cli
