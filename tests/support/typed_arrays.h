// Arrays of any dtype from double values, for tests that run one case over every dtype.
#pragma once
#include <metajit/metajit.h>

#include <cstdint>
#include <vector>

namespace metajit_test {

// `values` as integers of type T: through int64, wrapping (a negative double converted to an
// unsigned type directly would be undefined).
template <class T>
std::vector<T> wrapped(const std::vector<double>& values) {
  std::vector<T> out;
  for (double x : values) out.push_back(static_cast<T>(static_cast<int64_t>(x)));
  return out;
}

// An array of dtype `dt` holding `values` converted as C++ does (bool: non-zero; the 8- and
// 16-bit integers wrap; the half types round to nearest even).
inline metajit::Var make_array(metajit::DType dt, const std::vector<double>& values,
                               metajit::Shape shape) {
  using metajit::DType;
  switch (dt) {
    case DType::Bool: {
      std::vector<bool> v;
      for (double x : values) v.push_back(x != 0);
      return metajit::array(v, std::move(shape));
    }
    case DType::Int32:
      return metajit::array(std::vector<int32_t>(values.begin(), values.end()), std::move(shape));
    case DType::Int64:
      return metajit::array(std::vector<int64_t>(values.begin(), values.end()), std::move(shape));
    case DType::Float32:
      return metajit::array(std::vector<float>(values.begin(), values.end()), std::move(shape));
    case DType::Float64:
      return metajit::array(values, std::move(shape));
    case DType::Int8:
      return metajit::array(wrapped<int8_t>(values), std::move(shape));
    case DType::UInt8:
      return metajit::array(wrapped<uint8_t>(values), std::move(shape));
    case DType::Int16:
      return metajit::array(wrapped<int16_t>(values), std::move(shape));
    case DType::Float16: {
      std::vector<metajit::float16> v;
      for (double x : values) v.push_back(metajit::float16(float(x)));
      return metajit::array(v, std::move(shape));
    }
    case DType::BFloat16: {
      std::vector<metajit::bfloat16> v;
      for (double x : values) v.push_back(metajit::bfloat16(float(x)));
      return metajit::array(v, std::move(shape));
    }
  }
  return {};
}
inline metajit::Var make_array(metajit::DType dt, const std::vector<double>& values) {
  return make_array(dt, values, {int64_t(values.size())});
}

}  // namespace metajit_test
