// Graph construction for the element-wise operators and meta-ops: argument checks, shape and
// dtype rules (docs/design.md §3). Nothing is computed here.
#include "meta_ops/ops.h"

#include <metajit/error.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "base/dtype.h"
#include "meta_ops/autocast.h"

namespace metajit {
namespace {

// Negative extents and shapes too large for memory, named after the public op (new_node checks
// again, naming the meta-op, for shapes ops derive).
void check_shape(const Shape& s, const char* op, DType dtype) {
  check_shape_fits(op, dtype, s);
}

}  // namespace

int64_t norm_axis(int64_t axis, int64_t ndim, const char* op, const Shape& shape) {
  int64_t a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim)
    throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) +
                     " out of range for shape " + shape_str(shape) + " (valid: " +
                     (ndim ? std::to_string(-ndim) + ".." + std::to_string(ndim - 1)
                           : std::string("none, the Var is 0-d")) +
                     ")");
  return a;
}

void require_defined(const Var& x, const char* op, const char* what) {
  if (!x.defined())
    throw Error(std::string(op) + ": " + what + " is undefined (default-constructed)");
}

namespace {

Var make(OpKind kind, DType dtype, Shape shape, std::vector<NodePtr> inputs, int op = 0) {
  NodePtr n = new_node(kind, dtype, std::move(shape), std::move(inputs));
  n->op = op;
  return Var(std::move(n));
}

bool is_logical(BinaryOp op) {
  return op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr;
}

// The dtype bitwise ops compute in: the promotion of two integer (or Bool) operands; shifts
// of Bools count in Int32, as arithmetic does. Floats are a DTypeError.
DType bitwise_operand(BinaryOp op, const Var& a, const Var& b) {
  if (is_float(a.dtype()) || is_float(b.dtype()))
    throw DTypeError(std::string(binary_op_name(op)) + ": operands have dtypes " +
                     dtype_name(a.dtype()) + " " + shape_str(a.shape()) + " and " +
                     dtype_name(b.dtype()) + " " + shape_str(b.shape()) +
                     "; bitwise ops take bool or an integer type");
  const DType t = promote(a.dtype(), b.dtype());
  const bool shift = op == BinaryOp::ShiftLeft || op == BinaryOp::ShiftRight;
  return shift && t == DType::Bool ? DType::Int32 : t;
}

// splitmix64: a small, well-mixed generator so rand() is the same on every platform.
uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Var random_array(Shape shape, uint64_t seed, DType dtype, bool normal, const char* op) {
  check_shape(shape, op, dtype);
  if (!is_float(dtype))
    throw DTypeError(std::string(op) + ": dtype " + dtype_name(dtype) +
                     " is not supported; expected float16, bfloat16, float32 or float64");
  int64_t n = numel_of(shape);
  BufferPtr buf = allocate_buffer(size_t(n) * dtype_size(dtype));
  uint64_t state = seed * 0x2545f4914f6cdd1dULL + 1;
  auto uniform = [&] { return double(splitmix64(state) >> 11) * 0x1.0p-53; };
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if (normal) {
      double u1 = uniform(), u2 = uniform();
      v = std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * M_PI * u2);
    } else {
      v = uniform();
    }
    if (dtype == DType::Float32) {
      float f = float(v);
      if (!normal && f >= 1.0f) f = std::nextafter(1.0f, 0.0f);  // keep [0, 1) after rounding
      static_cast<float*>(buf->data())[i] = f;
    } else if (dtype == DType::Float64) {
      static_cast<double*>(buf->data())[i] = v;
    } else {
      // A half type: rounded once from the double (store_dtype_value); [0, 1) kept by its
      // largest value below 1, where a draw just below 1 rounds up to it.
      const double below_one = dtype == DType::Float16 ? 1.0 - 0x1p-11 : 1.0 - 0x1p-8;
      store_dtype_value(!normal && v > below_one ? below_one : v, dtype,
                        static_cast<char*>(buf->data()) + size_t(i) * 2);
    }
  }
  NodePtr node = new_node(OpKind::Leaf, dtype, std::move(shape));
  node->data = std::move(buf);
  return Var(std::move(node));
}

std::vector<IndexExprPtr> parse_all(const std::vector<std::string>& texts, int num_vars,
                                    bool condition, const char* op, const char* what,
                                    const std::vector<int>& extra_ranks) {
  std::vector<IndexExprPtr> out;
  for (size_t k = 0; k < texts.size(); ++k)
    out.push_back(parse_index_expr(texts[k], num_vars, condition,
                                   std::string(op) + ": " + what + "[" + std::to_string(k) + "]",
                                   extra_ranks));
  return out;
}

// Extras are defined integer arrays (docs/design.md, "Data-dependent indexing"); returns their
// ranks for the parser.
std::vector<int> check_extras(const std::vector<Var>& extras, const char* op) {
  std::vector<int> ranks;
  for (size_t k = 0; k < extras.size(); ++k) {
    const std::string what = std::string(op) + ": extras[" + std::to_string(k) + "]";
    if (!extras[k].defined()) throw Error(what + " is an undefined Var");
    if (!is_index_dtype(extras[k].dtype()))
      throw DTypeError(what + " has dtype " + dtype_name(extras[k].dtype()) + " and shape " +
                       shape_str(extras[k].shape()) + "; expected " + kIndexDTypes);
    ranks.push_back(int(extras[k].ndim()));
  }
  return ranks;
}

// Trees built in C++ (composites, autograd) are checked like parsed ones: every @eK names an
// extra and gives one argument per axis.
void check_extra_reads(const IndexExprPtr& e, const std::vector<int>& ranks, const char* op) {
  if (e->kind == IxKind::Extra) {
    if (e->value < 0 || e->value >= int64_t(ranks.size()) ||
        int(e->args.size()) != ranks[size_t(e->value)])
      throw IndexExprError(std::string(op) + ": " + ix_to_string(*e) + " does not match the " +
                           std::to_string(ranks.size()) +
                           " extras given; @eK needs K < the number of extras and one argument "
                           "per axis of extras[K]");
    for (const IndexExprPtr& a : e->args) check_extra_reads(a, ranks, op);
    return;
  }
  for (const IndexExprPtr* c : {&e->a, &e->b, &e->c})
    if (*c) check_extra_reads(*c, ranks, op);
}

std::vector<NodePtr> with_extras(NodePtr first, const std::vector<Var>& extras) {
  std::vector<NodePtr> inputs{std::move(first)};
  for (const Var& e : extras) inputs.push_back(e.node());
  return inputs;
}

DType reduce_dtype(ReduceOp op, DType in) {
  if ((op == ReduceOp::Add || op == ReduceOp::Mul) && in == DType::Bool) return DType::Int32;
  return in;
}

}  // namespace

// ---------------------------------------------------------------- creating

Var array_from(const void* data, size_t count, DType dtype, Shape shape) {
  check_shape(shape, "array", dtype);
  int64_t n = numel_of(shape);
  if (int64_t(count) != n)
    throw ShapeError("array: " + std::to_string(count) + " values given for shape " +
                     shape_str(shape) + ", which needs " + std::to_string(n));
  BufferPtr buf = allocate_buffer(count * dtype_size(dtype));
  if (count) std::memcpy(buf->data(), data, count * dtype_size(dtype));
  NodePtr node = new_node(OpKind::Leaf, dtype, std::move(shape));
  node->data = std::move(buf);
  return Var(std::move(node));
}

Var scalar(double value, DType dtype) {
  NodePtr n = new_node(OpKind::Scalar, dtype, {});
  n->scalar = to_dtype_value(value, dtype);
  return Var(std::move(n));
}

Var full(Shape shape, double value, DType dtype) {
  check_shape(shape, "full", dtype);
  Var s = scalar(value, dtype);
  return shape.empty() ? s : broadcast_to(s, std::move(shape));
}
Var zeros(Shape shape, DType dtype) {
  check_shape(shape, "zeros", dtype);
  return full(std::move(shape), 0.0, dtype);
}
Var ones(Shape shape, DType dtype) {
  check_shape(shape, "ones", dtype);
  return full(std::move(shape), 1.0, dtype);
}

Var arange(int64_t n, DType dtype) {
  if (n < 0) throw ShapeError("arange: n = " + std::to_string(n) + " must be >= 0");
  if (dtype == DType::Bool) throw DTypeError("arange: dtype bool is not supported");
  Var v = make(OpKind::Iota, dtype, {n}, {});
  v.node()->axes = {0};
  return v;
}

Var rand(Shape shape, uint64_t seed, DType dtype) {
  return random_array(std::move(shape), seed, dtype, false, "rand");
}
Var randn(Shape shape, uint64_t seed, DType dtype) {
  return random_array(std::move(shape), seed, dtype, true, "randn");
}

// ---------------------------------------------------------------- element-wise

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t k = 0; k < n; ++k) {
    int64_t da = k < n - a.size() ? 1 : a[k - (n - a.size())];
    int64_t db = k < n - b.size() ? 1 : b[k - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError(std::string(op) + ": shapes " + shape_str(a) + " and " + shape_str(b) +
                       " cannot be broadcast together (axis " + std::to_string(k) + ": " +
                       std::to_string(da) + " vs " + std::to_string(db) +
                       "; sizes must be equal or 1)");
    out[k] = da == 1 ? db : da;
  }
  return out;
}

std::vector<Var> extras_of(const Node& n) {
  std::vector<Var> out;
  if (n.kind == OpKind::Reindex || n.kind == OpKind::ReindexReduce)
    for (size_t k = 1; k < n.inputs.size(); ++k) out.push_back(Var(n.inputs[k]));
  return out;
}

Var identity_without_gradient(const Var& x) {
  require_defined(x, "stop_grad");
  NodePtr n = new_node(OpKind::Cast, x.dtype(), x.shape(), {x.node()});
  n->stops_gradient = true;
  return Var(std::move(n));
}

Var fusion_barrier(const Var& x) {
  require_defined(x, "fusion_barrier");
  NodePtr n = new_node(OpKind::Cast, x.dtype(), x.shape(), {x.node()});
  n->fusion_barrier = true;
  return Var(std::move(n));
}

Var cast(const Var& x, DType dtype) {
  require_defined(x, "cast");
  if (x.dtype() == dtype) return x;
  return make(OpKind::Cast, dtype, x.shape(), {x.node()});
}

Var unary(UnaryOp op, const Var& x) {
  require_defined(x, unary_op_name(op));
  switch (op) {
    case UnaryOp::LogicalNot:
      return make(OpKind::Unary, DType::Bool, x.shape(), {cast(x, DType::Bool).node()}, int(op));
    case UnaryOp::Neg:
    case UnaryOp::Abs:
    case UnaryOp::Relu: {
      Var in = x.dtype() == DType::Bool ? cast(x, DType::Int32) : x;
      return make(OpKind::Unary, in.dtype(), in.shape(), {in.node()}, int(op));
    }
    case UnaryOp::Floor:
      if (!is_float(x.dtype())) return x.dtype() == DType::Bool ? cast(x, DType::Int32) : x;
      return make(OpKind::Unary, x.dtype(), x.shape(), {x.node()}, int(op));
    case UnaryOp::BitwiseNot:
      if (is_float(x.dtype()))
        throw DTypeError(std::string("bitwise_not: x has dtype ") + dtype_name(x.dtype()) +
                         " and shape " + shape_str(x.shape()) +
                         "; bitwise ops take bool or an integer type");
      return make(OpKind::Unary, x.dtype(), x.shape(), {x.node()}, int(op));
    default: {
      // Transcendentals of integers compute in float32 (JAX's convention).
      Var in = is_float(x.dtype()) ? x : cast(x, DType::Float32);
      return make(OpKind::Unary, in.dtype(), in.shape(), {in.node()}, int(op));
    }
  }
}

Var binary(BinaryOp op, const Var& a, const Var& b) {
  const char* name = binary_op_name(op);
  require_defined(a, name);
  require_defined(b, name);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  DType operand;
  if (is_logical(op)) {
    operand = DType::Bool;
  } else if (is_bitwise(op)) {
    operand = bitwise_operand(op, a, b);
  } else {
    operand = promote(a.dtype(), b.dtype());
    if (operand == DType::Bool && !is_comparison(op) && op != BinaryOp::Maximum &&
        op != BinaryOp::Minimum)
      operand = DType::Int32;  // arithmetic on two Bools counts in Int32
  }
  DType out = (is_comparison(op) || is_logical(op)) ? DType::Bool : operand;
  Var ca = broadcast_to(cast(a, operand), shape);
  Var cb = broadcast_to(cast(b, operand), shape);
  return make(OpKind::Binary, out, shape, {ca.node(), cb.node()}, int(op));
}

Var binary(BinaryOp op, const Var& a, double b) {
  require_defined(a, binary_op_name(op));
  return binary(op, a, scalar(b, a.dtype()));
}
Var binary(BinaryOp op, double a, const Var& b) {
  require_defined(b, binary_op_name(op));
  return binary(op, scalar(a, b.dtype()), b);
}

#define METAJIT_BINARY_OPERATOR(sym, op)         \
  Var operator sym(const Var& a, const Var& b) { \
    return binary(BinaryOp::op, a, b);           \
  }                                              \
  Var operator sym(const Var& a, double b) {     \
    return binary(BinaryOp::op, a, b);           \
  }                                              \
  Var operator sym(double a, const Var& b) {     \
    return binary(BinaryOp::op, a, b);           \
  }
METAJIT_BINARY_OPERATOR(+, Add)
METAJIT_BINARY_OPERATOR(-, Sub)
METAJIT_BINARY_OPERATOR(*, Mul)
METAJIT_BINARY_OPERATOR(/, Div)
METAJIT_BINARY_OPERATOR(==, Eq)
METAJIT_BINARY_OPERATOR(!=, Ne)
METAJIT_BINARY_OPERATOR(<, Lt)
METAJIT_BINARY_OPERATOR(<=, Le)
METAJIT_BINARY_OPERATOR(>, Gt)
METAJIT_BINARY_OPERATOR(>=, Ge)
#undef METAJIT_BINARY_OPERATOR

Var operator-(const Var& x) {
  return unary(UnaryOp::Neg, x);
}
Var exp(const Var& x) {
  return unary(UnaryOp::Exp, x);
}
Var log(const Var& x) {
  return unary(UnaryOp::Log, x);
}
Var sqrt(const Var& x) {
  return unary(UnaryOp::Sqrt, x);
}
Var abs(const Var& x) {
  return unary(UnaryOp::Abs, x);
}
Var sin(const Var& x) {
  return unary(UnaryOp::Sin, x);
}
Var cos(const Var& x) {
  return unary(UnaryOp::Cos, x);
}
Var tanh(const Var& x) {
  return unary(UnaryOp::Tanh, x);
}
Var sigmoid(const Var& x) {
  return unary(UnaryOp::Sigmoid, x);
}
Var relu(const Var& x) {
  return unary(UnaryOp::Relu, x);
}
Var floor(const Var& x) {
  return unary(UnaryOp::Floor, x);
}
Var logical_not(const Var& x) {
  return unary(UnaryOp::LogicalNot, x);
}
Var maximum(const Var& a, const Var& b) {
  return binary(BinaryOp::Maximum, a, b);
}
Var minimum(const Var& a, const Var& b) {
  return binary(BinaryOp::Minimum, a, b);
}
Var pow(const Var& a, const Var& b) {
  return binary(BinaryOp::Pow, a, b);
}
Var maximum(const Var& a, double b) {
  return binary(BinaryOp::Maximum, a, b);
}
Var minimum(const Var& a, double b) {
  return binary(BinaryOp::Minimum, a, b);
}
Var pow(const Var& a, double b) {
  return binary(BinaryOp::Pow, a, b);
}
Var logical_and(const Var& a, const Var& b) {
  return binary(BinaryOp::LogicalAnd, a, b);
}
Var logical_or(const Var& a, const Var& b) {
  return binary(BinaryOp::LogicalOr, a, b);
}
Var erf(const Var& x) {
  return unary(UnaryOp::Erf, x);
}
Var log1p(const Var& x) {
  return unary(UnaryOp::Log1p, x);
}
Var expm1(const Var& x) {
  return unary(UnaryOp::Expm1, x);
}
Var tan(const Var& x) {
  return unary(UnaryOp::Tan, x);
}
Var atan(const Var& x) {
  return unary(UnaryOp::Atan, x);
}
Var asin(const Var& x) {
  return unary(UnaryOp::Asin, x);
}
Var acos(const Var& x) {
  return unary(UnaryOp::Acos, x);
}
Var bitwise_not(const Var& x) {
  return unary(UnaryOp::BitwiseNot, x);
}
Var bitwise_and(const Var& a, const Var& b) {
  return binary(BinaryOp::BitwiseAnd, a, b);
}
Var bitwise_or(const Var& a, const Var& b) {
  return binary(BinaryOp::BitwiseOr, a, b);
}
Var bitwise_xor(const Var& a, const Var& b) {
  return binary(BinaryOp::BitwiseXor, a, b);
}
Var shift_left(const Var& a, const Var& b) {
  return binary(BinaryOp::ShiftLeft, a, b);
}
Var shift_right(const Var& a, const Var& b) {
  return binary(BinaryOp::ShiftRight, a, b);
}

Var where(const Var& cond, const Var& a, const Var& b) {
  require_defined(cond, "where");
  require_defined(a, "where");
  require_defined(b, "where");
  Shape shape =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  DType dt = promote(a.dtype(), b.dtype());
  Var c = broadcast_to(cast(cond, DType::Bool), shape);
  Var ca = broadcast_to(cast(a, dt), shape);
  Var cb = broadcast_to(cast(b, dt), shape);
  return make(OpKind::Where, dt, shape, {c.node(), ca.node(), cb.node()});
}

// ---------------------------------------------------------------- meta-ops

Var broadcast_to(const Var& x, Shape shape, std::vector<int64_t> dims) {
  require_defined(x, "broadcast_to");
  check_shape(shape, "broadcast_to", x.dtype());
  const int64_t out_nd = int64_t(shape.size());
  std::vector<bool> is_new(shape.size(), false);
  auto fail = [&](const std::string& why) {
    throw ShapeError("broadcast_to: cannot broadcast " + shape_str(x.shape()) + " to " +
                     shape_str(shape) + ": " + why);
  };
  if (dims.empty()) {
    if (x.ndim() > out_nd) fail("the target has fewer axes than the input");
    for (int64_t k = 0; k < out_nd - x.ndim(); ++k) is_new[k] = true;
  } else {
    for (int64_t d : dims) {
      int64_t a = norm_axis(d, out_nd, "broadcast_to", shape);
      if (is_new[a]) fail("axis " + std::to_string(d) + " listed twice in dims");
      is_new[a] = true;
    }
    if (out_nd - int64_t(dims.size()) != x.ndim())
      fail(std::to_string(dims.size()) + " new axes in dims leave " +
           std::to_string(out_nd - int64_t(dims.size())) + " axes for an input with " +
           std::to_string(x.ndim()));
  }
  std::vector<BroadcastAxis> bc(shape.size());
  bool identity = x.ndim() == out_nd;
  for (int64_t k = 0, j = 0; k < out_nd; ++k) {
    if (is_new[k]) {
      bc[k] = BroadcastAxis::New;
      continue;
    }
    int64_t in = x.shape()[j++];
    if (in == shape[k]) {
      // Equal extents pass the index through, 1 -> 1 included: a batch of 1 then uses the
      // same kernel as a batch of 8.
      bc[k] = BroadcastAxis::Keep;
    } else if (in == 1) {
      bc[k] = BroadcastAxis::Expand;
      identity = false;
    } else {
      fail("axis " + std::to_string(k) + " has size " + std::to_string(in) + " in the input and " +
           std::to_string(shape[k]) + " in the target; sizes must be equal or 1 in the input");
    }
  }
  if (identity) return x;
  Var v = make(OpKind::BroadcastTo, x.dtype(), std::move(shape), {x.node()});
  v.node()->bcast = std::move(bc);
  return v;
}

Var reindex_tree(const Var& x, Shape shape, std::vector<IndexExprPtr> indexes,
                 double overflow_value, std::vector<IndexExprPtr> overflow_conditions,
                 const std::vector<Var>& extras) {
  require_defined(x, "reindex");
  check_shape(shape, "reindex", x.dtype());
  if (int64_t(indexes.size()) != x.ndim())
    throw IndexExprError("reindex: " + std::to_string(indexes.size()) +
                         " index expressions given for an input of shape " + shape_str(x.shape()) +
                         "; expected " + std::to_string(x.ndim()) +
                         " (one per input axis), over the output indices i0..i" +
                         std::to_string(int64_t(shape.size()) - 1));
  const std::vector<int> ranks = check_extras(extras, "reindex");
  for (const auto* list : {&indexes, &overflow_conditions})
    for (const IndexExprPtr& e : *list) check_extra_reads(e, ranks, "reindex");
  Var v = make(OpKind::Reindex, x.dtype(), std::move(shape), with_extras(x.node(), extras));
  v.node()->indexes = std::move(indexes);
  v.node()->conditions = std::move(overflow_conditions);
  v.node()->scalar = to_dtype_value(overflow_value, x.dtype());  // as scalar() converts
  return v;
}

Var reindex(const Var& x, Shape shape, std::vector<std::string> indexes, double overflow_value,
            std::vector<std::string> overflow_conditions, std::vector<Var> extras) {
  require_defined(x, "reindex");
  check_shape(shape, "reindex", x.dtype());
  int nv = int(shape.size());
  if (int64_t(indexes.size()) != x.ndim())
    return reindex_tree(x, shape, std::vector<IndexExprPtr>(indexes.size(), ix_const(0)), 0, {},
                        {});
  const std::vector<int> ranks = check_extras(extras, "reindex");
  return reindex_tree(
      x, shape, parse_all(indexes, nv, false, "reindex", "indexes", ranks), overflow_value,
      parse_all(overflow_conditions, nv, true, "reindex", "overflow_conditions", ranks), extras);
}

Var reindex_reduce_tree(const Var& y, ReduceOp op, Shape shape, std::vector<IndexExprPtr> indexes,
                        std::vector<IndexExprPtr> overflow_conditions,
                        const std::vector<Var>& extras) {
  require_defined(y, "reindex_reduce");
  check_shape(shape, "reindex_reduce", y.dtype());
  if (op == ReduceOp::Mean)
    throw Error("reindex_reduce: op mean is not supported; expected add, mul, max or min");
  if (indexes.size() != shape.size())
    throw IndexExprError("reindex_reduce: " + std::to_string(indexes.size()) +
                         " index expressions given for an output of shape " + shape_str(shape) +
                         "; expected " + std::to_string(shape.size()) +
                         " (one per output axis), over the input indices i0..i" +
                         std::to_string(y.ndim() - 1));
  const std::vector<int> ranks = check_extras(extras, "reindex_reduce");
  for (const auto* list : {&indexes, &overflow_conditions})
    for (const IndexExprPtr& e : *list) check_extra_reads(e, ranks, "reindex_reduce");
  DType dt = reduce_dtype(op, y.dtype());
  Var in = cast(y, dt);
  Var v =
      make(OpKind::ReindexReduce, dt, std::move(shape), with_extras(in.node(), extras), int(op));
  v.node()->indexes = std::move(indexes);
  v.node()->conditions = std::move(overflow_conditions);
  return v;
}

Var reindex_reduce(const Var& y, ReduceOp op, Shape shape, std::vector<std::string> indexes,
                   std::vector<std::string> overflow_conditions, std::vector<Var> extras) {
  require_defined(y, "reindex_reduce");
  check_shape(shape, "reindex_reduce", y.dtype());
  int nv = int(y.ndim());
  if (indexes.size() != shape.size())
    return reindex_reduce_tree(y, op, shape, std::vector<IndexExprPtr>(indexes.size(), ix_const(0)),
                               {}, {});
  const std::vector<int> ranks = check_extras(extras, "reindex_reduce");
  return reindex_reduce_tree(
      y, op, shape, parse_all(indexes, nv, false, "reindex_reduce", "indexes", ranks),
      parse_all(overflow_conditions, nv, true, "reindex_reduce", "overflow_conditions", ranks),
      extras);
}

Var reduce(const Var& x, ReduceOp op, std::vector<int64_t> dims, bool keepdims) {
  require_defined(x, "reduce");
  const int64_t nd = x.ndim();
  std::vector<bool> reduced(size_t(nd), dims.empty());
  for (int64_t d : dims) {
    int64_t a = norm_axis(d, nd, "reduce", x.shape());
    if (reduced[a])
      throw ShapeError("reduce: axis " + std::to_string(d) + " listed twice for shape " +
                       shape_str(x.shape()));
    reduced[a] = true;
  }
  if (op == ReduceOp::Mean) {
    Var in = is_float(x.dtype()) ? x : cast(x, DType::Float32);
    // In double: the reduced extents of an empty x (a 0 on a kept axis) may multiply past int64
    // (found by fuzz_api_sequence: [2^63-1, 7, 0] over axes 0 and 1).
    double count = 1;
    for (int64_t k = 0; k < nd; ++k)
      if (reduced[k]) count *= double(x.shape()[k]);
    Var s = reduce(in, ReduceOp::Add, dims, keepdims);
    // 0/0 for an empty reduction gives NaN, like numpy.
    return s / count;
  }
  Shape out;
  std::vector<int64_t> axes;
  for (int64_t k = 0; k < nd; ++k) {
    if (reduced[k]) {
      axes.push_back(k);
      if (keepdims) out.push_back(1);
    } else {
      out.push_back(x.shape()[k]);
    }
  }
  DType dt = reduce_dtype(op, x.dtype());
  Var in = cast(x, dt);
  if (axes.empty()) return in;
  Var v = make(OpKind::Reduce, dt, std::move(out), {in.node()}, int(op));
  v.node()->axes = std::move(axes);
  v.node()->keepdims = keepdims;
  return v;
}

// Under autocast sum, mean and prod take a half input as Float32 (meta_ops/autocast.h); the
// meta-op reduce() itself, which matmul and conv2d sum with, keeps its input's dtype, and so do
// max and min: their result is one of the inputs, exact in the half type, and a Float32 one would
// double the bytes of max_pool2d's activations (docs/design.md §3).
Var sum(const Var& x, std::vector<int64_t> dims, bool keepdims) {
  return reduce(autocast_float32(x), ReduceOp::Add, std::move(dims), keepdims);
}
Var mean(const Var& x, std::vector<int64_t> dims, bool keepdims) {
  return reduce(autocast_float32(x), ReduceOp::Mean, std::move(dims), keepdims);
}
Var max(const Var& x, std::vector<int64_t> dims, bool keepdims) {
  return reduce(x, ReduceOp::Max, std::move(dims), keepdims);
}
Var min(const Var& x, std::vector<int64_t> dims, bool keepdims) {
  return reduce(x, ReduceOp::Min, std::move(dims), keepdims);
}
Var prod(const Var& x, std::vector<int64_t> dims, bool keepdims) {
  return reduce(autocast_float32(x), ReduceOp::Mul, std::move(dims), keepdims);
}

}  // namespace metajit
