#pragma once
// The FP8 tensor-core decode kernel's view of the E2M1 weight layout (layout/mma_layout.hpp), host and
// device alike so that the CPU test emulates the kernel's decode bit for bit.
//
// wgmma m64nNk32 with E4M3 inputs takes its A operand from registers as mma.sync m16n8k32 does: lane l of
// each warp holds rows g = l / 4 and g + 8 of its 16 rows at K slots 4t .. 4t+3 (registers 0: row g, 1:
// row g+8) and 16 + 4t .. 16 + 4t+3 (registers 2, 3), t = l % 4, one byte per slot, slot order from the low
// byte. The E2M1 layout gives the lane, per 32-group q, word 2q + h (tile h = 0, 1) with the codes of rows
// g and g+8 at K 16h + {2t, 2t+1, 2t+8, 2t+9} in bytes 0..3. So the K order the weights arrive in is a
// permutation of the group, and the activations (B, in shared memory) are written in the same order:
// slot 16h + 4t + j holds K 16h + 2t + (j & 1) + 8 (j >> 1).
#include <cstdint>

#include "backends/cuda/layout/mma_layout.hpp"

namespace qlinear::cuda {

// The slot of K index k (0..31) of a 32-group.
constexpr int qgmma_slot_of_k(int k) { return (k & 16) | (((k >> 1) & 3) << 2) | (((k >> 3) & 1) << 1) | (k & 1); }

// E4M3 bytes of value x 2^-6 from an E2M1 layout word: a code's bits 1..0 sit at bits 0-1 of its byte for
// row g and 2-3 for row g+8, its bits 3..2 (sign, e1) at 4-5 resp. 6-7. The E4M3 byte is sign at bit 7,
// e1 e0 m at bits 4..2: E2M1's exponent field as the bottom of E4M3's (bias 7 against 1: the 2^-6) and
// its mantissa bit as E4M3's top one; the subnormal 0.5 becomes E4M3's subnormal 2^-7.
QL_MMA_HD inline uint32_t qgmma_e4m3_row_g(uint32_t w) { return ((w << 2) & 0x8C8C8C8Cu) | (w & 0x10101010u); }
QL_MMA_HD inline uint32_t qgmma_e4m3_row_g8(uint32_t w) { return (w & 0x8C8C8C8Cu) | ((w >> 2) & 0x10101010u); }

}  // namespace qlinear::cuda
