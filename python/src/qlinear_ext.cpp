// qlinear._qlinear: the Python bindings (nanobind). The package python/qlinear/ wraps them; read its
// __init__.py first. What lives here and why:
//   - value wrappers (KernelRef, SchemeRef) around qlinear's static tables, so that Python never owns or
//     frees a kernel or a scheme;
//   - Layer: a LinearLayer plus its bias and the kernel that processed it, owned by its Python object;
//   - arrays cross through DLPack (nb::ndarray): NumPy and PyTorch inputs are borrowed for the duration of
//     one call, never copied here; outputs are written into an array the caller allocated (the framework's
//     allocator, its device, its stream), and tensors handed back to Python keep their owner alive;
//   - every qlinear error becomes qlinear.Error with the library's message, unchanged.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "qlinear/formats.hpp"
#include "qlinear/kernel.hpp"
#include "qlinear/layer.hpp"
#include "qlinear/loader.hpp"
#include "qlinear/make_layer.hpp"
#include "qlinear/platform.hpp"
#include "qlinear/quant_key.hpp"
#include "qlinear/registry.hpp"
#include "qlinear/scheme.hpp"
#include "qlinear/tensor.hpp"
#if QLINEAR_WITH_CUDA
#include "qlinear/cuda.hpp"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace qlinear::python {
namespace {

// Thrown for every qlinear error; registered as the Python exception qlinear.Error.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(const Status& s) {
  if (!s) throw Error(s.message());
}
template <class T>
T unwrap(Result<T> r) {
  if (!r) throw Error(r.message());
  return std::move(r).value();
}

DType parse_dtype(const std::string& text, const char* what) {
  const auto d = dtype_from_name(text);
  if (!d) throw Error(std::string(what) + ": unknown dtype '" + text + "'; expected f32, bf16 or f16");
  return *d;
}

// ---- Arrays <-> Tensors --------------------------------------------------------------------------------

std::string dlpack_dtype_name(nb::dlpack::dtype dt) {
  return "DLPack dtype code " + std::to_string(dt.code) + " with " + std::to_string(dt.bits) + " bits";
}

// The qlinear dtype of an array. uint16 arrays are bf16 bit patterns (NumPy has no bf16 of its own).
DType dtype_of(nb::dlpack::dtype dt, const char* what) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(dt.code);
  if (dt.lanes == 1) {
    if (code == Code::Float && dt.bits == 32) return DType::kF32;
    if (code == Code::Float && dt.bits == 16) return DType::kF16;
    if (code == Code::Float && dt.bits == 64) return DType::kF64;
    if (code == Code::Bfloat && dt.bits == 16) return DType::kBF16;
    if (code == Code::UInt && dt.bits == 16) return DType::kBF16;
    if (code == Code::Int && dt.bits == 8) return DType::kI8;
    if (code == Code::UInt && dt.bits == 8) return DType::kU8;
    if (code == Code::Int && dt.bits == 32) return DType::kI32;
    if (code == Code::Int && dt.bits == 64) return DType::kI64;
    if (code == Code::Float8_E4M3FN && dt.bits == 8) return DType::kF8E4M3;
    if (code == Code::Float8_E5M2 && dt.bits == 8) return DType::kF8E5M2;
  }
  throw Error(std::string(what) + ": unsupported array dtype (" + dlpack_dtype_name(dt) +
              "); expected float32, float16, bfloat16 (or uint16 holding bf16 bits), float64 or an integer type");
}

// A Tensor viewing an array's memory, without a copy. The array must stay alive while the tensor is used:
// callers use it within the call that received the array (or clone it).
using InArray = nb::ndarray<nb::ro>;  // read-only inputs (NumPy views of files, frombuffer arrays) are fine
using OutArray = nb::ndarray<>;

template <class Array>
Tensor borrow(const Array& a, const char* what) {
  const DType dtype = dtype_of(a.dtype(), what);
  Shape shape;
  int64_t expected_stride = 1;
  for (size_t i = 0; i < a.ndim(); ++i) shape.push_back(static_cast<int64_t>(a.shape(i)));
  for (size_t i = a.ndim(); i-- > 0;) {
    if (shape[i] != 1 && a.stride(i) != expected_stride) {
      throw Error(std::string(what) + ": the array must be C-contiguous (row-major, dense); got shape " +
                  shape_to_string(shape) + " with strides that are not");
    }
    expected_stride *= shape[i];
  }
  Device device;
  if (a.device_type() == nb::device::cpu::value) {
    device = Device{DeviceKind::kCpu, 0};
  } else if (a.device_type() == nb::device::cuda::value) {
    device = Device{DeviceKind::kCuda, a.device_id()};
  } else {
    throw Error(std::string(what) + ": arrays on DLPack device type " + std::to_string(a.device_type()) +
                " are not supported; expected a CPU or CUDA array");
  }
  return Tensor::from_blob(const_cast<void*>(static_cast<const void*>(a.data())), dtype, shape, nullptr, device);
}

// A read-only NumPy array over a host tensor's bytes; the array keeps the tensor (and what owns its bytes,
// e.g. the checkpoint mapping) alive. bf16 comes back as uint16 bits, FP8/E8M0/packed codes as uint8.
nb::object to_numpy(const Tensor& t0, const std::string& what) {
  if (!t0.defined()) return nb::none();
  if (t0.device().kind != DeviceKind::kCpu) {
    throw Error(what + " is on " + t0.device().to_string() + "; only host tensors can be read from Python");
  }
  Tensor t = t0.is_contiguous() ? t0 : t0.contiguous();
  nb::dlpack::dtype dt;
  switch (t.dtype()) {
    case DType::kF64: dt = nb::dtype<double>(); break;
    case DType::kF32: dt = nb::dtype<float>(); break;
    case DType::kF16: dt = {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1}; break;
    case DType::kBF16: dt = nb::dtype<uint16_t>(); break;
    case DType::kI8: dt = nb::dtype<int8_t>(); break;
    case DType::kI16: dt = nb::dtype<int16_t>(); break;
    case DType::kI32: dt = nb::dtype<int32_t>(); break;
    case DType::kI64: dt = nb::dtype<int64_t>(); break;
    default: dt = nb::dtype<uint8_t>(); break;  // FP8, E8M0 and packed sub-byte codes: their bytes
  }
  std::vector<size_t> shape;
  for (int64_t s : t.shape()) shape.push_back(static_cast<size_t>(s));
  auto* keep = new Tensor(t);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  nb::ndarray<nb::numpy, nb::ro> arr(t.raw(), shape.size(), shape.data(), owner, nullptr, dt);
  return arr.cast();
}

// ---- Tables --------------------------------------------------------------------------------------------

struct KernelRef {
  const LinearKernel* k = nullptr;
};
struct SchemeRef {
  const Scheme* s = nullptr;
};

const Scheme& scheme_by_name(const std::string& name) {
  const Scheme* s = find_scheme(name);
  if (s == nullptr) throw Error("unknown scheme '" + name + "'; known schemes: " + scheme_names());
  return *s;
}

KernelRef kernel_by_name(const std::string& name) {
  const LinearKernel* k = find_kernel(name);
  if (k == nullptr) {
    std::string known;
    for (const LinearKernel* each : all_kernels()) known += (known.empty() ? "" : ", ") + std::string(each->name());
    throw Error("unknown kernel '" + name + "'; known kernels: " + known);
  }
  return {k};
}

CpuFeatures features_from_names(const std::vector<std::string>& names) {
  CpuFeatures f;
  struct Flag {
    const char* name;
    bool CpuFeatures::*field;
  };
  static const Flag kFlags[] = {
      {"avx2", &CpuFeatures::avx2},           {"fma", &CpuFeatures::fma},
      {"f16c", &CpuFeatures::f16c},           {"avx512f", &CpuFeatures::avx512f},
      {"avx512bw", &CpuFeatures::avx512bw},   {"avx512vl", &CpuFeatures::avx512vl},
      {"avx512dq", &CpuFeatures::avx512dq},   {"avx512_vnni", &CpuFeatures::avx512vnni},
      {"avx512_bf16", &CpuFeatures::avx512bf16}, {"avx512_fp16", &CpuFeatures::avx512fp16},
      {"avx_vnni", &CpuFeatures::avx_vnni},   {"amx_tile", &CpuFeatures::amx_tile},
      {"amx_int8", &CpuFeatures::amx_int8},   {"amx_bf16", &CpuFeatures::amx_bf16},
  };
  for (const std::string& n : names) {
    bool found = false;
    for (const Flag& flag : kFlags) {
      if (n == flag.name) f.*flag.field = found = true;
    }
    if (!found) {
      std::string known;
      for (const Flag& flag : kFlags) known += (known.empty() ? "" : ", ") + std::string(flag.name);
      throw Error("Platform.synthetic_cpu: unknown CPU feature '" + n + "'; known: " + known);
    }
  }
  return f;
}

// ---- Selection -----------------------------------------------------------------------------------------

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

SelectOptions select_options(const std::vector<std::string>& disabled, const std::string& force, bool read_env) {
  SelectOptions o;
  o.disabled = disabled;
  o.force = force;
  o.read_environment = read_env;
  for (const std::string& name : disabled) kernel_by_name(name);  // unknown names are an error, as in the env
  if (!force.empty()) kernel_by_name(force);
  return o;
}

PySelection make_selection(const Selection& s) {
  PySelection p;
  if (s.kernel != nullptr) p.kernel = KernelRef{s.kernel};
  for (const CandidateVerdict& c : s.candidates) p.candidates.push_back({KernelRef{c.kernel}, c.chosen, c.reason});
  p.forced = s.forced;
  p.text = s.explain();
  return p;
}

// ---- Layers --------------------------------------------------------------------------------------------

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

Platform platform_or_host(const std::optional<Platform>& p) { return p ? *p : Platform::host_cpu(); }

KernelRef process(Layer& self, const std::optional<std::string>& kernel_name, const std::optional<Platform>& platform,
                  const std::vector<std::string>& disabled, const std::string& force, bool read_env) {
  if (self.kernel != nullptr) {
    throw Error(self.where() + " was already processed by " + std::string(self.kernel->name()) +
                "; process() runs once per layer");
  }
  const Platform p = platform_or_host(platform);
  const LinearKernel* k = nullptr;
  if (kernel_name) {
    k = kernel_by_name(*kernel_name).k;
    const Verdict v = k->is_supported(p);
    if (!v) {
      throw Error(self.where() + ": kernel " + *kernel_name + " does not run on " + p.describe() + ": " + v.reason);
    }
  } else {
    k = unwrap(select_kernel(self.layer.config, p, select_options(disabled, force, read_env)));
  }
  {
    nb::gil_scoped_release release;
    check(k->process_weights_after_loading(self.layer));
  }
  // A CUDA platform's list ends with the reference kernels, which are host code on host tensors: a kernel
  // that runs on a CPU without any ISA extension is such host code.
  const bool on_cuda = p.kind == PlatformKind::kCuda && !k->is_supported(Platform::synthetic_cpu({}));
  self.device = on_cuda ? Device{DeviceKind::kCuda, p.cuda ? p.cuda->index : 0} : Device{DeviceKind::kCpu, 0};
  if (on_cuda && self.bias.defined()) {
#if QLINEAR_WITH_CUDA
    self.device_bias = unwrap(cuda::to_device(self.bias, self.device.index));
#endif
  }
  self.kernel = k;
  self.platform = p;
  return {k};
}

// y = x W^T (+ bias) into `out`. x and out are borrowed (NumPy, PyTorch, ... through DLPack).
void apply_into(const Layer& self, const InArray& x, const OutArray& out, const std::optional<InArray>& bias,
                bool use_layer_bias, std::optional<uintptr_t> stream) {
  if (self.kernel == nullptr) {
    throw Error(self.where() + " is not processed: call process() (it selects a kernel) before applying it");
  }
  Tensor xt = borrow(x, "apply: x");
  Tensor ot = borrow(out, "apply: out");
  const Device want = self.device;
  const bool on_cuda = want.kind == DeviceKind::kCuda;
  if (xt.device() != want || ot.device() != want) {
    throw Error("apply to " + self.where() + ": its kernel " + std::string(self.kernel->name()) + " runs on " +
                want.to_string() + ", got x on " + xt.device().to_string() + " and out on " +
                ot.device().to_string());
  }
  Tensor bt;
  if (bias) {
    bt = borrow(*bias, "apply: bias");
    if (bt.device() != want) {
      throw Error("apply to " + self.where() + ": bias on " + bt.device().to_string() + ", expected " +
                  want.to_string());
    }
  } else if (use_layer_bias) {
    bt = on_cuda ? self.device_bias : self.bias;
  }
  const Activation act = Activation::dense(xt);
  nb::gil_scoped_release release;
#if QLINEAR_WITH_CUDA
  if (on_cuda && stream) {
    cuda::StreamGuard guard(reinterpret_cast<cuda::Stream>(*stream));
    check(self.kernel->apply(self.layer, act, bt.defined() ? &bt : nullptr, ot));
    return;
  }
#else
  (void)stream;
#endif
  check(self.kernel->apply(self.layer, act, bt.defined() ? &bt : nullptr, ot));
}

std::vector<Layer> load(const std::string& path, int tp_rank, int tp_size, const std::string& layers, bool fuse,
                        const std::string& input_dtype, const std::string& out_dtype, std::string& quant_method,
                        std::vector<std::string>& unquantized) {
  LoadOptions o;
  o.tp_rank = tp_rank;
  o.tp_size = tp_size;
  o.layer_regex = layers;
  o.fuse = fuse;
  o.input_dtype = parse_dtype(input_dtype, "load_checkpoint: input_dtype");
  o.out_dtype = parse_dtype(out_dtype, "load_checkpoint: out_dtype");
  Result<LoadedModel> loaded = [&] {
    nb::gil_scoped_release release;
    return load_checkpoint(path, o);
  }();
  LoadedModel m = unwrap(std::move(loaded));
  quant_method = std::string(quant_method_name(m.config.quant_method));
  unquantized = m.unquantized;
  std::vector<Layer> out;
  for (LoadedLayer& l : m.layers) {
    Layer py;
    py.layer = std::move(l.layer);
    py.bias = l.bias;
    py.scheme = l.scheme;
    py.parallelism = l.parallelism == Parallelism::kColumn ? "column" : "row";
    py.shards = l.shards;
    py.full_n = l.full_n;
    py.full_k = l.full_k;
    py.checkpoint_bytes = l.checkpoint_bytes;
    out.push_back(std::move(py));
  }
  return out;
}

MxScaleRule parse_mx_rule(const std::string& text) {
  if (text == "ceil_over_max") return MxScaleRule::kCeilOverMax;
  if (text == "floor_log2") return MxScaleRule::kFloorLog2;
  if (text == "ocp") return MxScaleRule::kOcp;
  throw Error("quantize_layer: unknown mx_rule '" + text + "'; expected ceil_over_max, floor_log2 or ocp");
}

Layer quantize_dense(const std::string& name, const std::string& scheme, const InArray& weight,
                     const std::optional<InArray>& bias, float input_min, float input_max,
                     const std::string& mx_rule, const std::vector<int64_t>& logical_widths,
                     const std::string& input_dtype, const std::string& out_dtype) {
  const Scheme& s = scheme_by_name(scheme);
  MakeLayerOptions o;
  o.input_min = input_min;
  o.input_max = input_max;
  o.mx_rule = parse_mx_rule(mx_rule);
  o.logical_widths = logical_widths;
  o.input_dtype = parse_dtype(input_dtype, "quantize_layer: input_dtype");
  o.out_dtype = parse_dtype(out_dtype, "quantize_layer: out_dtype");
  const Tensor w = borrow(weight, "quantize_layer: weight");
  if (w.device().kind != DeviceKind::kCpu) {
    throw Error("quantize_layer: weight is on " + w.device().to_string() + "; pass a host (CPU) array");
  }
  // The layer must not keep views of the caller's array: it owns what it holds (hence the clone).
  Result<LinearLayer> made = [&] {
    nb::gil_scoped_release release;
    return quantize_layer(name, s, w.clone(), o);
  }();
  Layer py;
  py.layer = unwrap(std::move(made));
  if (bias) {
    const Tensor b = borrow(*bias, "quantize_layer: bias");
    if (b.device().kind != DeviceKind::kCpu || b.rank() != 1 || b.size(0) != py.layer.config.n) {
      throw Error("quantize_layer: bias must be a host array of shape [" + std::to_string(py.layer.config.n) +
                  "], got " + b.describe() + " on " + b.device().to_string());
    }
    py.bias = b.clone();
  }
  py.scheme = &s;
  py.full_n = py.layer.config.n;
  py.full_k = py.layer.config.k;
  return py;
}

std::string dtype_str(DType d) { return std::string(name(d)); }

}  // namespace
}  // namespace qlinear::python

NB_MODULE(_qlinear, m) {
  using namespace qlinear;
  using namespace qlinear::python;
  m.doc() = "qlinear's C++ library, bound with nanobind (use the qlinear package, not this module)";

  nb::exception<Error>(m, "Error", PyExc_Exception);

  m.def("built_with_cuda", &built_with_cuda, "True when the library was compiled with its CUDA backend");
  m.def("formats", [] {
    std::vector<std::string> names;
    for (const FormatTraits& t : all_formats()) names.emplace_back(t.name);
    return names;
  }, "Names of every element and scale format (include/qlinear/formats.hpp)");

  nb::class_<QuantKey>(m, "QuantKey", "An operand's element format and scale layout (quant_key.hpp)")
      .def_prop_ro("name", [](const QuantKey& k) { return key_name(k); })
      .def_prop_ro("dtype", [](const QuantKey& k) { return dtype_str(k.dtype); })
      .def_prop_ro("scale_dtype", [](const QuantKey& k) { return dtype_str(k.scale.dtype); })
      .def_prop_ro("is_static", [](const QuantKey& k) { return k.scale.is_static; })
      .def_prop_ro("group", [](const QuantKey& k) { return k.scale.group.to_string(); })
      .def_prop_ro("symmetric", [](const QuantKey& k) { return k.symmetric; })
      .def("__eq__", [](const QuantKey& a, const QuantKey& b) { return a == b; })
      .def("__str__", &QuantKey::to_string)
      .def("__repr__", [](const QuantKey& k) { return "<QuantKey " + key_name(k) + ">"; });
  m.def("named_keys", [] {
    std::vector<std::pair<std::string, QuantKey>> out;
    for (const NamedKey& k : named_keys()) out.emplace_back(k.name, k.key);
    return out;
  }, "Every named key as (name, QuantKey)");

  nb::class_<SchemeRef>(m, "Scheme", "A named (family, weight key, activation key) combination (scheme.hpp)")
      .def_prop_ro("name", [](const SchemeRef& s) { return std::string(s.s->name); })
      .def_prop_ro("family", [](const SchemeRef& s) { return std::string(family_name(s.s->family)); })
      .def_prop_ro("weight_key", [](const SchemeRef& s) { return s.s->weight_key; })
      .def_prop_ro("activation_key", [](const SchemeRef& s) { return s.s->activation_key; })
      .def_prop_ro("description", [](const SchemeRef& s) { return std::string(s.s->description); })
      .def("__repr__", [](const SchemeRef& s) { return "<Scheme " + std::string(s.s->name) + ">"; });
  m.def("schemes", [] {
    std::vector<SchemeRef> out;
    for (const Scheme& s : all_schemes()) out.push_back({&s});
    return out;
  }, "Every scheme, in table order");
  m.def("find_scheme", [](const std::string& name) { return SchemeRef{&scheme_by_name(name)}; }, "name"_a,
        "The scheme with this name; qlinear.Error listing the known ones otherwise");

  nb::class_<LinearConfig>(m, "LinearConfig", "What a kernel needs to know to decide whether it can implement a layer")
      .def_prop_ro("family", [](const LinearConfig& c) { return std::string(family_name(c.family)); })
      .def_prop_ro("weight_key", [](const LinearConfig& c) { return c.weight_key; })
      .def_prop_ro("activation_key", [](const LinearConfig& c) { return c.activation_key; })
      .def_ro("n", &LinearConfig::n)
      .def_ro("k", &LinearConfig::k)
      .def_prop_ro("input_dtype", [](const LinearConfig& c) { return dtype_str(c.input_dtype); })
      .def_prop_ro("out_dtype", [](const LinearConfig& c) { return dtype_str(c.out_dtype); })
      .def_ro("logical_widths", &LinearConfig::logical_widths)
      .def("__str__", &LinearConfig::to_string)
      .def("__repr__", [](const LinearConfig& c) { return "<LinearConfig " + c.to_string() + ">"; });
  m.def("make_config",
        [](const std::string& scheme, int64_t n, int64_t k, const std::string& input_dtype,
           const std::string& out_dtype) {
          return make_config(scheme_by_name(scheme), n, k, parse_dtype(input_dtype, "make_config: input_dtype"),
                             parse_dtype(out_dtype, "make_config: out_dtype"));
        },
        "scheme"_a, "n"_a, "k"_a, "input_dtype"_a = "bf16", "out_dtype"_a = "bf16",
        "A config for a scheme at shape N (out features) x K (in features)");

  nb::class_<Platform>(m, "Platform", "What a machine can run: x86 ISA features or a CUDA device (platform.hpp)")
      .def_static("host_cpu", &Platform::host_cpu, "This machine's CPU (honours QLINEAR_CPU_ISA)")
      .def_static("cuda", [](int index) { return unwrap(Platform::cuda_device(index)); }, "index"_a = 0,
                  "CUDA device `index`; qlinear.Error without CUDA or without the device")
      .def_static("synthetic_cuda", &Platform::synthetic_cuda, "compute_capability"_a,
                  "A CUDA platform of this compute capability (90 for Hopper), for explaining selections")
      .def_static("synthetic_cpu",
                  [](const std::vector<std::string>& features, int threads) {
                    return Platform::synthetic_cpu(features_from_names(features), threads);
                  },
                  "features"_a, "threads"_a = 1, "An x86 CPU with these features ('avx2', 'avx512_vnni', ...)")
      .def_prop_ro("kind", [](const Platform& p) { return std::string(platform_kind_name(p.kind)); })
      .def_prop_ro("cpu_features", [](const Platform& p) { return p.cpu.to_string(); })
      .def_prop_ro("compute_capability",
                   [](const Platform& p) {
                     return p.cuda ? std::optional<int>(p.cuda->compute_capability) : std::nullopt;
                   })
      .def_ro("num_threads", &Platform::num_threads)
      .def("describe", &Platform::describe)
      .def("__str__", &Platform::describe)
      .def("__repr__", [](const Platform& p) { return "<Platform " + p.describe() + ">"; });

  nb::class_<Verdict>(m, "Verdict", "Yes, or no with a reason a user can act on")
      .def_ro("ok", &Verdict::ok)
      .def_ro("reason", &Verdict::reason)
      .def("__bool__", [](const Verdict& v) { return v.ok; })
      .def("__repr__", [](const Verdict& v) {
        return v.ok ? std::string("<Verdict yes>") : "<Verdict no: " + v.reason + ">";
      });

  nb::class_<KernelRef>(m, "Kernel", "A linear kernel of one backend and family (kernel.hpp)")
      .def_prop_ro("name", [](const KernelRef& k) { return std::string(k.k->name()); })
      .def_prop_ro("family", [](const KernelRef& k) { return std::string(family_name(k.k->family())); })
      .def_prop_ro("summary", [](const KernelRef& k) { return std::string(k.k->summary()); })
      .def_prop_ro("supports_pre_processed_weights",
                   [](const KernelRef& k) { return k.k->supports_pre_processed_weights(); })
      .def("is_supported", [](const KernelRef& k, const Platform& p) { return k.k->is_supported(p); }, "platform"_a)
      .def("can_implement", [](const KernelRef& k, const LinearConfig& c) { return k.k->can_implement(c); }, "config"_a)
      .def("input_quant_key", [](const KernelRef& k, const LinearConfig& c) { return k.k->input_quant_key(c); },
           "config"_a, "The key of pre-quantized activations it takes as is, or None")
      .def("__eq__", [](const KernelRef& a, const KernelRef& b) { return a.k == b.k; })
      .def("__hash__", [](const KernelRef& k) { return reinterpret_cast<uintptr_t>(k.k); })
      .def("__repr__", [](const KernelRef& k) { return "<Kernel " + std::string(k.k->name()) + ">"; });
  m.def("kernels", [] {
    std::vector<KernelRef> out;
    for (const LinearKernel* k : all_kernels()) out.push_back({k});
    return out;
  }, "Every kernel this build registers");
  m.def("find_kernel", &kernel_by_name, "name"_a,
        "The kernel with this name; qlinear.Error listing the known ones otherwise");
  m.def("priority_list", [](const Platform& p) {
    std::vector<KernelRef> out;
    for (const LinearKernel* k : priority_list(p)) out.push_back({k});
    return out;
  }, "platform"_a, "The platform's priority list, best first, reference last");

  nb::class_<Candidate>(m, "Candidate", "One kernel of a selection and its verdict")
      .def_ro("kernel", &Candidate::kernel)
      .def_ro("chosen", &Candidate::chosen)
      .def_ro("reason", &Candidate::reason)
      .def("__repr__", [](const Candidate& c) {
        return "<Candidate " + std::string(c.kernel.k->name()) + (c.chosen ? " chosen" : " no: " + c.reason) + ">";
      });
  nb::class_<PySelection>(m, "Selection", "Every candidate of a selection with its verdict (registry.hpp)")
      .def_ro("kernel", &PySelection::kernel)
      .def_ro("candidates", &PySelection::candidates)
      .def_ro("forced", &PySelection::forced)
      .def("explain", [](const PySelection& s) { return s.text; },
           "One line per candidate, as `qlinear kernels --explain`")
      .def("__str__", [](const PySelection& s) { return s.text; })
      .def("__repr__", [](const PySelection& s) {
        return "<Selection " + (s.kernel ? std::string(s.kernel->k->name()) : std::string("none")) + ">";
      });

  m.def("explain_selection",
        [](const LinearConfig& c, const std::optional<Platform>& p, const std::vector<std::string>& disabled,
           const std::string& force, bool read_env) {
          return make_selection(explain_selection(c, platform_or_host(p), select_options(disabled, force, read_env)));
        },
        "config"_a, "platform"_a = nb::none(), "disabled"_a = std::vector<std::string>{}, "force"_a = "",
        "read_environment"_a = true, "Evaluates every candidate (never fails); platform defaults to this CPU");
  m.def("select_kernel",
        [](const LinearConfig& c, const std::optional<Platform>& p, const std::vector<std::string>& disabled,
           const std::string& force, bool read_env) {
          return KernelRef{unwrap(select_kernel(c, platform_or_host(p), select_options(disabled, force, read_env)))};
        },
        "config"_a, "platform"_a = nb::none(), "disabled"_a = std::vector<std::string>{}, "force"_a = "",
        "read_environment"_a = true, "The chosen kernel, or qlinear.Error listing every candidate and its reason");

  nb::class_<Layer>(m, "Layer",
                    "A quantized linear layer y = x W^T + b, loaded or quantized, then processed by a kernel")
      .def_prop_ro("name", [](const Layer& l) { return l.layer.name; })
      .def_prop_ro("config", [](const Layer& l) { return l.layer.config; })
      .def_prop_ro("scheme", [](const Layer& l) {
        return l.scheme ? std::optional<SchemeRef>(SchemeRef{l.scheme}) : std::nullopt;
      })
      .def_prop_ro("in_features", [](const Layer& l) { return l.layer.config.k; })
      .def_prop_ro("out_features", [](const Layer& l) { return l.layer.config.n; })
      .def_prop_ro("tp_rank", [](const Layer& l) { return l.layer.tp_rank; })
      .def_prop_ro("tp_size", [](const Layer& l) { return l.layer.tp_size; })
      .def_ro("parallelism", &Layer::parallelism, "'column' or 'row' for loaded layers, '' otherwise")
      .def_ro("shards", &Layer::shards, "Checkpoint modules fused into this layer")
      .def_ro("full_n", &Layer::full_n)
      .def_ro("full_k", &Layer::full_k)
      .def_ro("checkpoint_bytes", &Layer::checkpoint_bytes)
      .def_prop_ro("kernel", [](const Layer& l) {
        return l.kernel ? std::optional<KernelRef>(KernelRef{l.kernel}) : std::nullopt;
      }, "The kernel that processed it, None before process()")
      .def_prop_ro("platform", [](const Layer& l) { return l.platform; })
      .def_prop_ro("device", [](const Layer& l) -> std::optional<std::string> {
        if (l.kernel == nullptr) return std::nullopt;
        return l.device.to_string();
      }, "Where its kernel takes tensors ('cpu', 'cuda:0'); None before process()")
      .def_prop_ro("bias", [](const Layer& l) { return to_numpy(l.bias, l.where() + " bias"); })
      .def("param_names", [](const Layer& l) {
        std::vector<std::string> names;
        for (const auto& [name, t] : l.layer.params) names.push_back(name);
        return names;
      })
      .def("param", [](const Layer& l, const std::string& name) {
        return to_numpy(unwrap(l.layer.get(name)), l.where() + " param " + name);
      }, "name"_a, "A checkpoint tensor (read-only NumPy view; bf16 as uint16 bits, FP8/E8M0/packed codes as uint8)")
      .def("param_dtype", [](const Layer& l, const std::string& name) {
        return dtype_str(unwrap(l.layer.get(name)).dtype());
      }, "name"_a)
      .def("explain",
           [](const Layer& l, const std::optional<Platform>& p, const std::vector<std::string>& disabled,
              const std::string& force, bool read_env) {
             return make_selection(
                 explain_selection(l.layer.config, platform_or_host(p), select_options(disabled, force, read_env)));
           },
           "platform"_a = nb::none(), "disabled"_a = std::vector<std::string>{}, "force"_a = "",
           "read_environment"_a = true, "Every candidate kernel for this layer with its verdict")
      .def("process", &process, "kernel"_a = nb::none(), "platform"_a = nb::none(),
           "disabled"_a = std::vector<std::string>{}, "force"_a = "", "read_environment"_a = true,
           "Selects a kernel (or takes the one named) and runs its process_weights_after_loading, once")
      .def("_apply_into", &apply_into, "x"_a, "out"_a, nb::arg("bias").none() = nb::none(), "use_layer_bias"_a = true,
           "stream"_a = nb::none())
      .def("__repr__", [](const Layer& l) {
        return "<Layer " + l.layer.name + " " + l.layer.config.to_string() +
               (l.kernel ? " kernel=" + std::string(l.kernel->name()) : std::string(" unprocessed")) + ">";
      });

  m.def("_load_checkpoint",
        [](const std::string& path, int tp_rank, int tp_size, const std::string& layers, bool fuse,
           const std::string& input_dtype, const std::string& out_dtype) {
          std::string method;
          std::vector<std::string> unquantized;
          std::vector<Layer> loaded = load(path, tp_rank, tp_size, layers, fuse, input_dtype, out_dtype, method,
                                           unquantized);
          return nb::make_tuple(std::move(loaded), method, unquantized);
        },
        "path"_a, "tp_rank"_a, "tp_size"_a, "layers"_a, "fuse"_a, "input_dtype"_a, "out_dtype"_a);
  m.def("_quantize_layer", &quantize_dense, "name"_a, "scheme"_a, "weight"_a, nb::arg("bias").none(), "input_min"_a,
        "input_max"_a, "mx_rule"_a, "logical_widths"_a, "input_dtype"_a, "out_dtype"_a);
}
