#pragma once
// The FP8 tensor-core decode GEMM for MX E2M1 weights times MX E2M1 activations (W4A4) at M <= 16 (sm_90a):
// y[M, N] = x[M, K] W^T through wgmma m64nTk32 E4M3 x E4M3 (Hopper's QGMMA), the weights as the register A
// operand, the activations' codes as B in shared memory, one MMA per 32-wide MX group into fresh FP32
// accumulators, promoted by the product of the two E8M0 scales.
//
// Why (src/backends/cuda/README.md, decision 18): the BF16 decode kernel (mma_decode.cuh) spends about 3
// instructions per weight (decode to BF16, activation fragments, MMAs) and is bound by instruction issue at
// M <= 16. Here an E2M1 code becomes an E4M3 byte (its value times 2^-6) with a shift and two masks per four
// codes and the MMA takes 32 K at once, with no activation fragments to load: about half the instructions.
//
// Operands:
//   gemm       the decode GEMM's arguments (mma_decode.hpp): layout (E2M1 codes, kMx32 scales that fold),
//              weights and scales in the MmaLayout made at process time (the same bytes, no second copy),
//              bias, output, m (<= kQgmmaMaxM); gemm.x is not read
//   x_codes    [m, k] bytes: each activation's element code as the E4M3 byte of its grid value times
//              2^-kQgmmaActShift, K permuted inside each 32-group (qgmma_slot_of_k, layout/qgmma_fragment.hpp:
//              the order the weights' register fragments hold K in); written by launch_act_mx_codes
//   x_scales   [m, k / 32] E8M0 bytes, the activations' shared exponents
// Numerics: every product of two E2M1 values times 2^-12 is exact in the tensor core, and the 32 of a group
// span 13 bits (0.25 .. 1152 in units of 2^-12), which its accumulation keeps; the group's sum is multiplied
// by 2^(ws - 127 + 12) (exact) and then fused-multiply-added with 2^(xs - 127) into the FP32 accumulator:
// the same arithmetic as the BF16 kernel's promoted path, in the order of the groups.
#include <cstdint>
#include <string>

#include "backends/cuda/act_quant_bf16_math.hpp"
#include "backends/cuda/cuda_util.hpp"
#include "backends/cuda/layout/qgmma_fragment.hpp"
#include "backends/cuda/mma_decode.hpp"

namespace qlinear::cuda {

inline constexpr int64_t kQgmmaMaxM = 16;
inline constexpr int kQgmmaActShift = 6;  // activation codes are stored as E4M3 of value x 2^-6

struct QgmmaDecodeArgs {
  MmaDecodeArgs gemm;
  const uint8_t* x_codes = nullptr;
  const uint8_t* x_scales = nullptr;
};

// Whether apply takes the kernel where it applies, with which block size and loop: the forced variant
// (MmaDecodeForce::qgmma, qgmma_overlap) when one is set, else QLINEAR_QGMMA, a comma list of "on" (4096 K
// per split), "small" (2048: more, smaller blocks), "overlap" (the next unit's MMAs before this one's
// promotion); unset or "off": the BF16 decode kernel (the FP8 kernel is not yet measured ahead of it).
struct QgmmaChoice {
  int blocks = 0;  // 0: not taken; 1: up to 4096 K per split; 2: up to 2048
  bool overlap = false;
};
QgmmaChoice qgmma_choice();

// Whether the kernel implements this layer and call: E2M1 weights whose E8M0 scales fold, E2M1 activations,
// 1 <= m <= kQgmmaMaxM.
bool qgmma_decode_applies(const MmaLayout& l, bool fold, ActElem act, int64_t m);
// The split of K over blocks for these arguments (each split's activations fit the block's shared memory;
// MmaDecodeForce::splits asks for a count).
int qgmma_decode_splits(const MmaDecodeArgs& a);
std::string qgmma_route_description(const MmaDecodeArgs& a);
// Runs the GEMM on `stream` (after the pass that writes x_codes: a programmatic dependent launch when
// gemm.programmatic); split-K sums go to stream-ordered scratch and are added by the decode GEMM's
// reduction kernel in split order.
Status launch_qgmma_decode(const QgmmaDecodeArgs& a, Stream stream);

// The activation pass for it: the reference's MX quantization (act_quant_bf16_math.hpp, bit for bit) written
// as codes and exponents instead of BF16 values. K % 32 == 0; codes [m, k], scales [m, k / 32].
struct ActMxCodesArgs {
  const void* x = nullptr;
  DType x_dtype = DType::kBF16;
  int64_t m = 0, k = 0, ld_x = 0;
  ActElem elem = ActElem::kE2M1;
  ActMxRule rule = ActMxRule::kCeilOverMax;
  uint8_t* codes = nullptr;
  uint8_t* scales = nullptr;
};
Status launch_act_mx_codes(const ActMxCodesArgs& a, Stream stream);

}  // namespace qlinear::cuda
