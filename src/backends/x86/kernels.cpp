// x86 backend: what the kernels share at baseline flags (ISA checks, small conversions).
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/x86/x86_kernels.hpp"

namespace qlinear::x86 {

void AlignedFree::operator()(void* p) const { std::free(p); }

AlignedBytes aligned_bytes(int64_t bytes) {
  const size_t size = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
  return AlignedBytes(static_cast<uint8_t*>(std::aligned_alloc(64, size)));
}

AlignedBytes weight_bytes(int64_t bytes) {
  if (bytes < kHugePageWeightBytes) return aligned_bytes(bytes);
  constexpr size_t kHuge = size_t{1} << 21;
  const size_t size = (static_cast<size_t>(bytes) + kHuge - 1) / kHuge * kHuge;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kHuge, size));
  if (p != nullptr) (void)madvise(p, size, MADV_HUGEPAGE);  // advice only: 4 KiB pages where refused
  return AlignedBytes(p);
}

Tensor aligned_bytes_tensor(const AlignedBytes& b, DType dtype, int64_t bytes) {
  Tensor t = Tensor::empty(dtype, {bytes});
  if (bytes > 0) std::memcpy(t.raw(), b.get(), static_cast<size_t>(bytes));
  return t;
}

AlignedBytes aligned_bytes_of(const Tensor& t) {
  AlignedBytes b = weight_bytes(t.nbytes());
  if (t.nbytes() > 0) std::memcpy(b.get(), t.raw(), static_cast<size_t>(t.nbytes()));
  return b;
}

namespace {
// The platform's features say the CPU has AMX; the OS must also grant this process the tile state.
Verdict amx_os_verdict() {
  const std::string& refusal = amx_tile_permission_refusal();
  return refusal.empty() ? Verdict::yes() : Verdict::no(refusal + "; the AVX-512 kernels run instead");
}
}  // namespace

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
  if (isa == Isa::kAvx512Vnni || isa == Isa::kAmxInt8) {
    if (!f.avx512vnni) return Verdict::no("CPU lacks AVX-512 VNNI (vpdpbusd)");
    if (isa == Isa::kAvx512Vnni) return Verdict::yes();
    if (!f.amx_tile || !f.amx_int8) return Verdict::no("CPU lacks AMX-INT8 (amx_tile, amx_int8)");
    return amx_os_verdict();
  }
  if (!f.avx512dq) return Verdict::no("CPU lacks AVX-512DQ");
  if (!f.avx512bf16) return Verdict::no("CPU lacks AVX-512 BF16 (vdpbf16ps)");
  if (isa == Isa::kAvx512Bf16) return Verdict::yes();
  if (isa == Isa::kAvx512Bf16Vbmi) {
    if (!f.avx512vbmi) return Verdict::no("CPU lacks AVX-512 VBMI (vpermb / vpermi2b, the weight decode)");
    // Where AMX runs, the AMX kernels (ahead in the priority list) take these layers; this is their fallback.
    return Verdict::yes();
  }
  if (!f.amx_tile || !f.amx_bf16) return Verdict::no("CPU lacks AMX-BF16 (amx_tile, amx_bf16)");
  if (!f.avx512vbmi) return Verdict::no("CPU lacks AVX-512 VBMI (vpermi2b, the FP8 decode)");
  return amx_os_verdict();
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
