// qlinear._qlinear: the Python bindings (nanobind), this file the module definition; arrays.cpp (DLPack),
// tables.cpp (names, selections) and layers.cpp (load, quantize, process, apply) do the work, declared in
// bindings.hpp. The package python/qlinear/ wraps the module; read its __init__.py first. The design:
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
#include <string>
#include <vector>

#include "bindings.hpp"
#include "qlinear/formats.hpp"
#include "qlinear/quant_key.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {
// "; activation scales dynamic, global scale static (input_global_scale)" and the like: whether a layer's
// activations are quantized with scales it stores or with scales each call computes.
std::string activation_scales_text(const qlinear::LinearConfig& c) {
  if (!c.activation_key) return "; activations unquantized";
  const qlinear::QuantKey& k = *c.activation_key;
  std::string s = std::string("; activation scales ") + (k.scale.is_static ? "static (input_scale)" : "dynamic");
  if (k.scale2) {
    s += k.scale2->is_static ? ", global scale static (input_global_scale)" : ", global scale dynamic (per call)";
  }
  return s;
}
}  // namespace

NB_MODULE(_qlinear, m) {
  using namespace qlinear;
  using namespace qlinear::python;
  m.doc() = "qlinear's C++ library, bound with nanobind (use the qlinear package, not this module)";

  nb::exception<Error>(m, "Error", PyExc_Exception);

  m.def("cpu_threads", &cpu_threads, "The most threads one CPU kernel call uses (platform.hpp)");
  m.def("set_cpu_threads", &set_cpu_threads, "n"_a,
        "Cap the threads of CPU kernel calls; 0 restores QLINEAR_NUM_THREADS / the CPUs this process may use");
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
             PySelection sel = make_selection(
                 explain_selection(l.layer.config, platform_or_host(p), select_options(disabled, force, read_env)));
             sel.text = l.where() + ": " + l.layer.config.to_string() + activation_scales_text(l.layer.config) +
                        "\n" + sel.text;
             return sel;
           },
           "platform"_a = nb::none(), "disabled"_a = std::vector<std::string>{}, "force"_a = "",
           "read_environment"_a = true,
           "The layer's config (with whether its activation scales are static or dynamic), then every candidate "
           "kernel with its verdict")
      .def("process", &process, "kernel"_a = nb::none(), "platform"_a = nb::none(),
           "disabled"_a = std::vector<std::string>{}, "force"_a = "", "read_environment"_a = true,
           "Selects a kernel (or takes the one named) and runs its process_weights_after_loading, once")
      .def("_apply_into", &apply_into, "x"_a, "out"_a, nb::arg("bias").none() = nb::none(), "use_layer_bias"_a = true,
           "stream"_a = nb::none(), nb::arg("row_amax").none() = nb::none())
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
        "input_max"_a, "dynamic_input_global_scale"_a, "mx_rule"_a, "logical_widths"_a, "input_dtype"_a, "out_dtype"_a);
}
