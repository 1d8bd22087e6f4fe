// The public calls an API fuzzer step chooses from (fuzz/api_program.h): one row per call, each
// reading its operands from the program's bytes and writing its result into a slot.
#pragma once
#include <metajit/metajit.h>

#include <string>
#include <vector>

#include "fuzz/api_program.h"
#include "support/random_graph.h"

namespace metajit_test {
namespace api_calls_detail {

using namespace metajit;
using P = ApiProgram;

inline std::string v(size_t k) {
  return "v" + std::to_string(k);
}

// Logs "vK = text" for a slot K chosen by the next byte, then computes the value into it.
template <class F>
void put(P& p, const std::string& text, F value) {
  const size_t out = p.pick();
  p.log(v(out) + " = " + text);
  p.at(out) = value();
}

// The C++ text of a shape, axes or index expressions: the random-graph generator's listing helpers.
inline std::string list(const std::vector<int64_t>& xs) {
  return random_graph_detail::shape_cpp(xs);
}
inline std::string list(const std::vector<std::string>& xs) {
  return random_graph_detail::strings_cpp(xs);
}

inline std::string dt(DType d) {
  return dtype_name(d);
}

// True when a shape without negative extents has more than 2^22 elements (or more than int64).
inline bool allocates_too_much(const Shape& s) {
  int64_t n = 1;
  for (int64_t e : s) {
    if (e < 0) return false;  // a ShapeError before anything is allocated
    if (e != 0 && __builtin_mul_overflow(n, e, &n)) return true;
  }
  return n > (int64_t(1) << 22);
}

inline void create(P& p) {
  const uint8_t kind = p.byte() % 8;
  const Shape s = p.shape();
  const DType d = p.dtype();
  const std::string args = list(s) + ", " + dt(d);
  switch (kind) {
    case 0:
      return put(p, "zeros(" + args + ")", [&] { return Var(zeros(s, d)); });
    case 1:
      return put(p, "ones(" + args + ")", [&] { return Var(ones(s, d)); });
    case 2: {
      const double x = p.number();
      return put(p, "full(" + list(s) + ", " + std::to_string(x) + ", " + dt(d) + ")",
                 [&] { return Var(full(s, x, d)); });
    }
    case 3:
    case 4:
      // rand and randn fill their values when called: under libFuzzer an allocation of more than
      // -malloc_limit_mb is reported as a crash, so huge shapes go only to the lazy creators
      // (test_errors checks that a refused allocation is a typed Error).
      if (allocates_too_much(s)) return p.log("// rand/randn of " + list(s) + " skipped: large");
      if (kind == 4)
        return put(p, "randn(" + args + ")", [&] { return Var(randn(s, p.byte(), d)); });
      return put(p, "rand(" + args + ")", [&] { return Var(rand(s, p.byte(), d)); });
    case 5: {
      const int64_t n = p.extent();
      return put(p, "arange(" + std::to_string(n) + ", " + dt(d) + ")",
                 [&] { return Var(arange(n, d)); });
    }
    case 6: {
      const double x = p.number();
      return put(p, "scalar(" + std::to_string(x) + ", " + dt(d) + ")",
                 [&] { return Var(scalar(x, d)); });
    }
    default: {  // array() with as many values as the bytes say, maybe not the shape's count
      std::vector<float> values(p.byte() % 9);
      for (float& x : values) x = float(p.number());
      return put(p, "array<float>(" + std::to_string(values.size()) + " values, " + list(s) + ")",
                 [&] { return Var(array(values, s)); });
    }
  }
}

inline void undefine(P& p) {
  put(p, "Var()", [&] { return Var(Var()); });
}

inline void unary(P& p) {
  using Fn = Var (*)(const Var&);
  static const std::pair<const char*, Fn> kOps[] = {{"exp", exp},
                                                    {"log", log},
                                                    {"sqrt", sqrt},
                                                    {"abs", abs},
                                                    {"sin", sin},
                                                    {"cos", cos},
                                                    {"tanh", tanh},
                                                    {"sigmoid", sigmoid},
                                                    {"relu", relu},
                                                    {"floor", floor},
                                                    {"logical_not", logical_not},
                                                    {"stop_grad", stop_grad},
                                                    {"fusion_barrier", fusion_barrier},
                                                    {"neg", [](const Var& x) { return -x; }},
                                                    {"gelu", [](const Var& x) { return gelu(x); }},
                                                    {"log1p", log1p}};
  const auto& [name, fn_entry] = kOps[p.byte() % 16];
  const auto fn = fn_entry;
  const size_t a = p.pick();
  put(p, std::string(name) + "(" + v(a) + ")", [&] { return Var(fn(p.at(a))); });
}

inline void binary(P& p) {
  using Fn = Var (*)(const Var&, const Var&);
  static const std::pair<const char*, Fn> kOps[] = {
      {"+", [](const Var& a, const Var& b) { return a + b; }},
      {"-", [](const Var& a, const Var& b) { return a - b; }},
      {"*", [](const Var& a, const Var& b) { return a * b; }},
      {"/", [](const Var& a, const Var& b) { return a / b; }},
      {"==", [](const Var& a, const Var& b) { return a == b; }},
      {"<", [](const Var& a, const Var& b) { return a < b; }},
      {">=", [](const Var& a, const Var& b) { return a >= b; }},
      {"maximum", [](const Var& a, const Var& b) { return maximum(a, b); }},
      {"minimum", [](const Var& a, const Var& b) { return minimum(a, b); }},
      {"pow", [](const Var& a, const Var& b) { return pow(a, b); }},
      {"logical_and", logical_and},
      {"logical_or", logical_or},
      {"matmul", matmul},
      {"mse_loss", mse_loss},
      {"cross_entropy", cross_entropy},
      {"shift_left", shift_left}};
  const auto& [name, fn_entry] = kOps[p.byte() % 16];
  const auto fn = fn_entry;
  const size_t a = p.pick(), b = p.pick();
  put(p, std::string(name) + "(" + v(a) + ", " + v(b) + ")",
      [&] { return Var(fn(p.at(a), p.at(b))); });
}

inline void with_number(P& p) {
  using Fn = Var (*)(const Var&, double);
  static const std::pair<const char*, Fn> kOps[] = {
      {"+", [](const Var& a, double b) { return a + b; }},
      {"-", [](const Var& a, double b) { return b - a; }},
      {"*", [](const Var& a, double b) { return a * b; }},
      {"/", [](const Var& a, double b) { return a / b; }},
      {"pow", [](const Var& a, double b) { return pow(a, b); }},
      {"maximum", [](const Var& a, double b) { return maximum(a, b); }},
      {"<", [](const Var& a, double b) { return a < b; }},
      {"==", [](const Var& a, double b) { return b == a; }}};
  const auto& [name, fn_entry] = kOps[p.byte() % 8];
  const auto fn = fn_entry;
  const size_t a = p.pick();
  const double x = p.number();
  put(p, std::string(name) + "(" + v(a) + ", " + std::to_string(x) + ")",
      [&] { return Var(fn(p.at(a), x)); });
}

inline void where_cast(P& p) {
  const size_t c = p.pick(), a = p.pick(), b = p.pick();
  if (p.byte() % 2)
    return put(p, "where(" + v(c) + ", " + v(a) + ", " + v(b) + ")",
               [&] { return Var(where(p.at(c), p.at(a), p.at(b))); });
  const DType d = p.dtype();
  put(p, "cast(" + v(a) + ", " + dt(d) + ")", [&] { return Var(cast(p.at(a), d)); });
}

inline void shape_op(P& p) {
  const size_t a = p.pick();
  switch (p.byte() % 4) {
    case 0: {
      const Shape s = p.shape();
      const std::vector<int64_t> dims = p.axes();
      return put(p, "broadcast_to(" + v(a) + ", " + list(s) + ", " + list(dims) + ")",
                 [&] { return Var(broadcast_to(p.at(a), s, dims)); });
    }
    case 1: {
      Shape s = p.shape();
      if (!s.empty() && p.byte() % 2) s[p.byte() % s.size()] = -1;
      return put(p, "reshape(" + v(a) + ", " + list(s) + ")",
                 [&] { return Var(reshape(p.at(a), s)); });
    }
    case 2: {
      std::vector<int64_t> perm(p.byte() % 5);
      for (int64_t& x : perm) x = p.axis();
      return put(p, "transpose(" + v(a) + ", " + list(perm) + ")",
                 [&] { return Var(transpose(p.at(a), perm)); });
    }
    default: {
      static const ReduceOp kOps[] = {ReduceOp::Add, ReduceOp::Mul, ReduceOp::Max, ReduceOp::Min,
                                      ReduceOp::Mean};
      const ReduceOp op = kOps[p.byte() % 5];
      const std::vector<int64_t> dims = p.axes();
      const bool keep = p.byte() % 2;
      return put(p,
                 std::string("reduce(") + v(a) + ", " + reduce_op_name(op) + ", " + list(dims) +
                     (keep ? ", keepdims)" : ")"),
                 [&] { return Var(reduce(p.at(a), op, dims, keep)); });
    }
  }
}

inline void reindex_op(P& p) {
  const size_t a = p.pick();
  std::vector<Var> extras;
  std::string extra_names;
  for (size_t k = 0, n = p.byte() % 3; k < n; ++k) {
    const size_t e = p.pick();
    extras.push_back(p.at(e));
    extra_names += (k ? ", " : "") + v(e);
  }
  if (p.byte() % 2) {
    const Shape s = p.shape();
    const size_t in_rank = p.at(a).defined() ? size_t(p.at(a).ndim()) : p.byte() % 4;
    const std::vector<std::string> idx =
        p.index_exprs(in_rank + (p.byte() % 8 == 0), s.size(), extras.size());
    const std::vector<std::string> cond = p.index_exprs(p.byte() % 2, s.size(), extras.size());
    const double fill = p.number();
    return put(p,
               "reindex(" + v(a) + ", " + list(s) + ", " + list(idx) + ", " + std::to_string(fill) +
                   ", " + list(cond) + ", {" + extra_names + "})",
               [&] { return Var(reindex(p.at(a), s, idx, fill, cond, extras)); });
  }
  const Shape s = p.shape();
  static const ReduceOp kOps[] = {ReduceOp::Add, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mul};
  const ReduceOp op = kOps[p.byte() % 4];
  const size_t in_rank = p.at(a).defined() ? size_t(p.at(a).ndim()) : 1;
  const std::vector<std::string> idx =
      p.index_exprs(s.size() + (p.byte() % 8 == 0), in_rank, extras.size());
  const std::vector<std::string> cond = p.index_exprs(p.byte() % 2, in_rank, extras.size());
  put(p,
      "reindex_reduce(" + v(a) + ", " + reduce_op_name(op) + ", " + list(s) + ", " + list(idx) +
          ", " + list(cond) + ", {" + extra_names + "})",
      [&] { return Var(reindex_reduce(p.at(a), op, s, idx, cond, extras)); });
}

inline void nn_op(P& p) {
  const size_t a = p.pick(), b = p.pick();
  const int64_t k = p.extent(), s = p.extent(), pad = p.byte() % 4 == 0 ? p.extent() : 0;
  switch (p.byte() % 4) {
    case 0:
      return put(p,
                 "conv2d(" + v(a) + ", " + v(b) + ", " + std::to_string(s) + ", " +
                     std::to_string(pad) + ", " + std::to_string(k) + ")",
                 [&] { return Var(conv2d(p.at(a), p.at(b), s, pad, k)); });
    case 1:
      return put(p,
                 "max_pool2d(" + v(a) + ", " + std::to_string(k) + ", " + std::to_string(s) + ", " +
                     std::to_string(pad) + ")",
                 [&] { return Var(max_pool2d(p.at(a), k, s, pad)); });
    case 2: {
      const int64_t dim = p.axis();
      static const char* kNames[] = {"softmax", "log_softmax", "argmax", "argmin"};
      static Var (*const kFns[])(const Var&, int64_t) = {softmax, log_softmax, argmax, argmin};
      const uint8_t f = p.byte() % 4;
      return put(p, std::string(kNames[f]) + "(" + v(a) + ", " + std::to_string(dim) + ")",
                 [&] { return Var(kFns[f](p.at(a), dim)); });
    }
    default:
      return put(p, "one_hot(" + v(a) + ", " + std::to_string(k) + ")",
                 [&] { return Var(one_hot(p.at(a), k)); });
  }
}

inline void indexing_op(P& p) {
  const size_t x = p.pick(), idx = p.pick(), src = p.pick();
  const int64_t dim = p.axis();
  const std::string d = std::to_string(dim);
  switch (p.byte() % 4) {
    case 0:
      return put(p, "gather(" + v(x) + ", " + d + ", " + v(idx) + ")",
                 [&] { return Var(gather(p.at(x), dim, p.at(idx))); });
    case 1:
      return put(p, "index_select(" + v(x) + ", " + d + ", " + v(idx) + ")",
                 [&] { return Var(index_select(p.at(x), dim, p.at(idx))); });
    case 2:
      return put(p, "embedding(" + v(x) + ", " + v(idx) + ")",
                 [&] { return Var(embedding(p.at(x), p.at(idx))); });
    default:
      return put(p, "scatter_add(" + v(x) + ", " + d + ", " + v(idx) + ", " + v(src) + ")",
                 [&] { return Var(scatter_add(p.at(x), dim, p.at(idx), p.at(src))); });
  }
}

// The composites of meta_ops/shaping.cc, statistics.cc and convolution.cc, with the program's
// numbers: odd axes, sizes, bounds and paddings are the point.
inline void joining_op(P& p) {
  const size_t a = p.pick(), b = p.pick();
  const int64_t dim = p.axis();
  const std::string d = std::to_string(dim);
  switch (p.byte() % 5) {
    case 0:
      return put(p, "concat({" + v(a) + ", " + v(b) + "}, " + d + ")", [&] {
        return Var(concat({p.at(a), p.at(b)}, dim));
      });
    case 1:
      return put(p, "stack({" + v(a) + ", " + v(b) + "}, " + d + ")", [&] {
        return Var(stack({p.at(a), p.at(b)}, dim));
      });
    case 2: {
      // A negative start counts from the end; extents reach INT64_MAX, so it is a negated extent,
      // never a difference of two (which overflows in the fuzzer itself, not in the library).
      const int64_t start = p.byte() % 2 == 0 ? -p.extent() : p.extent();
      const int64_t stop = p.extent(), step = p.extent();
      return put(p,
                 "slice(" + v(a) + ", " + d + ", " + std::to_string(start) + ", " +
                     std::to_string(stop) + ", " + std::to_string(step) + ")",
                 [&] { return Var(slice(p.at(a), dim, start, stop, step)); });
    }
    case 3: {
      const std::vector<int64_t> sizes = {p.extent(), p.extent()};
      p.log("split(" + v(a) + ", " + list(sizes) + ", " + d + ")");
      const std::vector<Var> parts = split(p.at(a), sizes, dim);
      for (const Var& part : parts) put(p, "<a piece>", [&] { return part; });
      return;
    }
    default: {
      const size_t rank = p.at(a).defined() ? size_t(p.at(a).ndim()) : p.byte() % 3;
      std::vector<int64_t> before(rank), after(rank + (p.byte() % 8 == 0));
      for (int64_t& e : before) e = p.byte() % 3 == 0 ? -p.extent() : p.extent();
      for (int64_t& e : after) e = p.byte() % 3 == 0 ? -p.extent() : p.extent();
      const double fill = p.number();
      return put(p,
                 "pad(" + v(a) + ", " + list(before) + ", " + list(after) + ", " +
                     std::to_string(fill) + ")",
                 [&] { return Var(pad(p.at(a), before, after, fill)); });
    }
  }
}

inline void statistics_op(P& p) {
  const size_t a = p.pick(), b = p.pick(), c = p.pick();
  const int64_t k = p.extent(), s = p.extent(), pad = p.byte() % 4 == 0 ? p.extent() : 0;
  switch (p.byte() % 6) {
    case 0: {
      const int64_t dim = p.axis();
      return put(p, "cumsum(" + v(a) + ", " + std::to_string(dim) + ")",
                 [&] { return Var(cumsum(p.at(a), dim)); });
    }
    case 1: {
      const std::vector<int64_t> dims = p.axes();
      const int64_t correction = int64_t(p.byte() % 4) - 1;
      return put(p,
                 "var(" + v(a) + ", " + list(dims) + ", false, " + std::to_string(correction) + ")",
                 [&] { return Var(var(p.at(a), dims, false, correction)); });
    }
    case 2: {
      const int64_t nd = int64_t(p.byte() % 4);
      return put(p,
                 "layer_norm(" + v(a) + ", " + std::to_string(nd) + ", " + v(b) + ", " + v(c) + ")",
                 [&] { return Var(layer_norm(p.at(a), nd, p.at(b), p.at(c))); });
    }
    case 3:
      return put(p,
                 "avg_pool2d(" + v(a) + ", " + std::to_string(k) + ", " + std::to_string(s) + ", " +
                     std::to_string(pad) + ")",
                 [&] { return Var(avg_pool2d(p.at(a), k, s, pad)); });
    case 4: {
      const int64_t groups = p.extent();
      return put(p,
                 "conv2d(" + v(a) + ", " + v(b) + ", " + std::to_string(s) + ", " +
                     std::to_string(pad) + ", 1, " + std::to_string(groups) + ")",
                 [&] { return Var(conv2d(p.at(a), p.at(b), s, pad, 1, groups)); });
    }
    default: {
      const int64_t out_pad = p.byte() % 3;
      return put(p,
                 "conv_transpose2d(" + v(a) + ", " + v(b) + ", " + std::to_string(s) + ", " +
                     std::to_string(pad) + ", " + std::to_string(out_pad) + ")",
                 [&] { return Var(conv_transpose2d(p.at(a), p.at(b), s, pad, out_pad)); });
    }
  }
}

// Sixteen rows, so that a byte picks each equally often; the composites share one.
inline void composite_op(P& p) {
  return p.byte() % 2 ? joining_op(p) : statistics_op(p);
}

inline void gradient(P& p) {
  const size_t loss = p.pick(), a = p.pick(), b = p.pick();
  p.log("grad(" + v(loss) + ", {" + v(a) + ", " + v(b) + "})");
  const std::vector<Var> g = grad(p.at(loss), {p.at(a), p.at(b)});
  if (g.size() != 2) p.finding("grad gave " + std::to_string(g.size()) + " gradients for 2 Vars");
  put(p, "<gradient 0>", [&] { return Var(g[0]); });
  put(p, "<gradient 1>", [&] { return Var(g[1]); });
}

// jit functions made once per process and called with whatever the slots hold: their traces
// follow the signatures (dtypes and ranks) as they change.
inline void jit_call(P& p) {
  static auto fma = jit([](const Var& a, const Var& b) { return a * b + 1.0; }, "fuzz_fma");
  static auto row_sum = jit([](const Var& a) { return sum(exp(a) * 0.5, {-1}); }, "fuzz_row_sum");
  static auto pair = jit(
      [](const Var& a, const Var& b) {
        return std::vector<Var>{a - b, maximum(a, b)};
      },
      "fuzz_pair");
  const size_t a = p.pick(), b = p.pick();
  // A jit call computes at once: only on graphs small enough to evaluate here.
  if (!p.evaluable(p.at(a)) || !p.evaluable(p.at(b))) return p.log("// jit call skipped: large");
  switch (p.byte() % 3) {
    case 0:
      return put(p, "fuzz_fma(" + v(a) + ", " + v(b) + ")",
                 [&] { return Var(fma(p.at(a), p.at(b))); });
    case 1:
      return put(p, "fuzz_row_sum(" + v(a) + ")", [&] { return Var(row_sum(p.at(a))); });
    default: {
      const std::vector<Var> out = pair(p.at(a), p.at(b));
      put(p, "fuzz_pair(" + v(a) + ", " + v(b) + ")[0]", [&] { return Var(out.at(0)); });
      put(p, "fuzz_pair(...)[1]", [&] { return Var(out.at(1)); });
    }
  }
}

inline void assign_to(P& p) {
  const size_t a = p.pick(), b = p.pick();
  p.log(v(a) + ".assign(" + v(b) + ")");
  p.at(a).assign(p.at(b));
}

// Reads that must not crash on any Var: its shape and dtype, explain().
inline void inspect(P& p) {
  const size_t a = p.pick();
  const Var& x = p.at(a);
  p.log("inspect " + v(a));
  if (p.byte() % 2) {
    const std::string text = explain({x});
    if (text.empty()) p.finding("explain() gave nothing");
    return;
  }
  const int64_t n = x.numel(), r = x.ndim();
  if (r != int64_t(x.shape().size()) || n != numel_of(x.shape()))
    p.finding("ndim/numel disagree with shape " + shape_str(x.shape()));
  (void)dtype_name(x.dtype());
}

// eval, to_vector and item, where the graph is small enough: values checked against the
// reference; a wrong element type or item() of many elements must be a typed error.
inline void evaluate(P& p) {
  const size_t a = p.pick(), b = p.pick();
  Var& x = p.at(a);
  if (!p.evaluable(x)) return p.log("// evaluation of " + v(a) + " skipped: large or undefined");
  switch (p.byte() % 4) {
    case 0:
      p.log("eval({" + v(a) + ", " + v(b) + "})");
      return p.check(p.evaluable(p.at(b)) ? std::vector<Var>{x, p.at(b)} : std::vector<Var>{x});
    case 1: {
      p.log(v(a) + ".to_vector<float>()");
      const std::vector<float> values = x.to_vector<float>();
      if (int64_t(values.size()) != x.numel()) p.finding("to_vector gave a wrong count");
      return;
    }
    case 2:
      p.log(v(a) + ".item<double>()");
      (void)x.item<double>();
      return;
    default:
      p.log(v(a) + ".item<int32_t>()");
      (void)x.item<int32_t>();
      return;
  }
}

}  // namespace api_calls_detail

inline const std::vector<ApiCall>& api_calls() {
  using namespace api_calls_detail;
  static const std::vector<ApiCall> calls = {
      {"create", create},
      {"undefine", undefine},
      {"unary", unary},
      {"binary", binary},
      {"with_number", with_number},
      {"where_cast", where_cast},
      {"shape_op", shape_op},
      {"reindex_op", reindex_op},
      {"nn_op", nn_op},
      {"indexing_op", indexing_op},
      {"gradient", gradient},
      {"jit_call", jit_call},
      {"assign_to", assign_to},
      {"inspect", inspect},
      {"evaluate", evaluate},
      {"composite_op", composite_op},
  };
  return calls;
}

}  // namespace metajit_test
