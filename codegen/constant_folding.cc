#include <algorithm>
#include <cmath>
#include <optional>

#include "codegen/graph_passes.h"

namespace metajit {
namespace {

// Integers fold exactly as the kernel computes them: wrapping int64 arithmetic, then the
// dtype's wrap. Floats fold in double, then are rounded to the dtype: for + - * / and sqrt that
// is the kernel's float32 result too, but a float32 transcendental (exp, sin, ...) folded here
// is the correctly rounded value, while the kernel's float32 vector math is within the 4 ulp
// the vector-math test allows (tests/test_vector_math.cc). A result a double cannot hold
// exactly (int64 beyond 2^53) is not folded: scalars travel as doubles.
std::optional<double> integral_result(int64_t v, DType t) {
  if (t == DType::Int32) v = int32_t(uint32_t(uint64_t(v)));  // wraps like the kernel's cast
  if (t == DType::Int16) v = int16_t(uint16_t(uint64_t(v)));
  if (t == DType::Int8) v = int8_t(uint8_t(uint64_t(v)));
  if (t == DType::UInt8) v = uint8_t(uint64_t(v));
  if (t == DType::Bool) v = v != 0;
  double d = double(v);
  if (d >= 9223372036854775808.0 || int64_t(d) != v) return std::nullopt;
  return d;
}

int64_t wrap_add(int64_t a, int64_t b) {
  return int64_t(uint64_t(a) + uint64_t(b));
}
int64_t wrap_sub(int64_t a, int64_t b) {
  return int64_t(uint64_t(a) - uint64_t(b));
}
int64_t wrap_mul(int64_t a, int64_t b) {
  return int64_t(uint64_t(a) * uint64_t(b));
}

// shift_left / shift_right as the kernels compute them (CFamilyEmitter::shift).
int64_t shifted(bool left, int64_t x, int64_t s, DType t) {
  const uint64_t bits = t == DType::Int64 ? 64 : 32;
  if (uint64_t(s) >= bits) return left ? 0 : (x < 0 ? -1 : 0);
  return left ? int64_t(uint64_t(x) << s) : x >> s;
}

std::optional<double> fold_unary(UnaryOp op, DType t, double x) {
  if (!is_float(t)) {
    int64_t v = int64_t(x);
    switch (op) {
      case UnaryOp::Neg:
        return integral_result(wrap_sub(0, v), t);
      case UnaryOp::Abs:
        return integral_result(v < 0 ? wrap_sub(0, v) : v, t);
      case UnaryOp::Relu:
        return integral_result(v > 0 ? v : 0, t);
      case UnaryOp::LogicalNot:
        return integral_result(v == 0, t);
      case UnaryOp::Floor:
        return integral_result(v, t);
      case UnaryOp::BitwiseNot:
        return integral_result(t == DType::Bool ? v == 0 : ~v, t);
      default:
        return std::nullopt;  // transcendentals of integers never reach here
    }
  }
  double r = 0;  // every case sets it; GCC cannot tell
  switch (op) {
    case UnaryOp::Neg:
      r = -x;
      break;
    case UnaryOp::Abs:
      r = std::fabs(x);
      break;
    case UnaryOp::Exp:
      r = std::exp(x);
      break;
    case UnaryOp::Log:
      r = std::log(x);
      break;
    case UnaryOp::Sqrt:
      r = std::sqrt(x);
      break;
    case UnaryOp::Sin:
      r = std::sin(x);
      break;
    case UnaryOp::Cos:
      r = std::cos(x);
      break;
    case UnaryOp::Tanh:
      r = std::tanh(x);
      break;
    case UnaryOp::Sigmoid:
      r = 1.0 / (1.0 + std::exp(-x));
      break;
    case UnaryOp::Relu:
      r = x > 0 ? x : 0.0;
      break;
    case UnaryOp::Floor:
      r = std::floor(x);
      break;
    case UnaryOp::LogicalNot:
      return x == 0 ? 1.0 : 0.0;
    case UnaryOp::Erf:
      r = std::erf(x);
      break;
    case UnaryOp::Log1p:
      r = std::log1p(x);
      break;
    case UnaryOp::Expm1:
      r = std::expm1(x);
      break;
    case UnaryOp::Tan:
      r = std::tan(x);
      break;
    case UnaryOp::Atan:
      r = std::atan(x);
      break;
    case UnaryOp::Asin:
      r = std::asin(x);
      break;
    case UnaryOp::Acos:
      r = std::acos(x);
      break;
    case UnaryOp::BitwiseNot:
      return std::nullopt;  // integers only: handled above
  }
  return to_dtype_value(r, t);
}

std::optional<double> fold_binary(BinaryOp op, DType operand, DType out, double a, double b) {
  switch (op) {
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
    default:
      break;
  }
  if (!is_float(operand)) {
    int64_t x = int64_t(a), y = int64_t(b);
    switch (op) {
      case BinaryOp::Add:
        return integral_result(wrap_add(x, y), out);
      case BinaryOp::Sub:
        return integral_result(wrap_sub(x, y), out);
      case BinaryOp::Mul:
        return integral_result(wrap_mul(x, y), out);
      case BinaryOp::Div:
        return integral_result(y == 0 ? 0 : y == -1 ? wrap_sub(0, x) : x / y, out);
      case BinaryOp::Maximum:
        return integral_result(x > y ? x : y, out);
      case BinaryOp::Minimum:
        return integral_result(x < y ? x : y, out);
      case BinaryOp::BitwiseAnd:
        return integral_result(x & y, out);
      case BinaryOp::BitwiseOr:
        return integral_result(x | y, out);
      case BinaryOp::BitwiseXor:
        return integral_result(x ^ y, out);
      case BinaryOp::ShiftLeft:
      case BinaryOp::ShiftRight:
        return integral_result(shifted(op == BinaryOp::ShiftLeft, x, y, out), out);
      case BinaryOp::Pow: {
        // Out of range or NaN gives 0, as in the kernels (mj_float_to_int).
        const double r = std::pow(a, b);
        if (out != DType::Int64) return to_dtype_value(r, out);
        const bool fits = r >= -9223372036854775808.0 && r < 9223372036854775808.0;
        return integral_result(r == r && fits ? int64_t(r) : 0, out);
      }
      default:
        return std::nullopt;
    }
  }
  double r = 0;  // every case sets it; GCC cannot tell
  switch (op) {
    case BinaryOp::Add:
      r = a + b;
      break;
    case BinaryOp::Sub:
      r = a - b;
      break;
    case BinaryOp::Mul:
      r = a * b;
      break;
    case BinaryOp::Div:
      r = a / b;
      break;
    case BinaryOp::Pow:
      r = std::pow(a, b);
      break;
    case BinaryOp::Maximum:
      r = (a != a || a > b) ? a : b;
      break;
    case BinaryOp::Minimum:
      r = (a != a || a < b) ? a : b;
      break;
    default:
      return std::nullopt;
  }
  return to_dtype_value(r, out);
}

std::optional<double> fold_cast(DType from, DType to, double v) {
  if (to == DType::Bool) return v != 0 ? 1.0 : 0.0;
  if (!is_float(from) && !is_float(to)) return integral_result(int64_t(v), to);  // wraps
  return to_dtype_value(v, to);
}

// Folds node `n` whose inputs are the scalars `v` (each already a value of its dtype).
std::optional<double> fold(const Graph& g, const GNode& n, const std::vector<double>& v) {
  switch (n.kind) {
    case OpKind::Unary:
      return fold_unary(UnaryOp(n.op), n.dtype, v[0]);
    case OpKind::Binary:
      return fold_binary(BinaryOp(n.op), g.nodes[n.inputs[0]].dtype, n.dtype, v[0], v[1]);
    case OpKind::Where:
      return v[0] != 0 ? v[1] : v[2];
    case OpKind::Cast:
      return fold_cast(g.nodes[n.inputs[0]].dtype, n.dtype, v[0]);
    default:
      return std::nullopt;
  }
}

// Node n's value where every input is a 0-d scalar.
std::optional<double> fold_scalars(const Graph& g, const GNode& n) {
  std::vector<double> values;
  for (int in : n.inputs) {
    if (g.nodes[in].kind != OpKind::Scalar) return std::nullopt;
    values.push_back(g.nodes[in].scalar);
  }
  return fold(g, n, values);
}

// Node n's value where every input is the same broadcast (same pattern, same shape) of a
// scalar: the value of the scalar that broadcast would carry.
std::optional<double> fold_broadcast_scalars(const Graph& g, const GNode& n) {
  const GNode& first = g.nodes[n.inputs[0]];
  std::vector<double> values;
  for (int in : n.inputs) {
    const GNode& b = g.nodes[in];
    if (b.kind != OpKind::BroadcastTo || b.bcast != first.bcast || b.shape != first.shape ||
        g.nodes[b.inputs[0]].kind != OpKind::Scalar)
      return std::nullopt;
    values.push_back(g.nodes[b.inputs[0]].scalar);
  }
  return fold(g, n, values);
}

// Orders g's nodes so that inputs come before their users again (a stable topological sort:
// fold_constants appends nodes that earlier users then read).
void sort_topologically(Graph& g) {
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
    // stop_grad()'s and fusion_barrier()'s identity casts: their users read the input (an
    // output keeps its own kernel); a barrier's input is then the value kept in memory.
    if (n.kind == OpKind::Cast && g.nodes[n.inputs[0]].dtype == n.dtype &&
        std::find(g.outputs.begin(), g.outputs.end(), int(i)) == g.outputs.end()) {
      if (n.fusion_barrier) g.nodes[n.inputs[0]].fusion_barrier = true;
      replacement[i] = n.inputs[0];
      changed = true;
      continue;
    }
    // Case 1: all inputs are 0-d scalars.
    if (std::optional<double> v = fold_scalars(g, n)) {
      n.kind = OpKind::Scalar;
      n.scalar = *v;
      n.inputs.clear();
      changed = true;
      continue;
    }
    // Case 2: all inputs are the same broadcast of scalars.
    if (std::optional<double> v = fold_broadcast_scalars(g, n)) {
      GNode folded;
      folded.kind = OpKind::Scalar;
      folded.dtype = n.dtype;
      folded.scalar = *v;
      GNode bcast = g.nodes[n.inputs[0]];
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
  // Appended nodes broke the "inputs before users" order for users of replaced nodes.
  sort_topologically(g);
  eliminate_dead_code(g);
}

}  // namespace metajit
