#pragma once
// AMX tile GEMMs on x86 (x86_amx_int8, x86_amx_bf16_*): the plain-C interface between the kernel classes
// (baseline flags) and the AMX translation units (amx_*.cpp, compiled with -mamx-tile -mamx-int8 -mamx-bf16
// and AVX-512). No inline functions or templates here (int8_isa.hpp says why).
//
// Tiles: every tile is configured once per thread per call as 16 rows x 64 bytes (palette 1):
//   C0..C3 (tmm0-3) f32 / s32 accumulators of a 32 x 32 output block, A0, A1 (tmm4-5) 16 activation rows
//   each, B0, B1 (tmm6-7) 16 output columns each. Rows past M and columns past N are computed on padding
//   and never stored.
//
// INT8 (tdpbusd, u8 x s8 -> s32): the B tile of 16 columns x 64 k is 1 KiB of the VNNI panels int8_isa.hpp
//   describes (panel p, groups g0 .. g0+15, row stride 64 bytes), so the AVX-512 VNNI kernel and the AMX
//   kernel share the packed weights; only K is padded to 64 (a whole tile) instead of 4. Activations are the
//   u8 = q + 128 codes of int8_quantize_activations_avx2 in tile order (Int8ActQuant::amx_tiles: each A tile one
//   contiguous KiB), rows padded to a multiple of 16; the +128 shift and the zero point are removed exactly in
//   int8_epilogue_avx2, so the int32 sums and every output equal the AVX-512 VNNI kernel's bit for bit.
//
// BF16 (tdpbf16ps, f32 accumulation): per block of 2 panels, the FP8 / FP4 codes of the whole K are decoded
//   once into BF16 VNNI-2 rows (row = a k pair, word 2j + t = W[j][2r + t]: the B tile layout) in a per-thread
//   scratch that stays in L2, then every 32-row block of activations runs over it. The MX E8M0 scale is
//   folded into the BF16 exponent (exact: process checks the folded values stay normal BF16, else the layer
//   takes the exact scalar path); per-tensor / per-channel scales multiply the f32 sums in the epilogue.
#include <cstdint>

#include "backends/x86/fp_isa.hpp"
#include "backends/x86/int8_isa.hpp"
#include "backends/x86/w8a16_isa.hpp"

namespace qlinear::x86 {

// Smallest M each AMX kernel runs on tiles (a 16-row tile at M = 1 wastes 15/16 of its work). Below it, INT8
// runs the AVX-512 VNNI kernel on the same packed weights, and the BF16 kernels stream their weights through
// vdpbf16ps with the tile path's decoders (amx_bf16_stream.cpp). Measured on a 2-core Xeon (4096 x 4096, one
// thread, CPU time per call): INT8 AMX ties VNNI at M = 2-4 and is 1.3x faster at M = 8; the BF16 decode-to-tiles
// path is faster than the AVX-512 kernels from M = 2 (1.1-1.3x at M = 2, 2-3x at M = 8), slower at M = 1.
constexpr int64_t kAmxInt8MinM = 8;
constexpr int64_t kAmxBf16MinM = 2;
// Rows of the BF16 activation buffer the BF16 GEMMs read: whole 16-row tiles from kAmxBf16MinM, the stream's
// one row below it.
constexpr int64_t amx_bf16_act_rows(int64_t m) { return m < kAmxBf16MinM ? m : (m + 15) / 16 * 16; }

// INT8 W8A8 on AMX-INT8. g.packed: VNNI panels with k_pad % 64 == 0; g.act: round_up(m, 16) x k_pad u8 codes
// (offset 128) in Int8ActQuant::amx_tiles order; g.epi.offset must be 128.
void int8_gemm_amx(const Int8Gemm& g);

// FP8 / FP4 weights x BF16 activations on AMX-BF16 (per-column or MX scales; not 128x128 blocks).
// g.act: BF16 [m, lda] (tiles, m >= kAmxBf16MinM: [round_up(m, 16), lda]), lda >= k_pad, zeros in columns
// k .. k_pad - 1.
void w8a16_gemm_amx(const W8A16Gemm& g);

// The FP engine's families on AMX-BF16 (x86_amx_bf16_{fp8_scaled_mm, mxfp8, mxfp6, mxfp4, nvfp4}): fp_isa.hpp's
// code panels (E4M3, FP6 E2M3 / E3M2, FP4 E2M1 records), regathered into quads by vpermb and decoded to BF16
// VNNI-2 rows (amx_bf16_decode.hpp); E8M0 group codes folded into the exponent (exact: process keeps every
// folded value a normal f32, i.e. a normal BF16), NVFP4's E4M3 group scales multiplied into the words (exact),
// x the activations' values as BF16 (BF16 input, or quantized codes times their group scale: BF16 values);
// epilogue y = acc * row_scale[m] * col_scale[n] + bias[n] + col_nan[n]. 128x128 weight blocks (g.block_scale,
// with g.act_block_scale: x86_avx512bf16_fp8_block_scaled) are applied to each 128-wide K block's f32 sum by the
// register tiles and the stream only: such a job never runs on the AMX tiles, whatever mma says. g.act (f32,
// [m, k_pad]) is converted to BF16 here; returns false, computing nothing, when a value is not exactly a normal
// BF16 or zero (the caller runs fp_gemm_avx2).
// mma: what multiplies from kAmxBf16MinM rows: AMX tiles (x86_amx_bf16_*), or, on CPUs with AVX-512 BF16 and
// VBMI without AMX or on block-scaled FP8 (x86_avx512bf16_{fp8_scaled_mm, fp8_block_scaled, mxfp8, mxfp6, mxfp4,
// nvfp4}), vdpbf16ps register tiles on the same decoded words (fp_gemm_avx512bf16.cpp). Below kAmxBf16MinM both
// stream the weights.
enum class Bf16Mma : uint8_t { kAmxTiles, kAvx512Registers };
bool fp_records_gemm_bf16(const FpGemm& g, Bf16Mma mma);
// The same with the activations already BF16 (act: [round_up(g.m, 16), g.k_pad], zeros past k and m; g.act unused).
void fp_records_gemm_bf16_rows(const FpGemm& g, const uint16_t* act, Bf16Mma mma);

// q's activations as the BF16 rows fp_records_gemm_bf16_rows takes (act: [round_up(q.m, 16), q.k_pad], the rows past
// q.m zeroed; below kAmxBf16MinM [q.m, q.k_pad], the stream's one row): dense BF16
// rows, or quantized bit-identically to the reference (amx_act_bf16.cpp: MX, NVFP4, FP8 per tensor / per token /
// per 1x128 group, the group scales to q.block_scale). False when q is another mode or
// input dtype, holds Inf / NaN, or a folded value is not exactly a normal BF16: then act is garbage and the
// caller takes fp_prepare_activations_avx2's path (which reports bad input, or hands the layer to the reference).
bool amx_prepare_bf16_activations(const FpActQuant& q, uint16_t* act);

// Test hook: how many BF16 tile GEMMs (w8a16_gemm_amx, fp_records_gemm_bf16 that ran with m >= kAmxBf16MinM) and
// weight streams (m below it) this thread has started, so that a test can tell these paths from the fallbacks
// that give the same result.
int64_t amx_bf16_gemms_on_this_thread();
int64_t amx_bf16_streams_on_this_thread();
// The same for Bf16Mma::kAvx512Registers's register-tile GEMMs (m >= kAmxBf16MinM).
int64_t avx512bf16_gemms_on_this_thread();
// How many of those weight streams ran in integers (bf16_job_int_stream); and a switch for tests and benchmarks
// that compares them with the BF16 stream (on by default).
int64_t amx_int_streams_on_this_thread();
void set_int_stream_enabled(bool on);

}  // namespace qlinear::x86
