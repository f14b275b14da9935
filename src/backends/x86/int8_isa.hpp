#pragma once
// INT8 W8A8 on x86: the plain-C interface between the kernel classes (baseline-flag code, kernels.cpp and
// int8_common.cpp) and the ISA translation units (*_avx2.cpp, *_avx512.cpp).
//
// NOTES: nothing here is an inline function, a template or a standard container on purpose. An inline
// function (or a std:: template instantiation) compiled in an AVX-512 translation unit is a COMDAT symbol
// the linker may pick for every caller, baseline ones included, and would then run AVX-512 instructions on
// an AVX2 machine. The ISA files therefore take raw pointers and PODs only.
//
// Weight layout ("VNNI panels"), made once by process_weights_after_loading:
//   N is padded to a multiple of 16, K to a multiple of 4, padding codes are 0.
//   packed[p][g][j][t] = W[16p + j][4g + t]      p: panel (16 output columns), g: group of 4 along K
//   byte offset = p * panel_stride + g * 64 + j * 4 + t,   panel_stride = 16 * k_pad
//
//      panel p:   g=0                g=1
//               +------------------+------------------+---
//               | c0:k0..3 c1:k0..3 ... c15:k0..3 | c0:k4..7 ...     (64 bytes = one zmm per group)
//               +------------------+------------------+---
//   One 64-byte group is one zmm: int32 lane j is the 4 bytes vpdpbusd multiplies for column j.
//   AVX2 reads the same group as two ymm (columns 0-7, 8-15).
//
// The u8 x s8 trick (vpdpbusd multiplies unsigned bytes by signed bytes): activations are quantized to
// s8 codes q, stored as u = q + 128 (u8), so that
//   sum_k u[k] w[k] = sum_k q[k] w[k] + 128 * colsum[n],   colsum[n] = sum_k w[n, k]
// and the epilogue subtracts (128 + zp) * colsum[n] (vLLM's azp_adj for asymmetric activations, with the
// +128 shift folded in). Products are exact and int32 sums wrap modulo 2^32; the corrected sum is exact
// whenever its true value fits int32 (|acc| <= 128 * 128 * K: K < 131072, checked by can_implement).
#include <cstdint>

namespace qlinear::x86 {

// Element type of a dense float operand (activations, bias, output).
enum class FloatKind : uint8_t { kF32, kBF16, kF16 };

// Dynamic or static activation quantization, bit-identical to the reference quantizer (src/quant).
struct Int8ActQuant {
  const void* x = nullptr;  // [m, k] rows, row stride ldx elements
  FloatKind x_kind = FloatKind::kF32;
  int64_t m = 0, k = 0, ldx = 0;
  bool dynamic = true;
  bool symmetric = true;
  float static_scale = 1.0f;  // static keys (the max over fused shards, as vLLM)
  int32_t static_zp = 0;      // static asymmetric
  bool offset128 = true;      // store u = q + 128 (vpdpbusd) or q itself (AVX2 path)
  // Outputs.
  uint8_t* codes = nullptr;  // [m, k_pad] rows, or tiles (below); columns k..k_pad-1 are written with code 0 (u = 128)
  int64_t k_pad = 0;
  // Codes in the AMX tile order (k_pad a multiple of 64; the caller fills the rows past m of the last 16):
  //   rows in blocks of 16; a block is k_pad / 64 chunks of 16 rows x 64 codes, 1 KiB each:
  //   byte offset of (r, k) = (r / 16) * 16 * k_pad + (k / 64) * 1024 + (r % 16) * 64 + k % 64
  // so that the tile of 16 rows x 64 k is one contiguous KiB, as the weights' B tile is (rows: row / 16
  // blocks start where they start in the row order).
  bool amx_tiles = false;
  float* scale = nullptr;    // [m]
  int32_t* zp = nullptr;     // [m] (0 when symmetric)
  uint8_t* bad_row = nullptr;  // [m], zero-initialized: set to 1 for a dynamic row holding Inf or NaN
  int threads = 1;             // rows are quantized on up to this many threads
};
// Quantizes every row (threads::parallel_for over rows). AVX2 + FMA.
void int8_quantize_activations_avx2(const Int8ActQuant& q);

// y[m, n] = a_scale[m] * w_scale[n] * (acc[m, n] - (offset + zp[m]) * colsum[n]) + bias[n]
struct Int8Epilogue {
  const float* w_scale = nullptr;  // [n_pad] per output column (per-channel, or the shard's scalar)
  const int32_t* colsum = nullptr; // [n_pad]
  int32_t colsum_absmax = 0;       // max |colsum|: decides whether the correction fits int32
  const float* bias = nullptr;     // [n] f32, or null
  const float* a_scale = nullptr;  // [m]
  const int32_t* a_zp = nullptr;   // [m]
  int32_t offset = 128;            // 128 for u8-shifted activations, 0 for signed ones
  void* out = nullptr;             // [m, n] row-major
  FloatKind out_kind = FloatKind::kBF16;
  int64_t n = 0;                   // real N (output row length)
};
// Converts a tile of int32 sums acc[rows, ldacc] (rows m0.., columns n0..n0+cols) into outputs. AVX2 + FMA + F16C.
void int8_epilogue_avx2(const Int8Epilogue& e, const int32_t* acc, int64_t ldacc, int64_t m0, int64_t rows,
                        int64_t n0, int64_t cols);

struct Int8Gemm {
  const int8_t* packed = nullptr;  // VNNI panels (above)
  int64_t n_pad = 0, k_pad = 0;
  const uint8_t* act = nullptr;    // [m, k_pad] codes from int8_quantize_activations_avx2 (AMX: amx_tiles order)
  int64_t m = 0;
  int threads = 1;  // threads::threads_for(weight bytes, ops): small layers run on the calling thread
  Int8Epilogue epi;
};
// AVX-512 F/BW/VL + VNNI (vpdpbusd); activations with offset128.
void int8_gemm_avx512vnni(const Int8Gemm& g);
// AVX2 (vpmovsxbw + vpmaddwd, exact int32); activations without offset. From kInt8TiledMinM rows it runs
// int8_gemm_avx2_tiled (int8_tiled_avx2.cpp: weights widened once per K chunk, a 6 x 16 register tile).
void int8_gemm_avx2(const Int8Gemm& g);
void int8_gemm_avx2_tiled(const Int8Gemm& g);
constexpr int64_t kInt8TiledMinM = 7;  // measured: fewer rows amortize the widening worse

}  // namespace qlinear::x86
