// Arrays of any dtype from double values, for tests that run one case over every dtype.
#pragma once
#include <metajit/metajit.h>

#include <cstdint>
#include <vector>

namespace metajit_test {

// An array of dtype `dt` holding `values` converted as C++ does (bool: non-zero).
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
  }
  return {};
}
inline metajit::Var make_array(metajit::DType dt, const std::vector<double>& values) {
  return make_array(dt, values, {int64_t(values.size())});
}

}  // namespace metajit_test
