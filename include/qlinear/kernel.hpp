#pragma once
// The kernel interface every backend implements, one object per (backend, family) pair.
//
// Lifecycle (vLLM's): select (is_supported, then can_implement) -> process_weights_after_loading once ->
// apply on every forward. Kernel objects are stateless and shared: per-layer state lives in the layer, so
// one processed layer may be applied from many threads at once.
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qlinear/layer.hpp"
#include "qlinear/platform.hpp"

namespace qlinear {

// The answer to "can you?": yes, or no with a reason a user can act on
// ("K=4100 is not a multiple of 32 (MX block)").
struct Verdict {
  bool ok = true;
  std::string reason;

  static Verdict yes() { return {}; }
  static Verdict no(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const { return ok; }
};

// A kernel's processed per-layer state as named host tensors: what a processed-weight cache stores
// (weight_cache.hpp). `layout_version` names the layout of exactly these tensors; a kernel bumps it whenever
// what it exports (or how it reads it back) changes, so that entries written by another version miss.
struct ProcessedWeights {
  uint32_t layout_version = 0;
  std::vector<std::pair<std::string, Tensor>> tensors;  // contiguous host tensors, unique names

  // The named tensor, or an error naming it and the names present.
  Result<Tensor> get(const std::string& tensor_name) const;
};

// One range of M (activation rows) of a kernel's apply and the registered kernel that runs it there. A hybrid
// kernel routes each apply by M to other registered kernels (forcing one of those runs its route for every
// M); a kernel that runs every M itself declares one route, its own name. Kernels whose own code changes
// with M (tile shapes, split-K) may declare several ranges naming themselves, the `why` saying what differs.
struct MRoute {
  static constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();
  int64_t m_min = 1;
  int64_t m_max = kNoLimit;  // inclusive; kNoLimit: every larger M
  std::string kernel;        // a registered kernel name (QLINEAR_FORCE_KERNEL reaches it)
  std::string why;           // what runs there and why there, for explain; may be empty

  bool contains(int64_t m) const { return m >= m_min && m <= m_max; }
  // "M 1..8", "M 9+", "M 1+" (every M).
  std::string range() const;
};

class LinearKernel {
 public:
  virtual ~LinearKernel() = default;

  // Registry name: the file, the class and this string agree ("reference_mxfp8", "x86_avx512_int8").
  virtual std::string_view name() const = 0;
  virtual Family family() const = 0;
  // One line for `qlinear kernels`: what it computes and on what.
  virtual std::string_view summary() const = 0;

  // Can it run on this platform (ISA, compute capability, build)?
  virtual Verdict is_supported(const Platform& platform) const = 0;
  // Can it implement this layer (formats, scales, alignment, shapes)? One guard per line, first failure wins.
  virtual Verdict can_implement(const LinearConfig& config) const = 0;

  // The key of pre-quantized activations apply() takes as is; none when it only takes dense input.
  virtual std::optional<QuantKey> input_quant_key(const LinearConfig& config) const;
  // x [M, K] quantized with the layer's activation key as apply() would quantize it, except that per-token
  // scales come from `row_amax` (f32 [M], on x's device) instead of x's own rows: a tensor-parallel row
  // layer holds a slice of K and quantizes it with the full row's all-reduced maximum. The result is an
  // activation apply() takes (its key is input_quant_key's). The default serves host kernels: host tensors,
  // the reference quantizer's rule (quantize_activation_with_row_amax); the CUDA kernels quantize on the GPU.
  virtual Result<QuantizedTensor> quantize_input(const LinearLayer& layer, const Tensor& x,
                                                 const Tensor& row_amax) const;
  // True when process_weights_after_loading only rewrites tensors, so its results can be saved and reused
  // (export_processed / import_processed work).
  virtual bool supports_pre_processed_weights() const { return false; }
  // The layout version export_processed writes (meaningful when supports_pre_processed_weights()).
  virtual uint32_t processed_layout_version() const { return 0; }

  // Checks the layer's tensors against its config, then rewrites them into this kernel's layout. Once.
  Status process_weights_after_loading(LinearLayer& layer) const;
  // The state process_weights_after_loading left in `layer` (processed by this kernel) as host tensors.
  Result<ProcessedWeights> export_processed(const LinearLayer& layer) const;
  // The inverse, in place of process_weights_after_loading: the same checks on the unprocessed layer (its
  // checkpoint tensors, as loaded), then the state rebuilt from `weights` instead of computed. Refuses another
  // layout version and any tensor whose name, dtype or shape differs from what this layer's config implies;
  // on error the layer is left unprocessed. The caller vouches that `weights` came from export_processed of
  // a layer with the same checkpoint tensors (weight_cache.hpp keys entries by their content).
  Status import_processed(LinearLayer& layer, const ProcessedWeights& weights) const;
  // y[M, N] = x[M, K] W^T (+ bias[N]) into `out` (allocated, out_dtype, [M, N]). Checks shapes and dtypes.
  Status apply(const LinearLayer& layer, const Activation& x, const Tensor* bias, Tensor& out) const;
  // Allocating form.
  Result<Tensor> apply(const LinearLayer& layer, const Activation& x, const Tensor* bias = nullptr) const;
  // What runs for which M on a layer of this config, ranges ascending from M = 1 and covering every M. The
  // default is one route, this kernel, for every M.
  virtual std::vector<MRoute> m_routes(const LinearConfig& config) const;
  // The registered kernel that runs this apply (one of m_routes' kernels); what QLINEAR_LOG=dispatch
  // names on every apply. Routes that also depend on the processed weights (a hybrid's data check) or on a
  // pre-quantized input are decided here from the layer's state. The default: this kernel.
  virtual std::string_view apply_route(const LinearLayer& layer, const Activation& x) const;
  // The processed weight read back as the checkpoint stored it (row-major [N, K] codes, packed where the
  // format packs), for code that inspects weights directly (vLLM's row_major_weight).
  virtual Result<Tensor> row_major_weight(const LinearLayer& layer) const;

 protected:
  virtual Status process_impl(LinearLayer& layer) const = 0;
  // Called with shapes, dtypes and the activation key already checked.
  virtual Status apply_impl(const LinearLayer& layer, const Activation& x, const Tensor* bias,
                            Tensor& out) const = 0;
  // Kernels that support pre-processed weights override both (the defaults refuse).
  virtual Result<ProcessedWeights> export_impl(const LinearLayer& layer) const;
  virtual Status import_impl(LinearLayer& layer, const ProcessedWeights& weights) const;
};

// Import helper: `weights`' tensor `tensor_name`, checked to be a host `dtype` tensor of `shape`.
Result<Tensor> expect_processed_tensor(const ProcessedWeights& weights, const std::string& tensor_name, DType dtype,
                                       const Shape& shape);

// Checks that a layer's checkpoint tensors have the names, dtypes and shapes its config implies
// (the contract in docs/FORMATS.md). Every kernel's process step calls it before touching data.
Status validate_layer_tensors(const LinearLayer& layer);

}  // namespace qlinear

namespace qlinear {

// Which keys a family admits: the contract every kernel of the family starts from (src/core/contract.cpp).
struct FamilyContract {
  Family family;
  std::span<const QuantKey> weight_keys;
  std::span<const QuantKey> activation_keys;  // quantized-activation keys
  bool allows_unquantized_activations;        // weight-only (A16) variants
};
const FamilyContract& family_contract(Family family);

// Is the config well-formed for its family (keys, dtypes, shapes, shard widths, block divisibility)?
// Selection checks this before asking any kernel, so kernels may assume it.
Verdict check_config(const LinearConfig& config);

}  // namespace qlinear
