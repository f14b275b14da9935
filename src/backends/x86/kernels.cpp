// x86 backend: what the kernels share at baseline flags (ISA checks, small conversions).
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/x86/x86_kernels.hpp"

namespace qlinear::x86 {

void AlignedFree::operator()(void* p) const { std::free(p); }

AlignedBytes aligned_bytes(int64_t bytes) {
  const size_t size = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
  return AlignedBytes(static_cast<uint8_t*>(std::aligned_alloc(64, size)));
}

Verdict isa_supported(const Platform& p, Isa isa) {
  if (p.kind != PlatformKind::kX86Cpu) return Verdict::no("not an x86 CPU platform");
  const CpuFeatures& f = p.cpu;
  // Every kernel quantizes activations / converts outputs with AVX2 + FMA + F16C code.
  if (!f.avx2) return Verdict::no("CPU lacks AVX2");
  if (!f.fma) return Verdict::no("CPU lacks FMA");
  if (!f.f16c) return Verdict::no("CPU lacks F16C");
  if (isa == Isa::kAvx2) return Verdict::yes();
  if (!f.avx512f) return Verdict::no("CPU lacks AVX-512F");
  if (!f.avx512bw) return Verdict::no("CPU lacks AVX-512BW");
  if (!f.avx512vl) return Verdict::no("CPU lacks AVX-512VL");
  if (isa == Isa::kAvx512Vnni) {
    if (!f.avx512vnni) return Verdict::no("CPU lacks AVX-512 VNNI (vpdpbusd)");
    return Verdict::yes();
  }
  if (!f.avx512dq) return Verdict::no("CPU lacks AVX-512DQ");
  if (!f.avx512bf16) return Verdict::no("CPU lacks AVX-512 BF16 (vdpbf16ps)");
  return Verdict::yes();
}

uint8_t float_kind_of(DType d) { return d == DType::kF32 ? 0 : d == DType::kBF16 ? 1 : 2; }

std::vector<float> bias_as_f32(const Tensor* t, int64_t n) {
  std::vector<float> b;
  if (t == nullptr) return b;
  b.resize(static_cast<size_t>(n));
  const Tensor c = t->contiguous();
  switch (c.dtype()) {
    case DType::kF32:
      for (int64_t i = 0; i < n; ++i) b[i] = c.data<float>()[i];
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) b[i] = bf16_to_float(c.data<uint16_t>()[i]);
      break;
    default:
      for (int64_t i = 0; i < n; ++i) b[i] = f16_to_float(c.data<uint16_t>()[i]);
      break;
  }
  return b;
}

}  // namespace qlinear::x86
