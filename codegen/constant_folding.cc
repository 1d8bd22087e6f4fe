#include <cmath>
#include <limits>

#include "codegen/graph_passes.h"

namespace metajit {
namespace {

// A double holding `v` as the dtype would store it (the kernels read scalars the same way).
double as_dtype(double v, DType t) {
  auto clamp_int = [](double x, double lo, double hi) {
    if (!(x == x)) return 0.0;
    return std::trunc(std::fmin(std::fmax(x, lo), hi));
  };
  switch (t) {
    case DType::Bool:
      return v != 0 ? 1.0 : 0.0;
    case DType::Int32:
      return clamp_int(v, -2147483648.0, 2147483647.0);
    case DType::Int64:
      return clamp_int(v, -9223372036854775808.0, 9223372036854774784.0);
    case DType::Float32:
      return double(float(v));
    case DType::Float64:
      return v;
  }
  return v;
}

double fold_unary(UnaryOp op, DType t, double x) {
  switch (op) {
    case UnaryOp::Neg:
      return -x;
    case UnaryOp::Abs:
      return std::fabs(x);
    case UnaryOp::Exp:
      return std::exp(x);
    case UnaryOp::Log:
      return std::log(x);
    case UnaryOp::Sqrt:
      return std::sqrt(x);
    case UnaryOp::Sin:
      return std::sin(x);
    case UnaryOp::Cos:
      return std::cos(x);
    case UnaryOp::Tanh:
      return std::tanh(x);
    case UnaryOp::Sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::Relu:
      return x > 0 ? x : 0.0;
    case UnaryOp::Floor:
      return std::floor(x);
    case UnaryOp::LogicalNot:
      return x == 0 ? 1.0 : 0.0;
  }
  return x;
}

double fold_binary(BinaryOp op, DType operand, double a, double b) {
  const bool integral = !is_float(operand);
  switch (op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a - b;
    case BinaryOp::Mul:
      return a * b;
    case BinaryOp::Div:
      if (!integral) return a / b;
      return b == 0 ? 0.0 : std::trunc(a / b);
    case BinaryOp::Pow:
      return std::pow(a, b);
    case BinaryOp::Maximum:
      return (a != a || a > b) ? a : b;
    case BinaryOp::Minimum:
      return (a != a || a < b) ? a : b;
    case BinaryOp::Eq:
      return a == b;
    case BinaryOp::Ne:
      return a != b;
    case BinaryOp::Lt:
      return a < b;
    case BinaryOp::Le:
      return a <= b;
    case BinaryOp::Gt:
      return a > b;
    case BinaryOp::Ge:
      return a >= b;
    case BinaryOp::LogicalAnd:
      return a != 0 && b != 0;
    case BinaryOp::LogicalOr:
      return a != 0 || b != 0;
  }
  return 0;
}

bool is_elementwise(OpKind k) {
  return k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Where || k == OpKind::Cast;
}

// Folds node `n` whose inputs are the scalars `v` (already in their dtypes).
double fold(const Graph& g, const GNode& n, const std::vector<double>& v) {
  switch (n.kind) {
    case OpKind::Unary:
      return fold_unary(UnaryOp(n.op), n.dtype, v[0]);
    case OpKind::Binary:
      return fold_binary(BinaryOp(n.op), g.nodes[n.inputs[0]].dtype, v[0], v[1]);
    case OpKind::Where:
      return v[0] != 0 ? v[1] : v[2];
    default:
      return v[0];  // Cast: as_dtype below does the conversion
  }
}

}  // namespace

void fold_constants(Graph& g) {
  std::vector<int> replacement(g.nodes.size());
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    replacement[i] = int(i);
    GNode& n = g.nodes[i];
    for (int& in : n.inputs) in = replacement[in];
    if (!is_elementwise(n.kind)) continue;
    // Case 1: all inputs are 0-d scalars.
    bool all_scalar = true;
    std::vector<double> values;
    for (int in : n.inputs) {
      all_scalar = all_scalar && g.nodes[in].kind == OpKind::Scalar;
      if (all_scalar) values.push_back(g.nodes[in].scalar);
    }
    if (all_scalar) {
      double v = as_dtype(fold(g, n, values), n.dtype);
      n.kind = OpKind::Scalar;
      n.scalar = v;
      n.inputs.clear();
      changed = true;
      continue;
    }
    // Case 2: all inputs are the same broadcast (same pattern, same shape) of scalars.
    const GNode& first = g.nodes[n.inputs[0]];
    bool same_broadcast = first.kind == OpKind::BroadcastTo;
    values.clear();
    for (int in : n.inputs) {
      const GNode& b = g.nodes[in];
      same_broadcast = same_broadcast && b.kind == OpKind::BroadcastTo && b.bcast == first.bcast &&
                       b.shape == first.shape && g.nodes[b.inputs[0]].kind == OpKind::Scalar;
      if (same_broadcast) values.push_back(g.nodes[b.inputs[0]].scalar);
    }
    if (same_broadcast) {
      GNode folded;
      folded.kind = OpKind::Scalar;
      folded.dtype = n.dtype;
      folded.scalar = as_dtype(fold(g, n, values), n.dtype);
      GNode bcast = first;
      bcast.dtype = n.dtype;
      // The folded scalar takes this node's place; the broadcast is appended after it. Both
      // are appended at the end, which keeps topological order for all earlier nodes; users
      // of node i are redirected below.
      g.nodes.push_back(std::move(folded));
      bcast.inputs = {int(g.nodes.size()) - 1};
      g.nodes.push_back(std::move(bcast));
      replacement.push_back(int(g.nodes.size()) - 2);
      replacement.push_back(int(g.nodes.size()) - 1);
      replacement[i] = int(g.nodes.size()) - 1;
      changed = true;
    }
  }
  if (!changed) return;
  for (int& o : g.outputs) o = replacement[o];
  // Appended nodes broke the "inputs before users" order for users of replaced nodes;
  // restore it with a stable topological sort.
  const int n = int(g.nodes.size());
  std::vector<int> order, state(n, 0);
  for (int root = 0; root < n; ++root) {
    std::vector<std::pair<int, size_t>> stack{{root, 0}};
    while (!stack.empty()) {
      auto& [id, next] = stack.back();
      if (state[id] == 2) {
        stack.pop_back();
        continue;
      }
      state[id] = 1;
      if (next < g.nodes[id].inputs.size()) {
        int in = g.nodes[id].inputs[next++];
        if (state[in] == 0) stack.push_back({in, 0});
        continue;
      }
      state[id] = 2;
      order.push_back(id);
      stack.pop_back();
    }
  }
  std::vector<int> pos(n);
  for (int k = 0; k < n; ++k) pos[order[k]] = k;
  std::vector<GNode> sorted(n);
  for (int k = 0; k < n; ++k) {
    sorted[k] = std::move(g.nodes[order[k]]);
    for (int& in : sorted[k].inputs) in = pos[in];
  }
  g.nodes = std::move(sorted);
  for (int& o : g.outputs) o = pos[o];
  eliminate_dead_code(g);
}

}  // namespace metajit
