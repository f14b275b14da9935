#pragma once
// The x86-64 CPU backend: kernel classes, one object per (ISA, family). Everything declared here is
// compiled with baseline flags (kernels.cpp, *_common.cpp); the SIMD code lives in *_avx2.cpp and
// *_avx512.cpp / amx_*.cpp and is reached only after is_supported() has checked the ISA on this machine
// (for AMX: and the OS's grant of the tile state).
//
//   registry name                 family            ISA                                   file of its SIMD code
//   x86_amx_int8                  int8_scaled_mm    AMX-INT8 (M >= 8) + the AVX-512 VNNI kernel  amx_int8_gemm.cpp
//   x86_avx512vnni_int8           int8_scaled_mm    AVX-512 F/BW/VL + VNNI (+AVX2 quantizer)  int8_gemm_avx512.cpp
//   x86_avx2_int8                 int8_scaled_mm    AVX2 + FMA + F16C                      int8_gemm_avx2.cpp, int8_tiled_avx2.cpp
//   x86_amx_bf16_fp8_w8a16        fp8_weight_only   AMX-BF16 M>=2, VBMI stream M=1  amx_w8a16_gemm.cpp, amx_bf16_stream.cpp
//   x86_amx_bf16_mxfp8_w8a16      mxfp8 (A16)       AMX-BF16 M>=2, VBMI stream M=1  amx_w8a16_gemm.cpp, amx_bf16_stream.cpp
//   x86_amx_bf16_mxfp4_w4a16      mxfp4 (A16)       AMX-BF16 M>=2, VBMI stream M=1  amx_w8a16_gemm.cpp, amx_bf16_stream.cpp
//   x86_avx512bf16_fp8_w8a16      fp8_weight_only   AVX-512 F/BW/VL/DQ + BF16              w8a16_gemm_avx512.cpp
//   x86_avx512bf16_mxfp8_w8a16    mxfp8 (A16)       AVX-512 F/BW/VL/DQ + BF16              w8a16_gemm_avx512.cpp
//   x86_avx512bf16_mxfp4_w4a16    mxfp4 (A16)       AVX-512 F/BW/VL/DQ + BF16              w8a16_gemm_avx512.cpp
//   x86_amx_bf16_fp8_scaled_mm    fp8_scaled_mm     AMX-BF16 M>=2, VBMI stream M=1  amx_w8a16_gemm.cpp, amx_bf16_stream.cpp
//   x86_amx_bf16_mxfp8            mxfp8 (A8, A16)   AMX-BF16 M>=2, VBMI stream M=1  amx_w8a16_gemm.cpp, amx_bf16_stream.cpp
//   x86_amx_bf16_mxfp6            mxfp6 (A16, A*)   AMX-BF16 M>=2, VBMI stream M=1  amx_w8a16_gemm.cpp, amx_bf16_stream.cpp
//   x86_amx_bf16_mxfp4            mxfp4 (A*, A16)   AMX-BF16 M>=2, VBMI stream M=1  amx_w8a16_gemm.cpp, amx_bf16_stream.cpp
//   x86_amx_bf16_nvfp4            nvfp4 (A16, A4)   AMX-BF16 M>=2, VBMI stream M=1  amx_w8a16_gemm.cpp, amx_bf16_stream.cpp
//   x86_avx512bf16_fp8_scaled_mm fp8_scaled_mm     AVX-512 BF16 + VBMI, no AMX         fp_gemm_avx512bf16.cpp, amx_bf16_stream.cpp
//   x86_avx512bf16_fp8_block_scaled fp8_block_scaled AVX-512 BF16 + VBMI (AMX or not)  fp_gemm_avx512bf16.cpp, amx_bf16_stream.cpp
//   x86_avx512bf16_mxfp8          mxfp8 (A8, A16)   AVX-512 BF16 + VBMI, no AMX         fp_gemm_avx512bf16.cpp, amx_bf16_stream.cpp
//   x86_avx512bf16_mxfp6          mxfp6 (A16, A*)   AVX-512 BF16 + VBMI, no AMX         fp_gemm_avx512bf16.cpp, amx_bf16_stream.cpp
//   x86_avx512bf16_mxfp4          mxfp4 (A*, A16)   AVX-512 BF16 + VBMI, no AMX         fp_gemm_avx512bf16.cpp, amx_bf16_stream.cpp
//   x86_avx512bf16_nvfp4          nvfp4 (A16, A4)   AVX-512 BF16 + VBMI, no AMX         fp_gemm_avx512bf16.cpp, amx_bf16_stream.cpp
//     (at M = 1 the MXFP4 / NVFP4 / MXFP6 E2M3 ones with MX or NVFP4 activations stream in integers instead:
//     amx_int_stream.cpp; the FP engine's AMX and AVX-512 BF16 kernels hand activations that are not exact BF16 values to the AVX2
//     code below; the AVX-512 BF16 ones are the AMX ones with vdpbf16ps register tiles in place of AMX tiles.
//     fp8_block_scaled has no AMX variant: its 128x128 scales promote each 128-wide K block's sum, which the
//     register tiles do per decoded chunk while the AMX paths keep whole-K sums in the tiles, so it runs on the
//     register tiles on AMX CPUs too)
//   x86_avx2_fp8_scaled_mm        fp8_scaled_mm     AVX2 + FMA + F16C                      fp_gemm_avx2.cpp
//   x86_avx2_fp8_block_scaled     fp8_block_scaled  AVX2 + FMA + F16C                      fp_gemm_avx2.cpp
//   x86_avx2_fp8_weight_only      fp8_weight_only   AVX2 + FMA + F16C                      fp_gemm_avx2.cpp
//   x86_avx2_mxfp8                mxfp8 (A16, A8)   AVX2 + FMA + F16C                      fp_gemm_avx2.cpp
//   x86_avx2_mxfp6                mxfp6 (A16, A*)   AVX2 + FMA + F16C                      fp_gemm_avx2.cpp, fp_quad_avx2.cpp
//   x86_avx2_mxfp4                mxfp4 (A16, A*)   AVX2 + FMA + F16C                      fp_gemm_avx2.cpp, fp_quad_avx2.cpp
//   x86_avx2_nvfp4                nvfp4 (A16, A4)   AVX2 + FMA + F16C                      fp_gemm_avx2.cpp, fp_quad_avx2.cpp
//
// Per-layer state lives in layer.kernel_state (the kernels are stateless and shared); process replaces
// the checkpoint's "weight" tensor by the packed copy (no second full copy stays), and row_major_weight
// rebuilds the checkpoint layout from it exactly. Every kernel exports that state as tensors and imports it
// back (export_processed / import_processed, layout version 1): the processed-weight cache's payload.
#include <cstdint>
#include <memory>

#include "qlinear/kernel.hpp"

namespace qlinear::x86 {

// kAvx512Bf16Vbmi: AVX-512 BF16 plus VBMI (vpermb / vpermi2b, the AMX kernels' weight decoders).
// kAmxInt8 / kAmxBf16: the AVX-512 level below them plus AMX tiles the OS has granted this process.
enum class Isa : uint8_t { kAvx2, kAvx512Vnni, kAvx512Bf16, kAvx512Bf16Vbmi, kAmxInt8, kAmxBf16 };

// 64-byte aligned storage for prepacked weights (std::aligned_alloc, freed with std::free); defined in
// kernels.cpp, at baseline flags, so no ISA-specific translation unit provides its code.
struct AlignedFree {
  void operator()(void* p) const;
};
using AlignedBytes = std::unique_ptr<uint8_t, AlignedFree>;
AlignedBytes aligned_bytes(int64_t bytes);  // rounded up to 64, at least 64
// Prepacked weights: from kHugePageWeightBytes on, whole 2 MiB pages, aligned, with transparent huge pages asked
// for (madvise; where the OS refuses, 4 KiB pages). The kernels stream these once per call at small M, where
// every 4 KiB page of a stream otherwise needs its own page walk: measured on a 2-core Xeon (KVM guest,
// THP "madvise"), INT8 AMX 28672 x 4096 at M = 16, 2 threads, cold weights, best median of 6 interleaved runs:
// 4.00 -> 3.87 ms (one thread: the same within the noise).
constexpr int64_t kHugePageWeightBytes = int64_t{4} << 20;
AlignedBytes weight_bytes(int64_t bytes);
// Processed export / import of prepacked buffers: the first `bytes` of `b` as a 1-D `dtype` tensor of
// 1-byte elements, and a new weight_bytes buffer holding a tensor's bytes.
Tensor aligned_bytes_tensor(const AlignedBytes& b, DType dtype, int64_t bytes);
AlignedBytes aligned_bytes_of(const Tensor& t);

// ISA check shared by every x86 kernel: the platform's kind, then each feature the code uses.
Verdict isa_supported(const Platform& platform, Isa isa);

// INT8 W8A8 (vLLM's int8 scaled_mm): dynamic per-token or static per-tensor activations, symmetric or
// asymmetric, per-channel or per-tensor (per-shard) weight scales. Scales, zero point and bias are applied
// once to the exact int32 sums: y = sx[m] * sw[n] * (acc - zp[m] * colsum[n]) + bias[n], in f32 (FMA),
// then rounded to the output type.
class Int8Kernel final : public LinearKernel {
 public:
  constexpr Int8Kernel(std::string_view name, Isa isa) : name_(name), isa_(isa) {}
  std::string_view name() const override { return name_; }
  Family family() const override { return Family::kInt8ScaledMM; }
  std::string_view summary() const override;
  Verdict is_supported(const Platform& platform) const override { return isa_supported(platform, isa_); }
  Verdict can_implement(const LinearConfig& config) const override;
  std::optional<QuantKey> input_quant_key(const LinearConfig& config) const override {
    return config.activation_key;
  }
  Result<Tensor> row_major_weight(const LinearLayer& layer) const override;
  bool supports_pre_processed_weights() const override { return true; }
  uint32_t processed_layout_version() const override { return 1; }

 protected:
  Status process_impl(LinearLayer& layer) const override;
  Status apply_impl(const LinearLayer& layer, const Activation& x, const Tensor* bias, Tensor& out) const override;
  Result<ProcessedWeights> export_impl(const LinearLayer& layer) const override;
  Status import_impl(LinearLayer& layer, const ProcessedWeights& weights) const override;

 private:
  int64_t k_align() const { return isa_ == Isa::kAmxInt8 ? 64 : 4; }  // AMX: whole 64-byte tile rows
  std::string_view name_;
  Isa isa_;
};

extern const Int8Kernel kAvx512VnniInt8;  // "x86_avx512vnni_int8"
extern const Int8Kernel kAvx2Int8;        // "x86_avx2_int8"
extern const Int8Kernel kAmxInt8;         // "x86_amx_int8"

// FP8 E4M3 weights (fp8_weight_only: per-tensor / per-channel / 128x128 f32 scales; mxfp8 A16: E8M0 per
// 1x32) and FP4 E2M1 weights (mxfp4 A16) x BF16 activations, vdpbf16ps with f32 accumulation. Where each scale is applied: w8a16_isa.hpp.
class W8A16Kernel final : public LinearKernel {
 public:
  constexpr W8A16Kernel(std::string_view name, Family family, Isa isa = Isa::kAvx512Bf16)
      : name_(name), family_(family), isa_(isa) {}
  std::string_view name() const override { return name_; }
  Family family() const override { return family_; }
  std::string_view summary() const override;
  Verdict is_supported(const Platform& platform) const override;
  Verdict can_implement(const LinearConfig& config) const override;
  Result<Tensor> row_major_weight(const LinearLayer& layer) const override;
  bool supports_pre_processed_weights() const override { return true; }
  // 2: 128x128 block scales per 16-column panel (panel_block_scales.hpp)
  uint32_t processed_layout_version() const override { return 2; }
  // AMX variants: M = 1 streams the weights (VBMI decode, vdpbf16ps), tiles from kAmxBf16MinM.
  std::vector<MRoute> m_routes(const LinearConfig& config) const override;

 protected:
  Status process_impl(LinearLayer& layer) const override;
  Status apply_impl(const LinearLayer& layer, const Activation& x, const Tensor* bias, Tensor& out) const override;
  Result<ProcessedWeights> export_impl(const LinearLayer& layer) const override;
  Status import_impl(LinearLayer& layer, const ProcessedWeights& weights) const override;

 private:
  std::string_view name_;
  Family family_;
  Isa isa_;
};

extern const W8A16Kernel kAvx512Bf16Fp8W8A16;    // "x86_avx512bf16_fp8_w8a16"
extern const W8A16Kernel kAvx512Bf16Mxfp8W8A16;  // "x86_avx512bf16_mxfp8_w8a16"
extern const W8A16Kernel kAvx512Bf16Mxfp4W4A16;  // "x86_avx512bf16_mxfp4_w4a16"
// The same kernels with AMX-BF16 tiles for M >= kAmxBf16MinM (amx_isa.hpp), on the same packed weights; below it
// they stream the weights through vdpbf16ps with the tiles' VBMI decode (amx_bf16_stream.cpp).
extern const W8A16Kernel kAmxBf16Fp8W8A16;       // "x86_amx_bf16_fp8_w8a16"
extern const W8A16Kernel kAmxBf16Mxfp8W8A16;     // "x86_amx_bf16_mxfp8_w8a16"
extern const W8A16Kernel kAmxBf16Mxfp4W4A16;     // "x86_amx_bf16_mxfp4_w4a16"

// Every FP8 / MX / NVFP4 family on AVX2 + FMA (fp_isa.hpp): weight codes decoded to f32 in registers
// (MXFP8 group scales folded where exact; FP4 / FP6 group scales on each group's f32 sum), f32 activations
// (dense input converted exactly, or quantized inside apply bit-identically to the reference quantizer and
// decoded), FMA with f32 accumulation. Per-tensor /
// per-channel scales in the epilogue, 128x128 blocks on each K block's partial sum. Layers whose folded
// MX scales would leave f32's exact range (or activations whose would) run the reference instead.
class FpAvx2Kernel final : public LinearKernel {
 public:
  // isa kAmxBf16: the same kernel on AMX-BF16 tiles from kAmxBf16MinM and a VBMI weight stream below (amx_isa.hpp);
  // kAvx512Bf16Vbmi: the AMX path's BF16 activations, decode and stream, vdpbf16ps register tiles for the tiles.
  constexpr FpAvx2Kernel(std::string_view name, Family family, Isa isa = Isa::kAvx2)
      : name_(name), family_(family), isa_(isa) {}
  std::string_view name() const override { return name_; }
  Family family() const override { return family_; }
  std::string_view summary() const override;
  Verdict is_supported(const Platform& platform) const override { return isa_supported(platform, isa_); }
  Verdict can_implement(const LinearConfig& config) const override;
  // MX activation keys (E8M0 per 1x32) may arrive pre-quantized; every other key is quantized inside apply.
  std::optional<QuantKey> input_quant_key(const LinearConfig& config) const override;
  Result<Tensor> row_major_weight(const LinearLayer& layer) const override;
  bool supports_pre_processed_weights() const override { return true; }
  // 3: FP4 / FP6 quad records (fp_isa.hpp); 4: 128x128 block scales per 16-column panel (panel_block_scales.hpp)
  uint32_t processed_layout_version() const override { return 4; }
  // One route for every M; explain says when the reference kernel runs a layer instead, and the dispatch
  // log names it for a layer whose scales are not exact in f32 (the exact path is a visible route).
  std::vector<MRoute> m_routes(const LinearConfig& config) const override;
  std::string_view apply_route(const LinearLayer& layer, const Activation& x) const override;

 protected:
  Status process_impl(LinearLayer& layer) const override;
  Status apply_impl(const LinearLayer& layer, const Activation& x, const Tensor* bias, Tensor& out) const override;
  Result<ProcessedWeights> export_impl(const LinearLayer& layer) const override;
  Status import_impl(LinearLayer& layer, const ProcessedWeights& weights) const override;

 private:
  Status reference_apply(const LinearLayer& layer, const Activation& x, const Tensor* bias, Tensor& out) const;
  const LinearKernel& reference_kernel() const;  // the reference kernel of this kernel's family
  // BF16 engines: the smallest M on tiles, and whether M takes the AVX2 code between the stream and the tiles.
  int64_t bf16_tiles_min_m() const;
  bool avx2_below_tiles(int64_t m) const;
  std::string_view name_;
  Family family_;
  Isa isa_;
};

extern const FpAvx2Kernel kAvx2Fp8ScaledMM;    // "x86_avx2_fp8_scaled_mm"
extern const FpAvx2Kernel kAvx2Fp8BlockScaled; // "x86_avx2_fp8_block_scaled"
extern const FpAvx2Kernel kAvx2Fp8WeightOnly;  // "x86_avx2_fp8_weight_only"
extern const FpAvx2Kernel kAvx2Mxfp8;          // "x86_avx2_mxfp8"
extern const FpAvx2Kernel kAvx2Mxfp6;          // "x86_avx2_mxfp6"
extern const FpAvx2Kernel kAvx2Mxfp4;          // "x86_avx2_mxfp4"
extern const FpAvx2Kernel kAvx2Nvfp4;          // "x86_avx2_nvfp4"
extern const FpAvx2Kernel kAmxBf16Fp8ScaledMM; // "x86_amx_bf16_fp8_scaled_mm"
extern const FpAvx2Kernel kAmxBf16Mxfp8;       // "x86_amx_bf16_mxfp8"
extern const FpAvx2Kernel kAmxBf16Mxfp6;       // "x86_amx_bf16_mxfp6"
extern const FpAvx2Kernel kAmxBf16Mxfp4;       // "x86_amx_bf16_mxfp4"
extern const FpAvx2Kernel kAmxBf16Nvfp4;       // "x86_amx_bf16_nvfp4"
extern const FpAvx2Kernel kAvx512Bf16Fp8ScaledMM; // "x86_avx512bf16_fp8_scaled_mm"
extern const FpAvx2Kernel kAvx512Bf16Fp8BlockScaled; // "x86_avx512bf16_fp8_block_scaled"
extern const FpAvx2Kernel kAvx512Bf16Mxfp8;       // "x86_avx512bf16_mxfp8"
extern const FpAvx2Kernel kAvx512Bf16Mxfp6;       // "x86_avx512bf16_mxfp6"
extern const FpAvx2Kernel kAvx512Bf16Mxfp4;       // "x86_avx512bf16_mxfp4"
extern const FpAvx2Kernel kAvx512Bf16Nvfp4;       // "x86_avx512bf16_nvfp4"

// Shared helpers (kernels.cpp).
// A dense f32/bf16/f16 [n] tensor as f32 (bias), or empty when t is null.
std::vector<float> bias_as_f32(const Tensor* t, int64_t n);
// The activation dtype's FloatKind code (0 f32, 1 bf16, 2 f16).
uint8_t float_kind_of(DType d);

}  // namespace qlinear::x86
