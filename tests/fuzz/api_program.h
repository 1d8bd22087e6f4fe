// A short program of public API calls chosen by bytes: what the API fuzzer
// (fuzz/fuzz_api_sequence.cc) runs. Each step's first byte picks a call from kCalls; the call
// reads its operands (slots of a small pool of Vars, shapes, dtypes, axes, index expressions,
// numbers) from the bytes after it, most of them ordinary and some at the corners a new user
// reaches: extents of 0, negative or huge, axes out of range, mismatched shapes and dtypes,
// default-constructed Vars, index expressions that do not parse, jit functions called with
// changing signatures.
//
// The contract the program checks (docs/design.md "Errors"): a call either succeeds or throws a
// metajit::Error; anything else (another exception, a signal, a sanitizer report, a hang) is a
// finding, as is a kernel that does not compile (CompileError) for a graph the API accepted.
// Values are evaluated only where the graph is small (every node at most kEvalNumel elements), and
// then checked against the reference interpreter within the bounds support/error_bounds.h derives.
#pragma once
#include <metajit/metajit.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "support/error_bounds.h"
#include "support/reference_compare.h"

namespace metajit_test {

class ApiProgram {
 public:
  static constexpr size_t kSlots = 6;
  static constexpr int64_t kEvalNumel = 1 << 14;  // the largest node evaluated
  static constexpr size_t kEvalNodes = 200;       // the largest graph evaluated
  static constexpr int kMaxSteps = 24;

  ApiProgram(const uint8_t* data, size_t size) : bytes_(data, data + size) {}

  // Runs the steps and compares what was accepted with the reference; a finding aborts.
  void run();

  // The choices a call reads (0 once the bytes are used up).
  uint8_t byte() { return next_ < bytes_.size() ? bytes_[next_++] : 0; }
  bool more() const { return next_ < bytes_.size(); }
  size_t pick() { return byte() % kSlots; }  // a slot, named "v<k>" in the listing
  metajit::Var& at(size_t k) { return slots_[k]; }
  metajit::Shape shape();
  int64_t extent();
  int64_t axis();
  std::vector<int64_t> axes();
  metajit::DType dtype();
  double number();
  std::string index_expr(size_t ndim, size_t extras);
  std::vector<std::string> index_exprs(size_t count, size_t ndim, size_t extras);

  // True when `v`'s graph is small enough to evaluate here.
  bool evaluable(const metajit::Var& v) const;
  // Evaluates `vars` and checks them against the reference (what every evaluating call does).
  void check(const std::vector<metajit::Var>& vars);
  // Records a line of the program, printed with a finding.
  void log(const std::string& line) { listing_ += line + "\n"; }
  [[noreturn]] void finding(const std::string& what);

 private:
  std::vector<uint8_t> bytes_;
  size_t next_ = 0;
  metajit::Var slots_[kSlots];
  std::string listing_;
};

struct ApiCall {
  const char* name;
  void (*run)(ApiProgram& p);
};
// The calls a step chooses from (fuzz/api_calls.h).
const std::vector<ApiCall>& api_calls();

// ---- choices ----

inline int64_t ApiProgram::extent() {
  static constexpr int64_t kSmall[] = {1, 2, 3, 4, 5, 7, 2, 0};
  static constexpr int64_t kCorner[] = {
      -1, -7, 1 << 20, int64_t(1) << 31, int64_t(1) << 33, int64_t(1) << 40, 3037000500, INT64_MAX};
  const uint8_t b = byte();
  return b < 224 ? kSmall[b % 8] : kCorner[b % 8];
}

inline metajit::Shape ApiProgram::shape() {
  metajit::Shape s(byte() % 5);
  for (int64_t& e : s) e = extent();
  return s;
}

inline int64_t ApiProgram::axis() {
  static constexpr int64_t kCorner[] = {INT64_MIN, INT64_MAX, 100, -100};
  const uint8_t b = byte();
  return b < 240 ? int64_t(b % 9) - 4 : kCorner[b % 4];
}

inline std::vector<int64_t> ApiProgram::axes() {
  std::vector<int64_t> a(byte() % 4);
  for (int64_t& x : a) x = axis();
  return a;
}

inline metajit::DType ApiProgram::dtype() {
  using metajit::DType;
  static constexpr DType kTypes[] = {DType::Float32, DType::Float32, DType::Float32,
                                     DType::Float64, DType::Int32,   DType::Int64,
                                     DType::Bool,    DType::Float32};
  return kTypes[byte() % 8];
}

inline double ApiProgram::number() {
  const double inf = std::numeric_limits<double>::infinity();
  const double kNumbers[] = {0,   1,    -1,    2,   0.5,  -3,  3, 1e-3,
                             100, 1e30, -1e30, inf, -inf, NAN, 7, -0.25};
  return kNumbers[byte() % 16];
}

namespace api_program_detail {
constexpr const char* kConstants[] = {"0", "1", "2", "3", "-1", "7", "64", "9223372036854775807"};
constexpr const char* kOps[] = {"+", "-", "*", "/", "%", ">", "==", "<"};
constexpr const char* kGarbage[] = {"", "i", "(", "i0+", "@e9(0)", "1/0", "x", "i0 ? 1"};
}  // namespace api_program_detail

// An index expression over loop variables i0..i<ndim-1> and `extras` extra arrays, from a small
// grammar, sometimes naming a variable or an array that is not there, or not parsing at all.
inline std::string ApiProgram::index_expr(size_t ndim, size_t extras) {
  int depth = 0;
  using namespace api_program_detail;
  auto term = [&](auto& self) -> std::string {
    const uint8_t b = byte() % 16;
    if (b < 6 || depth > 3) return "i" + std::to_string(byte() % (ndim + 1));
    if (b < 9) return kConstants[byte() % 8];
    if (b < 13) {
      ++depth;
      std::string l = self(self), op = kOps[byte() % 8], r = self(self);
      --depth;
      return "(" + l + op + r + ")";
    }
    if (b < 15 && extras > 0) {
      ++depth;
      std::string read = "@e" + std::to_string(byte() % extras) + "(";
      for (size_t k = 0, n = byte() % 3; k < n; ++k) read += (k ? "," : "") + self(self);
      --depth;
      return read + ")";
    }
    return kGarbage[byte() % 8];
  };
  return term(term);
}

inline std::vector<std::string> ApiProgram::index_exprs(size_t count, size_t ndim, size_t extras) {
  std::vector<std::string> out(count);
  for (std::string& e : out) e = index_expr(ndim, extras);
  return out;
}

// ---- evaluation ----

inline bool ApiProgram::evaluable(const metajit::Var& v) const {
  if (!v.defined()) return false;
  const std::vector<metajit::NodePtr> nodes = graph_nodes({v});
  if (nodes.size() > kEvalNodes) return false;
  // The loops of a node iterate over its extents, the outer ones even where an inner extent is
  // 0: sum(zeros({2^40, 2^22, 0})) runs 2^62 empty iterations (a known hang, README
  // "Limitations"), so the bound is on the extents' product with zeros counted as 1.
  for (const metajit::NodePtr& n : nodes) {
    int64_t span = 1;
    for (int64_t e : n->shape)
      if (e > 1 && __builtin_mul_overflow(span, e, &span)) return false;
    if (span > kEvalNumel) return false;
  }
  return true;
}

inline void ApiProgram::finding(const std::string& what) {
  std::fprintf(stderr, "api_sequence finding: %s\nprogram:\n%s", what.c_str(), listing_.c_str());
  std::abort();
}

inline std::string values_differ(const metajit::Var& got, const metajit::HostTensor& want,
                                 double tolerance);

inline void ApiProgram::check(const std::vector<metajit::Var>& vars) {
  std::vector<metajit::HostTensor> refs;
  std::vector<double> tolerances;
  std::string sensitive;
  try {  // the analysis holds the graph's nodes: it ends before eval
    const ErrorBounds bounds(vars);
    sensitive = bounds.sensitive();
    for (const metajit::Var& v : vars) {
      refs.push_back(bounds.reference(v));
      tolerances.push_back(bounds.tolerance(v));
    }
  } catch (const metajit::Error& e) {
    finding(std::string("the reference interpreter refused an accepted graph: ") + e.what());
  }
  try {
    metajit::eval(vars);
  } catch (const metajit::Error& e) {
    finding(std::string("eval failed on a graph the reference computes: ") + e.what());
  }
  for (size_t k = 0; k < vars.size(); ++k) {
    const metajit::Var& v = vars[k];
    if (v.shape() != refs[k].shape || v.dtype() != refs[k].dtype)
      finding("eval gives " + std::string(metajit::dtype_name(v.dtype())) + " " +
              metajit::shape_str(v.shape()) + ", the reference " +
              metajit::dtype_name(refs[k].dtype) + " " + metajit::shape_str(refs[k].shape));
    if (!sensitive.empty()) continue;
    const std::string diff = values_differ(v, refs[k], tolerances[k]);
    if (!diff.empty()) finding("value #" + std::to_string(k) + " " + diff);
  }
  log(sensitive.empty() ? "  // checked against the reference"
                        : "  // shapes checked; values not compared: " + sensitive);
}

// Empty when every element of `got` is within `tolerance` of the reference (integers and Bool
// exactly; NaN matches NaN, an infinity the same infinity), else the first that is not.
inline std::string values_differ(const metajit::Var& got, const metajit::HostTensor& want,
                                 double tolerance) {
  if (want.dtype == metajit::DType::Int64) {
    const std::vector<int64_t> g = got.to_vector<int64_t>(), w = want.as<int64_t>();
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i] != w[i])
        return "element " + std::to_string(i) + ": " + std::to_string(g[i]) + ", reference " +
               std::to_string(w[i]);
    return "";
  }
  const std::vector<double> g = metajit_test_detail::eval_values_as_double(got),
                            w = want.as_double();
  const double floor = want.dtype == metajit::DType::Float32 ? 1e-37 : 1e-300;  // flushed denormals
  for (size_t i = 0; i < g.size(); ++i) {
    const bool same =
        std::isnan(w[i]) || std::isnan(g[i]) ? std::isnan(w[i]) && std::isnan(g[i])
        : std::isinf(w[i]) || std::isinf(g[i])
            ? g[i] == w[i]
            : std::fabs(g[i] - w[i]) <= tolerance + (metajit::is_float(want.dtype) ? floor : 0);
    if (!same) {
      char text[160];
      std::snprintf(text, sizeof text, "element %zu: %.17g, reference %.17g (tolerance %.3g)", i,
                    g[i], w[i], tolerance);
      return text;
    }
  }
  return "";
}

// ---- the program ----

inline void ApiProgram::run() {
  using namespace metajit;
  slots_[0] = randn({2, 3}, 1);
  slots_[1] = arange(6, DType::Int32);
  slots_[2] = full({3}, 2.0);
  slots_[4] = rand({2, 3, 4}, 2);
  slots_[5] = scalar(3, DType::Int64);
  log("v0 = randn({2, 3}, 1); v1 = arange(6); v2 = full({3}, 2.0); v3 = Var();");
  log("v4 = rand({2, 3, 4}, 2); v5 = scalar(3, DType::Int64);");
  const std::vector<ApiCall>& calls = api_calls();
  for (int step = 0; step < kMaxSteps && more(); ++step) {
    const ApiCall& call = calls[byte() % calls.size()];
    try {
      call.run(*this);
    } catch (const CompileError& e) {
      finding(std::string(call.name) + ": a kernel did not compile: " + e.what());
    } catch (const Error& e) {
      const std::string what = e.what();
      if (what.empty()) finding(std::string(call.name) + ": an Error without a message");
      log("  // Error: " + what.substr(0, what.find('\n')).substr(0, 200));
    } catch (const std::exception& e) {
      finding(std::string(call.name) + ": an exception that is not a metajit::Error: " + e.what());
    }
  }
  std::vector<Var> last;
  for (const Var& v : slots_)
    if (evaluable(v)) last.push_back(v);
  if (!last.empty()) check(last);
  // API_SEQUENCE_PRINT=1: the program as it ran (what a seed exercises).
  if (std::getenv("API_SEQUENCE_PRINT")) std::fprintf(stderr, "%s\n", listing_.c_str());
}

}  // namespace metajit_test
