// operator<<(std::ostream&, const Var&) (include/metajit/eval.h): a Var's dtype, shape and
// values, in numpy's nested layout, long axes cut to their ends.
#include <metajit/eval.h>

#include <ostream>
#include <string>
#include <vector>

namespace metajit {
namespace {

constexpr int64_t kEdge = 3;  // elements shown at each end of a cut axis
constexpr int64_t kCut = 6;   // axes longer than this are cut

template <class T>
void print_value(std::ostream& os, T v) {
  if constexpr (std::is_same_v<T, bool>)
    os << (v ? "true" : "false");
  else if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
    os << float(v);
  else if constexpr (sizeof(T) == 1)
    os << int(v);  // int8_t / uint8_t are characters to an ostream
  else
    os << v;
}

// The elements of `values` under axis `axis` starting at flat offset `base`.
template <class T>
void print_axis(std::ostream& os, const std::vector<T>& values, const Shape& shape, size_t axis,
                int64_t base) {
  if (axis == shape.size()) return print_value<T>(os, values[size_t(base)]);
  int64_t stride = 1;
  for (size_t k = axis + 1; k < shape.size(); ++k) stride *= shape[k];
  const int64_t n = shape[axis];
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (n > kCut && i == kEdge) {
      os << "..., ";
      i = n - kEdge;
    }
    print_axis(os, values, shape, axis + 1, base + i * stride);
    if (i + 1 < n) os << ", ";
  }
  os << ']';
}

template <class T>
void print_values(std::ostream& os, const Var& x) {
  const std::vector<T> values = x.to_vector<T>();
  if (values.empty()) {
    os << "[]";
    return;
  }
  print_axis(os, values, x.shape(), 0, 0);
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Var& x) {
  if (!x.defined()) return os << "Var()";
  os << dtype_name(x.dtype()) << shape_str(x.shape()) << ' ';
  switch (x.dtype()) {
    case DType::Bool:
      print_values<bool>(os, x);
      break;
    case DType::Int32:
      print_values<int32_t>(os, x);
      break;
    case DType::Int64:
      print_values<int64_t>(os, x);
      break;
    case DType::Float32:
      print_values<float>(os, x);
      break;
    case DType::Float64:
      print_values<double>(os, x);
      break;
    case DType::Int8:
      print_values<int8_t>(os, x);
      break;
    case DType::UInt8:
      print_values<uint8_t>(os, x);
      break;
    case DType::Int16:
      print_values<int16_t>(os, x);
      break;
    case DType::Float16:
      print_values<float16>(os, x);
      break;
    case DType::BFloat16:
      print_values<bfloat16>(os, x);
      break;
  }
  return os;
}

}  // namespace metajit
