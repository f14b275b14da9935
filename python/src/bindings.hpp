#pragma once
// What the binding's translation units share (python/src/): the exception, the wrappers around qlinear's
// tables and layers, and the functions the module definition (qlinear_ext.cpp) binds. The why of each is at
// the top of qlinear_ext.cpp.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "qlinear/kernel.hpp"
#include "qlinear/layer.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/scheme.hpp"
#include "qlinear/tensor.hpp"

namespace qlinear::python {

namespace nb = nanobind;

// Thrown for every qlinear error; registered as the Python exception qlinear.Error.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check(const Status& s) {
  if (!s) throw Error(s.message());
}
template <class T>
T unwrap(Result<T> r) {
  if (!r) throw Error(r.message());
  return std::move(r).value();
}

DType parse_dtype(const std::string& text, const char* what);
inline std::string dtype_str(DType d) { return std::string(name(d)); }

// ---- Arrays (arrays.cpp) -------------------------------------------------------------------------------
using InArray = nb::ndarray<nb::ro>;  // read-only inputs (NumPy views of files, frombuffer arrays) are fine
using OutArray = nb::ndarray<>;

// A Tensor viewing an array's memory, without a copy. The array must stay alive while the tensor is used:
// callers use it within the call that received the array (or clone it).
Tensor borrow(const InArray& a, const char* what);
Tensor borrow(const OutArray& a, const char* what);
// A read-only NumPy array over a host tensor's bytes; the array keeps the tensor (and what owns its bytes,
// e.g. the checkpoint mapping) alive. bf16 comes back as uint16 bits, FP8/E8M0/packed codes as uint8.
nb::object to_numpy(const Tensor& t, const std::string& what);

// ---- Tables and selection (tables.cpp) -----------------------------------------------------------------
struct KernelRef {
  const LinearKernel* k = nullptr;
};
struct SchemeRef {
  const Scheme* s = nullptr;
};
const Scheme& scheme_by_name(const std::string& name);
KernelRef kernel_by_name(const std::string& name);
CpuFeatures features_from_names(const std::vector<std::string>& names);

struct Candidate {
  KernelRef kernel;
  bool chosen = false;
  std::string reason;
};
struct PySelection {
  std::optional<KernelRef> kernel;
  std::vector<Candidate> candidates;
  std::string forced;
  std::string text;
};
SelectOptions select_options(const std::vector<std::string>& disabled, const std::string& force, bool read_env);
PySelection make_selection(const Selection& s);
inline Platform platform_or_host(const std::optional<Platform>& p) { return p ? *p : Platform::host_cpu(); }

// ---- Layers (layers.cpp) -------------------------------------------------------------------------------
struct Layer {
  LinearLayer layer;
  Tensor bias;         // host bias as loaded or given (undefined: none)
  Tensor device_bias;  // the bias on the device the layer was processed for (CUDA), else undefined
  const LinearKernel* kernel = nullptr;
  std::optional<Platform> platform;  // what it was processed for
  Device device;                     // where its kernel reads activations and writes outputs
  // Loaded layers: what the checkpoint said.
  const Scheme* scheme = nullptr;
  std::string parallelism;
  std::vector<std::string> shards;
  int64_t full_n = 0;
  int64_t full_k = 0;
  int64_t checkpoint_bytes = 0;

  std::string where() const { return "layer " + (layer.name.empty() ? std::string("<unnamed>") : layer.name); }
};

KernelRef process(Layer& self, const std::optional<std::string>& kernel_name, const std::optional<Platform>& platform,
                  const std::vector<std::string>& disabled, const std::string& force, bool read_env);
// y = x W^T (+ bias) into `out`. x and out are borrowed (NumPy, PyTorch, ... through DLPack). row_amax
// (f32 [M], x's device): dynamic per-token activations quantized with these row maxima instead of their
// own (LinearKernel::quantize_input: a tensor-parallel row slice and its whole row's maximum).
void apply_into(const Layer& self, const InArray& x, const OutArray& out, const std::optional<InArray>& bias,
                bool use_layer_bias, std::optional<uintptr_t> stream, const std::optional<InArray>& row_amax);
std::vector<Layer> load(const std::string& path, int tp_rank, int tp_size, const std::string& layers, bool fuse,
                        const std::string& input_dtype, const std::string& out_dtype, std::string& quant_method,
                        std::vector<std::string>& unquantized);
Layer quantize_dense(const std::string& name, const std::string& scheme, const InArray& weight,
                     const std::optional<InArray>& bias, float input_min, float input_max,
                     bool dynamic_input_global_scale, const std::string& mx_rule, const std::vector<int64_t>& logical_widths,
                     const std::string& input_dtype, const std::string& out_dtype);

}  // namespace qlinear::python
