// The oracle: evaluates any graph op by op with plain loops, one full tensor per node, no
// fusion and no code generation. Tests compare every compiled result against it.
#pragma once
#include <metajit/var.h>

#include <cstring>
#include <type_traits>
#include <vector>

namespace metajit {

void check_host_tensor_dtype(DType have, DType want);  // DTypeError on mismatch

struct HostTensor {
  DType dtype = DType::Float32;
  Shape shape;
  std::vector<unsigned char> bytes;  // row-major; Bool as one byte 0/1

  template <class T>
  std::vector<T> as() const;              // T must match dtype (bool for Bool), else DTypeError
  std::vector<double> as_double() const;  // any dtype, converted
};

// Evaluates `vars` without changing them (no node is realized).
std::vector<HostTensor> interpret(const std::vector<Var>& vars);
HostTensor interpret(const Var& v);

template <class T>
std::vector<T> HostTensor::as() const {
  check_host_tensor_dtype(dtype, dtype_of<T>());
  std::vector<T> out(bytes.size() / sizeof(T));
  if constexpr (std::is_same_v<T, bool>) {  // vector<bool> is packed: copy element-wise
    for (size_t i = 0; i < out.size(); ++i) out[i] = bytes[i] != 0;
  } else if (!out.empty()) {
    std::memcpy(static_cast<void*>(out.data()), bytes.data(), bytes.size());
  }
  return out;
}

}  // namespace metajit
