// Compares what the compiled kernels compute with the reference interpreter (the oracle),
// without Catch2, so that the fuzzers (fuzz/) use it too; support/reference_check.h turns it
// into test assertions.
//
// The reference runs first: eval() realizes the nodes (they become leaves holding their
// buffers and drop their inputs), after which interpret() would only copy eval's own results.
//
// Tolerances, relative to the reference value but never tighter than absolute near zero:
//   Bool, Int32, Int64: exact.
//   Float32: |eval - ref| <= 1e-5 * max(1, |ref|)   (about 80 float32 ulps)
//   Float64: |eval - ref| <= 1e-12 * max(1, |ref|)
//   Float16: 4e-3, BFloat16: 3e-2 (four to eight units in the last place): the reference
//     rounds after every op, as PyTorch eager does, while a kernel keeps a fused chain's half
//     values in float32 and rounds where it stores them (docs/design.md §3)
//   Int8, UInt8, Int16: exact.
// NaN must match NaN, and an infinity must match the same infinity.
#pragma once
#include <metajit/metajit.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "support/reference_interpreter.h"

namespace metajit_test_detail {

inline double tolerance_of(metajit::DType dt) {
  switch (dt) {
    case metajit::DType::Float32:
      return 1e-5;
    case metajit::DType::Float64:
      return 1e-12;
    case metajit::DType::Float16:
      return 4e-3;
    case metajit::DType::BFloat16:
      return 3e-2;
    default:
      return 0;  // Bool and integers: exact
  }
}

// The values of a Var after eval, widened to double (exact for Bool/Int32; Int64 is compared
// separately so that values above 2^53 stay exact).
inline std::vector<double> eval_values_as_double(const metajit::Var& v) {
  using metajit::DType;
  std::vector<double> out;
  auto widen = [&](const auto& values) { out.assign(values.begin(), values.end()); };
  switch (v.dtype()) {
    case DType::Bool:
      widen(v.to_vector<bool>());
      break;
    case DType::Int32:
      widen(v.to_vector<int32_t>());
      break;
    case DType::Int64:
      widen(v.to_vector<int64_t>());
      break;
    case DType::Float32:
      widen(v.to_vector<float>());
      break;
    case DType::Float64:
      widen(v.to_vector<double>());
      break;
    case DType::Int8:
      widen(v.to_vector<int8_t>());
      break;
    case DType::UInt8:
      widen(v.to_vector<uint8_t>());
      break;
    case DType::Int16:
      widen(v.to_vector<int16_t>());
      break;
    case DType::Float16:
      for (metajit::float16 h : v.to_vector<metajit::float16>()) out.push_back(double(float(h)));
      break;
    case DType::BFloat16:
      for (metajit::bfloat16 h : v.to_vector<metajit::bfloat16>()) out.push_back(double(float(h)));
      break;
  }
  return out;
}

// True when `got` is acceptable for the reference value `want` under tolerance `tol`.
inline bool values_match(double got, double want, double tol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  if (tol == 0) return got == want;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

inline std::string flat_to_index(int64_t flat, const metajit::Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    const int64_t d = shape[k] > 0 ? shape[k] : 1;
    idx[k] = flat % d;
    flat /= d;
  }
  std::string s = "[";
  for (size_t k = 0; k < idx.size(); ++k) s += (k ? ", " : "") + std::to_string(idx[k]);
  return s + "]";
}

}  // namespace metajit_test_detail

namespace metajit_test {

// Evaluates `vars` with the reference interpreter and with eval(), and describes each Var that
// does not have the reference's shape, dtype and values (see the tolerances above): the first
// mismatching element and how many differ. Empty when every Var agrees.
inline std::vector<std::string> compare_to_reference(const std::vector<metajit::Var>& vars,
                                                     const std::vector<metajit::HostTensor>& refs);

inline std::vector<std::string> reference_mismatches(const std::vector<metajit::Var>& vars) {
  const std::vector<metajit::HostTensor> refs =
      metajit::interpret(vars);  // before eval: see the file comment
  metajit::eval(vars);
  return compare_to_reference(vars, refs);
}

// The same check for `vars` already evaluated, against `refs` = interpret(vars) taken before
// their eval() (a program that times its eval() on its own).
inline std::vector<std::string> compare_to_reference(const std::vector<metajit::Var>& vars,
                                                     const std::vector<metajit::HostTensor>& refs) {
  using namespace metajit;
  using namespace metajit_test_detail;
  if (refs.size() != vars.size())
    return {"the reference gave " + std::to_string(refs.size()) + " results for " +
            std::to_string(vars.size()) + " Vars"};
  std::vector<std::string> out;
  for (size_t v = 0; v < vars.size(); ++v) {
    const Var& var = vars[v];
    const HostTensor& ref = refs[v];
    const std::string which = "Var #" + std::to_string(v) + " of " + std::to_string(vars.size());
    if (var.shape() != ref.shape || var.dtype() != ref.dtype) {
      out.push_back(which + ": eval gives " + dtype_name(var.dtype()) + " " +
                    shape_str(var.shape()) + ", reference " + dtype_name(ref.dtype) + " " +
                    shape_str(ref.shape));
      continue;
    }
    const double tol = tolerance_of(ref.dtype);
    int64_t mismatches = 0, first = -1;
    std::string got_text, want_text;
    auto note = [&](size_t i, const auto& got, const auto& want) {
      if (mismatches++ > 0) return;
      first = int64_t(i);
      std::ostringstream g, w;
      g << std::setprecision(17) << got;
      w << std::setprecision(17) << want;
      got_text = g.str();
      want_text = w.str();
    };
    size_t got_size = 0, want_size = 0;
    auto compare = [&](const auto& got, const auto& want, auto match) {
      got_size = got.size();
      want_size = want.size();
      for (size_t i = 0; i < got.size() && i < want.size(); ++i)
        if (!match(got[i], want[i])) note(i, got[i], want[i]);
    };
    if (ref.dtype == DType::Int64)  // compared as int64: doubles would round above 2^53
      compare(var.to_vector<int64_t>(), ref.as<int64_t>(), std::equal_to<>());
    else
      compare(eval_values_as_double(var), ref.as_double(),
              [tol](double got, double want) { return values_match(got, want, tol); });
    if (got_size != want_size) {
      out.push_back(which + ": eval gives " + std::to_string(got_size) + " elements, reference " +
                    std::to_string(want_size));
    } else if (mismatches > 0) {
      std::ostringstream m;
      m << which << " (" << dtype_name(ref.dtype) << " " << shape_str(ref.shape)
        << "): " << mismatches << " of " << numel_of(ref.shape)
        << " elements differ; first at flat position " << first << " "
        << flat_to_index(first, ref.shape) << ": eval " << got_text << ", reference " << want_text
        << " (tolerance " << tol << " relative)";
      out.push_back(m.str());
    }
  }
  return out;
}

}  // namespace metajit_test
