// How far the compiled kernels may be from the reference interpreter for an arbitrary graph, found
// by a running error analysis over the reference's own intermediate values: the API fuzzer
// (fuzz/fuzz_api_sequence.cc) builds graphs no generator kept well-conditioned, so a fixed
// relative tolerance (support/reference_compare.h) would report cancellation and summation order
// as bugs.
//
// Every node gets E, a bound on the absolute difference the two evaluations may legitimately have
// (float rounding in another order, vector math library calls a few ulps from libm's), derived
// from its inputs' E, their largest and smallest magnitudes and the node's reduction count.
// Integer and Bool values are exact (integer arithmetic wraps in both: docs/design.md §3). A node
// whose result an input's error can change discontinuously or without bound (a comparison of
// values closer than their errors, a float->int cast or floor of inexact values, log/sqrt/divide
// near zero, pow of inexact values, sums or products that may overflow in one order and not the
// other) makes the graph "sensitive": only shapes and dtypes are compared then.
#pragma once
#include <metajit/metajit.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "meta_ops/node.h"
#include "support/reference_interpreter.h"

namespace metajit_test {

// Every node `roots` depend on, inputs before the nodes that read them.
inline std::vector<metajit::NodePtr> graph_nodes(const std::vector<metajit::Var>& roots) {
  std::vector<metajit::NodePtr> order;
  std::unordered_map<const metajit::Node*, bool> done;  // false: on the stack
  std::vector<std::pair<metajit::NodePtr, size_t>> stack;
  for (const metajit::Var& r : roots)
    if (r.defined() && !done.count(r.node().get())) {
      stack.push_back({r.node(), 0});
      done[r.node().get()] = false;
      while (!stack.empty()) {
        auto& [n, next] = stack.back();
        if (next < n->inputs.size()) {
          const metajit::NodePtr in = n->inputs[next++];
          if (!done.count(in.get())) {
            done[in.get()] = false;
            stack.push_back({in, 0});
          }
          continue;
        }
        done[n.get()] = true;
        order.push_back(n);
        stack.pop_back();
      }
    }
  return order;
}

// What the analysis knows about one node's reference values.
struct NodeRange {
  double max_abs = 0;                                        // largest finite |value|
  double min_abs = std::numeric_limits<double>::infinity();  // smallest |value|
  bool non_finite = false;                                   // an inf or NaN among them
  double error = 0;                                          // E: see the file comment
};

class ErrorBounds {
 public:
  // Evaluates every node of the roots' graphs with the reference interpreter (nothing is realized)
  // and bounds each node's error.
  explicit ErrorBounds(const std::vector<metajit::Var>& roots) : nodes_(graph_nodes(roots)) {
    std::vector<metajit::Var> all;
    for (const metajit::NodePtr& n : nodes_) all.push_back(metajit::Var(n));
    values_ = metajit::interpret(all);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      index_[nodes_[i].get()] = i;
      ranges_.push_back(range_of(values_[i]));
    }
    for (size_t i = 0; i < nodes_.size() && sensitive_.empty(); ++i) bound_node(i);
  }

  // Empty when every value can be compared; else why not (the first sensitive node).
  const std::string& sensitive() const { return sensitive_; }
  // The bound on |eval - reference| for a root's elements (0 for integers and Bool).
  double tolerance(const metajit::Var& root) const {
    const NodeRange& r = ranges_[index_.at(root.node().get())];
    return 4 * r.error;
  }
  const metajit::HostTensor& reference(const metajit::Var& root) const {
    return values_[index_.at(root.node().get())];
  }

 private:
  static NodeRange range_of(const metajit::HostTensor& t) {
    NodeRange r;
    for (double v : t.as_double()) {
      if (!std::isfinite(v)) {
        r.non_finite = true;
        continue;
      }
      r.max_abs = std::max(r.max_abs, std::fabs(v));
      r.min_abs = std::min(r.min_abs, std::fabs(v));
    }
    return r;
  }

  // Unit roundoff of a float dtype, times 8: the vector math library's calls are within 4 ulps.
  static double unit(metajit::DType dt) {
    if (dt == metajit::DType::Float32) return 8 * std::ldexp(1.0, -24);
    if (dt == metajit::DType::Float64) return 8 * std::ldexp(1.0, -53);
    return 0;
  }
  static double overflow_limit(metajit::DType dt) {
    return dt == metajit::DType::Float64 ? 1e300 : 1e36;
  }

  const NodeRange& in(const metajit::Node* n, size_t k) const {
    return ranges_[index_.at(n->inputs[k].get())];
  }
  void mark(const metajit::Node* n, const std::string& why) {
    sensitive_ = std::string(metajit::op_kind_name(n->kind)) + " " + metajit::shape_str(n->shape) +
                 ": " + why;
  }

  void bound_node(size_t i);
  double bound_unary(const metajit::Node* n, NodeRange& r);
  double bound_binary(const metajit::Node* n, NodeRange& r);
  double bound_reduction(const metajit::Node* n, NodeRange& r, int64_t terms);
  // True when comparing (or testing against zero) the inputs could flip within their errors.
  bool close_call(const metajit::Node* n) const;

  std::vector<metajit::NodePtr> nodes_;
  std::vector<metajit::HostTensor> values_;
  std::vector<NodeRange> ranges_;
  std::unordered_map<const metajit::Node*, size_t> index_;
  std::string sensitive_;
};

inline void ErrorBounds::bound_node(size_t i) {
  using metajit::OpKind;
  const metajit::Node* n = nodes_[i].get();
  NodeRange& r = ranges_[i];
  double e = 0;
  switch (n->kind) {
    case OpKind::Leaf:
    case OpKind::Scalar:
    case OpKind::Iota:
      e = 0;
      break;
    case OpKind::Unary:
      e = bound_unary(n, r);
      break;
    case OpKind::Binary:
      e = bound_binary(n, r);
      break;
    case OpKind::Where:
      e = std::max(in(n, 1).error, in(n, 2).error);
      break;
    case OpKind::Cast:
      if (!metajit::is_float(n->dtype)) {
        if (in(n, 0).error > 0) mark(n, "a cast to an integer of inexact values");
        if (in(n, 0).non_finite || in(n, 0).max_abs >= 9.2e18) mark(n, "a cast out of range");
      }
      e = in(n, 0).error + unit(n->dtype) * r.max_abs;
      break;
    case OpKind::BroadcastTo:
    case OpKind::Reindex:
    case OpKind::Collective:  // a world of one: the identity
      e = in(n, 0).error;
      break;
    case OpKind::Reduce:
    case OpKind::ReindexReduce: {
      const int64_t in_numel = n->inputs[0]->numel(), out_numel = std::max<int64_t>(1, n->numel());
      // A reindex_reduce may gather every input element into one output.
      const int64_t terms = n->kind == OpKind::Reduce ? in_numel / out_numel : in_numel;
      e = bound_reduction(n, r, std::max<int64_t>(1, terms));
      break;
    }
  }
  if (!metajit::is_float(n->dtype)) e = 0;
  if (e > 0 && (r.non_finite || r.max_abs > overflow_limit(n->dtype)) && sensitive_.empty())
    mark(n, "inexact values at the edge of overflow");
  r.error = e;
}

inline double ErrorBounds::bound_unary(const metajit::Node* n, NodeRange& r) {
  using metajit::UnaryOp;
  const NodeRange& a = in(n, 0);
  const double u = unit(n->dtype) * r.max_abs;
  switch (static_cast<UnaryOp>(n->op)) {
    case UnaryOp::Neg:
    case UnaryOp::Abs:
    case UnaryOp::Relu:
      return a.error;
    case UnaryOp::Exp:
      return r.max_abs * a.error + u;
    case UnaryOp::Sin:
    case UnaryOp::Cos:
      if (a.max_abs > 1e4) mark(n, "sin/cos of large arguments");  // range reduction differs
      return a.error + u + unit(n->dtype);
    case UnaryOp::Tanh:
    case UnaryOp::Sigmoid:
    case UnaryOp::Erf:   // |erf'| <= 1.13
    case UnaryOp::Atan:  // |atan'| <= 1
      return 1.2 * a.error + u + unit(n->dtype);
    case UnaryOp::Expm1:  // |expm1'| = expm1 + 1
      return (r.max_abs + 1) * a.error + u + unit(n->dtype);
    case UnaryOp::Log1p:
      if (a.error > 0 && a.max_abs >= 0.5) mark(n, "log1p of inexact values near -1");
      return 2 * a.error + u + unit(n->dtype);
    case UnaryOp::Tan:
    case UnaryOp::Asin:
    case UnaryOp::Acos:  // unbounded derivatives (near pi/2, near +-1)
      if (a.error > 0) mark(n, "tan/asin/acos of inexact values");
      return u + unit(n->dtype);
    case UnaryOp::BitwiseNot:
      return 0;
    case UnaryOp::Log:
      if (a.error > 0 && a.min_abs <= 4 * a.error) mark(n, "log of inexact values near zero");
      return (a.error > 0 ? a.error / a.min_abs : 0) + u + unit(n->dtype);
    case UnaryOp::Sqrt:
      if (a.error > 0 && a.min_abs <= 4 * a.error) mark(n, "sqrt of inexact values near zero");
      return (a.error > 0 ? a.error / (2 * std::sqrt(a.min_abs)) : 0) + u;
    case UnaryOp::Floor:
      if (a.error > 0) mark(n, "floor of inexact values");
      return 0;
    case UnaryOp::LogicalNot:
      if (close_call(n)) mark(n, "a zero test of inexact values");
      return 0;
  }
  return 0;
}

inline double ErrorBounds::bound_binary(const metajit::Node* n, NodeRange& r) {
  using metajit::BinaryOp;
  const NodeRange &a = in(n, 0), &b = in(n, 1);
  const double u = unit(n->dtype) * r.max_abs;
  const auto op = static_cast<BinaryOp>(n->op);
  if (metajit::is_comparison(op) || op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr) {
    if (close_call(n)) mark(n, "a comparison of values closer than their errors");
    return 0;
  }
  switch (op) {
    case BinaryOp::Add:
    case BinaryOp::Sub:
      return a.error + b.error + u;
    case BinaryOp::Mul:
      return a.max_abs * b.error + b.max_abs * a.error + a.error * b.error + u;
    case BinaryOp::Div:
      if ((a.error > 0 || b.error > 0) && b.min_abs <= 4 * b.error + 1e-300)
        mark(n, "a division of inexact values by values near zero");
      return b.min_abs > 0 ? (a.error + r.max_abs * b.error) / b.min_abs + u : 0;
    case BinaryOp::Pow:
      if (a.error > 0 || b.error > 0) mark(n, "pow of inexact values");
      return u;
    case BinaryOp::Maximum:
    case BinaryOp::Minimum:
      return std::max(a.error, b.error);
    default:
      return 0;
  }
}

inline double ErrorBounds::bound_reduction(const metajit::Node* n, NodeRange& r, int64_t terms) {
  const NodeRange& a = in(n, 0);
  const auto op = static_cast<metajit::ReduceOp>(n->op);
  const double t = double(terms);
  if (op == metajit::ReduceOp::Max || op == metajit::ReduceOp::Min) return a.error;
  if (op == metajit::ReduceOp::Mul) {
    if (!metajit::is_float(n->dtype)) return 0;
    // Partial products in another order may overflow or underflow where these did not.
    const double big = std::max(1.0, a.max_abs), small = a.min_abs > 0 ? a.min_abs : 1.0;
    if (t * std::log2(big) > 60 || t * std::log2(1 / std::min(1.0, small)) > 60)
      mark(n, "a product whose partial products may overflow in another order");
    if (a.error > 0) mark(n, "a product of inexact values");
    return t * unit(n->dtype) * std::max(r.max_abs, 1e-300);
  }
  if (metajit::is_float(n->dtype) && t * a.max_abs > overflow_limit(n->dtype))
    mark(n, "a sum whose partial sums may overflow in another order");
  return t * a.error + t * unit(n->dtype) * t * a.max_abs;
}

inline bool ErrorBounds::close_call(const metajit::Node* n) const {
  if (n->inputs.size() == 1) {
    const NodeRange& a = in(n, 0);
    return a.error > 0 && a.min_abs <= 2 * a.error;
  }
  const NodeRange &a = in(n, 0), &b = in(n, 1);
  const double e = a.error + b.error;
  if (e == 0) return false;
  // The closest pair of elements, from the reference values.
  const std::vector<double> x = values_[index_.at(n->inputs[0].get())].as_double();
  const std::vector<double> y = values_[index_.at(n->inputs[1].get())].as_double();
  for (size_t k = 0; k < x.size() && k < y.size(); ++k)
    if (!(std::fabs(x[k] - y[k]) > 2 * e) || std::fabs(x[k]) <= 2 * a.error ||
        std::fabs(y[k]) <= 2 * b.error)
      return true;
  return false;
}

}  // namespace metajit_test
