// Arrays <-> Tensors through DLPack (nb::ndarray): inputs are borrowed, never copied; tensors handed back
// to Python keep their owner alive.
#include <string>
#include <vector>

#include "bindings.hpp"

namespace qlinear::python {

namespace {

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

template <class Array>
Tensor borrow_any(const Array& a, const char* what) {
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

}  // namespace

Tensor borrow(const InArray& a, const char* what) { return borrow_any(a, what); }
Tensor borrow(const OutArray& a, const char* what) { return borrow_any(a, what); }

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

}  // namespace qlinear::python
