#pragma once
// Kernel selection. One priority list per platform, best first, reference last (src/select/priority_*.cpp);
// the first kernel that is not disabled and passes is_supported and can_implement wins. When none does,
// the error lists every candidate with its reason.
//
// Overrides (environment, or SelectOptions through the API):
//   QLINEAR_DISABLED_KERNELS=name,name   skip these kernels
//   QLINEAR_FORCE_KERNEL=name            use this kernel or fail with its reason (no silent fallback)
//   QLINEAR_LOG=dispatch                 log every decision to stderr
#include <span>
#include <string>
#include <vector>

#include "qlinear/kernel.hpp"

namespace qlinear {

// Every kernel this build registers, in no particular order.
std::span<const LinearKernel* const> all_kernels();
const LinearKernel* find_kernel(std::string_view name);
// The priority list for a platform (x86 CPU, or CUDA by compute capability).
std::span<const LinearKernel* const> priority_list(const Platform& platform);

struct SelectOptions {
  std::vector<std::string> disabled;  // added to QLINEAR_DISABLED_KERNELS
  std::string force;                  // overrides QLINEAR_FORCE_KERNEL when not empty
  bool read_environment = true;
};

struct CandidateVerdict {
  const LinearKernel* kernel = nullptr;
  bool chosen = false;
  std::string reason;  // empty for the chosen one; "disabled by QLINEAR_DISABLED_KERNELS", ... otherwise
  std::vector<MRoute> routes;  // the chosen one's m_routes, when it routes by M (more than itself for every M)
};

struct Selection {
  const LinearKernel* kernel = nullptr;  // null when nothing fits
  std::vector<CandidateVerdict> candidates;  // the family's candidates in priority order, with verdicts
  std::string forced;                        // the forced kernel's name, if any
  // Human-readable, one line per candidate: "  x86_avx512_mxfp8   no: K=100 is not a multiple of 32", the
  // chosen one followed by its routes when it routes by M: "      M 9+: sm90_mxfp8_bf16 (why)".
  std::string explain() const;
};

// Evaluates every candidate (never fails): what `qlinear kernels --explain` prints.
Selection explain_selection(const LinearConfig& config, const Platform& platform, const SelectOptions& options = {});
// The chosen kernel, or an error listing every candidate and its reason.
Result<const LinearKernel*> select_kernel(const LinearConfig& config, const Platform& platform,
                                          const SelectOptions& options = {});

// The same over an explicit list (tests, and engines that register kernels of their own).
Selection explain_selection_in(std::span<const LinearKernel* const> list, const LinearConfig& config,
                               const Platform& platform, const SelectOptions& options = {});
Result<const LinearKernel*> select_kernel_in(std::span<const LinearKernel* const> list, const LinearConfig& config,
                                             const Platform& platform, const SelectOptions& options = {});

// Parses a comma-separated kernel list, rejecting unknown names with the list of known ones.
Result<std::vector<std::string>> parse_kernel_list(std::string_view text, std::string_view source);

}  // namespace qlinear
