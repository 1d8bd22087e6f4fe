// The oracle (docs/design.md §3): evaluates each node with plain loops into a full host tensor.
// Nothing here is shared with the code generator on purpose, so that a mistake in lowering
// cannot be mirrored here. Values are computed in the node's own C++ element type (never via
// double), so int64 results are exact.
//
// Semantic choices, kept identical everywhere in this file:
// - Integer add/sub/mul/neg/abs wrap (computed in the unsigned type, no UB).
// - Integer division truncates; x/0 == 0 and x/-1 == -x (wrapping), so nothing traps.
// - float -> int conversion truncates toward zero; NaN or an out-of-range value gives 0
//   (C++ leaves it undefined; generated code may differ there and tests avoid such values).
// - Integer exp/log/sqrt/sin/cos/tanh/sigmoid/pow compute in double and convert back with
//   the rule above. Integer floor is the identity.
// - Arithmetic on Bool (which graph building normally promotes to Int32 first) computes in
//   int32 and converts the result back with != 0.
// - Maximum/minimum, and max/min reductions, propagate NaN like numpy.
// - Int8/UInt8/Int16 arithmetic wraps like the wider integers (computed in int, converted back).
// - Float16/BFloat16: every op computes in float and rounds its result to the half type once,
//   to nearest even (as numpy's float16 and PyTorch's eager ops do; kernels round only what
//   they store, so tests compare them within a few ulps: reference_compare.h); a double or an
//   integer converts to a half type directly, not through float. Reductions accumulate in float and
//   round once at the end. The rounding here (round_half) is written apart from both the
//   public float16/bfloat16 conversions and the kernels' prelude: by scaling and nearbyint.
#include "support/reference_interpreter.h"

#include <metajit/error.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "base/dtype.h"
#include "runtime/residency.h"

namespace metajit {
namespace {

// ---------------------------------------------------------------- element types

// Calls f.template operator()<T>() with the C++ element type of `dt`, so that a whole loop
// is instantiated per dtype instead of switching per element.
template <class F>
decltype(auto) visit_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::Bool:
      return f.template operator()<bool>();
    case DType::Int32:
      return f.template operator()<int32_t>();
    case DType::Int64:
      return f.template operator()<int64_t>();
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
    case DType::Int8:
      return f.template operator()<int8_t>();
    case DType::UInt8:
      return f.template operator()<uint8_t>();
    case DType::Int16:
      return f.template operator()<int16_t>();
    case DType::Float16:
      return f.template operator()<float16>();
    case DType::BFloat16:
      return f.template operator()<bfloat16>();
  }
  throw Error("reference interpreter: unknown dtype " + std::to_string(int(dt)));
}

template <class T>
constexpr bool kHalf = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

// `v` rounded to nearest even in half type H: to a multiple of the place of its last
// significant bit (11 for float16, 8 for bfloat16; subnormals keep the smallest exponent's),
// Inf from halfway above the largest finite value. The scaled quotient is exact in double.
template <class H>
H round_half(double v) {
  constexpr bool f16 = std::is_same_v<H, float16>;
  constexpr int bits = f16 ? 11 : 8, emin = f16 ? -14 : -126, emax = f16 ? 15 : 127;
  if (std::isnan(v)) return H(std::copysign(std::numeric_limits<float>::quiet_NaN(), v));
  if (std::fabs(v) >= std::ldexp(2.0 - std::ldexp(1.0, -bits), emax))
    return H(std::copysign(std::numeric_limits<float>::infinity(), v));
  if (v == 0) return H(float(v));
  const int e = std::max(std::ilogb(v), emin);
  const double place = std::ldexp(1.0, e - (bits - 1));
  return H(float(std::nearbyint(v / place) * place));  // representable: float and H exact
}

// The type integer arithmetic on T is done in: Bool counts in int32.
template <class T>
using Arith = std::conditional_t<std::is_same_v<T, bool>, int32_t, T>;

// Converts one value with the rules of cast (see the file comment).
template <class To, class From>
To convert(From v) {
  if constexpr (kHalf<From>) {
    return convert<To>(float(v));
  } else if constexpr (kHalf<To>) {
    return round_half<To>(static_cast<double>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    const double t = std::trunc(static_cast<double>(v));
    // lowest() is -2^(bits-1) (0 unsigned) and max() + 1 is 2^(bits-1) (2^bits unsigned):
    // both exactly representable.
    constexpr double lo = static_cast<double>(std::numeric_limits<To>::lowest());
    constexpr double hi = static_cast<double>(std::numeric_limits<To>::max()) + 1.0;
    if (!(t >= lo && t < hi)) return To(0);  // NaN or out of range: C++ leaves it undefined
    return static_cast<To>(t);
  } else {
    return static_cast<To>(v);  // int->int wraps (C++20), bool->0/1, ->float rounds
  }
}

template <class T>
T wrap_neg(T a) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(U(0) - static_cast<U>(a));
}

// NaN-propagating maximum / minimum (numpy's maximum, and max/min reductions).
template <class T>
T max_value(T a, T b) {
  if constexpr (kHalf<T>) {
    return convert<T>(max_value(float(a), float(b)));
  } else if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
    return b > a ? b : a;
  } else {
    return b > a ? b : a;
  }
}
template <class T>
T min_value(T a, T b) {
  if constexpr (kHalf<T>) {
    return convert<T>(min_value(float(a), float(b)));
  } else if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
    return b < a ? b : a;
  } else {
    return b < a ? b : a;
  }
}

template <class T>
T unary_value(UnaryOp op, T x) {
  if constexpr (kHalf<T>) {
    return convert<T>(unary_value(op, float(x)));
  } else if constexpr (std::is_floating_point_v<T>) {
    // Float32 uses the float overloads, as generated code does.
    switch (op) {
      case UnaryOp::Neg:
        return -x;
      case UnaryOp::Abs:
        return std::abs(x);
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
        return T(1) / (T(1) + std::exp(-x));
      case UnaryOp::Relu:
        return x > T(0) ? x : T(0);
      case UnaryOp::Floor:
        return std::floor(x);
      case UnaryOp::LogicalNot:
        return x == T(0) ? T(1) : T(0);
      case UnaryOp::Erf:
        return std::erf(x);
      case UnaryOp::Log1p:
        return std::log1p(x);
      case UnaryOp::Expm1:
        return std::expm1(x);
      case UnaryOp::Tan:
        return std::tan(x);
      case UnaryOp::Atan:
        return std::atan(x);
      case UnaryOp::Asin:
        return std::asin(x);
      case UnaryOp::Acos:
        return std::acos(x);
      case UnaryOp::BitwiseNot:
        break;  // integers only
    }
  } else {
    using A = Arith<T>;
    const A a = static_cast<A>(x);
    switch (op) {
      case UnaryOp::Neg:
        return convert<T>(wrap_neg(a));
      case UnaryOp::Abs:
        return convert<T>(a < 0 ? wrap_neg(a) : a);
      case UnaryOp::Relu:
        return convert<T>(a > 0 ? a : A(0));
      case UnaryOp::Floor:
        return x;
      case UnaryOp::LogicalNot:
        return convert<T>(a == 0);
      case UnaryOp::BitwiseNot:  // on Bool: logical not
        return std::is_same_v<T, bool> ? convert<T>(a == 0) : convert<T>(A(~a));
      default:
        return convert<T>(unary_value<double>(op, static_cast<double>(a)));
    }
  }
  throw Error("reference interpreter: unknown unary op " + std::to_string(int(op)));
}

// The non-comparison, non-logical binary ops, computed in T.
template <class T>
T arith_value(BinaryOp op, T x, T y) {
  if constexpr (kHalf<T>) {
    return convert<T>(arith_value(op, float(x), float(y)));
  } else if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case BinaryOp::Add:
        return x + y;
      case BinaryOp::Sub:
        return x - y;
      case BinaryOp::Mul:
        return x * y;
      case BinaryOp::Div:
        return x / y;
      case BinaryOp::Pow:
        return std::pow(x, y);
      case BinaryOp::Maximum:
        return max_value(x, y);
      case BinaryOp::Minimum:
        return min_value(x, y);
      default:
        break;
    }
  } else {
    using A = Arith<T>;
    using U = std::make_unsigned_t<A>;
    const A a = static_cast<A>(x), b = static_cast<A>(y);
    switch (op) {
      case BinaryOp::Add:
        return convert<T>(static_cast<A>(U(a) + U(b)));
      case BinaryOp::Sub:
        return convert<T>(static_cast<A>(U(a) - U(b)));
      case BinaryOp::Mul:
        return convert<T>(static_cast<A>(U(a) * U(b)));
      case BinaryOp::Div:
        if (b == 0) return T(0);
        if (b == -1) return convert<T>(wrap_neg(a));  // lowest / -1 would trap
        return convert<T>(static_cast<A>(a / b));
      case BinaryOp::Pow:
        return convert<T>(std::pow(static_cast<double>(a), static_cast<double>(b)));
      case BinaryOp::Maximum:
        return max_value(x, y);
      case BinaryOp::Minimum:
        return min_value(x, y);
      case BinaryOp::BitwiseAnd:
        return convert<T>(A(a & b));
      case BinaryOp::BitwiseOr:
        return convert<T>(A(a | b));
      case BinaryOp::BitwiseXor:
        return convert<T>(A(a ^ b));
      case BinaryOp::ShiftLeft:  // by the width or more, or by a negative amount: 0
        return convert<T>(U(b) < U(8 * sizeof(A)) ? A(U(a) << b) : A(0));
      case BinaryOp::ShiftRight:  // arithmetic; out of range: the sign
        return convert<T>(U(b) < U(8 * sizeof(A)) ? A(a >> b) : A(a < 0 ? -1 : 0));
      default:
        break;
    }
  }
  throw Error(std::string("reference interpreter: ") + binary_op_name(op) +
              " is not an arithmetic op");
}

template <class T>
bool compare_same(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::Eq:
      return x == y;
    case BinaryOp::Ne:
      return x != y;
    case BinaryOp::Lt:
      return x < y;
    case BinaryOp::Le:
      return x <= y;
    case BinaryOp::Gt:
      return x > y;
    case BinaryOp::Ge:
      return x >= y;
    default:
      break;
  }
  throw Error(std::string("reference interpreter: ") + binary_op_name(op) + " is not a comparison");
}

template <class T>
bool compare_value(BinaryOp op, T x, T y) {
  if constexpr (kHalf<T>) {
    return compare_value(op, float(x), float(y));
  } else {
    return compare_same(op, x, y);
  }
}

template <class T>
T identity_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::Add:
      return T(0);
    case ReduceOp::Mul:
      return T(1);
    case ReduceOp::Max:  // bool: false
      if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
      return std::numeric_limits<T>::lowest();
    case ReduceOp::Min:  // bool: true
      if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
      return std::numeric_limits<T>::max();
    case ReduceOp::Mean:
      break;
  }
  throw Error(std::string("reference interpreter: reduce op ") + reduce_op_name(op) +
              " must be lowered before evaluation (mean becomes add * scale)");
}

template <class T>
T reduce_identity(ReduceOp op) {
  if constexpr (kHalf<T>) {
    return convert<T>(reduce_identity<float>(op));
  } else {
    return identity_of<T>(op);
  }
}

template <class T>
T reduce_combine(ReduceOp op, T acc, T v) {
  switch (op) {
    case ReduceOp::Add:
      return arith_value(BinaryOp::Add, acc, v);
    case ReduceOp::Mul:
      return arith_value(BinaryOp::Mul, acc, v);
    case ReduceOp::Max:
      return max_value(acc, v);
    case ReduceOp::Min:
      return min_value(acc, v);
    case ReduceOp::Mean:
      break;
  }
  return reduce_identity<T>(op);  // throws for Mean
}

// ---------------------------------------------------------------- tensors

HostTensor make_tensor(DType dt, const Shape& shape) {
  HostTensor t;
  t.dtype = dt;
  t.shape = shape;
  t.bytes.assign(static_cast<size_t>(numel_of(shape)) * dtype_size(dt), 0);
  return t;
}

// The byte vector is only storage; every element is written and read as T.
template <class T>
T* elems(HostTensor& t) {
  return reinterpret_cast<T*>(t.bytes.data());
}
template <class T>
const T* elems(const HostTensor& t) {
  return reinterpret_cast<const T*>(t.bytes.data());
}

int64_t count(const HostTensor& t) {
  return numel_of(t.shape);
}

Shape strides_of(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t k = s.size(); k-- > 0;) {
    st[k] = acc;
    acc *= s[k];
  }
  return st;
}

// Advances a row-major multi-index through `shape` (the last axis fastest).
void next_index(std::vector<int64_t>& idx, const Shape& shape) {
  for (size_t k = idx.size(); k-- > 0;) {
    if (++idx[k] < shape[k]) return;
    idx[k] = 0;
  }
}

int64_t dot(const std::vector<int64_t>& idx, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * strides[k];
  return off;
}

HostTensor convert_tensor(const HostTensor& in, DType to) {
  HostTensor out = make_tensor(to, in.shape);
  const int64_t n = count(in);
  visit_dtype(in.dtype, [&]<class From>() {
    visit_dtype(to, [&]<class To>() {
      const From* src = elems<From>(in);
      To* dst = elems<To>(out);
      for (int64_t i = 0; i < n; ++i) dst[i] = convert<To>(src[i]);
    });
  });
  return out;
}

// `in` itself when it already has dtype `to`, else a converted copy held in `scratch`.
const HostTensor& as_dtype(const HostTensor& in, DType to, HostTensor& scratch) {
  if (in.dtype == to) return in;
  scratch = convert_tensor(in, to);
  return scratch;
}

// ---------------------------------------------------------------- one node

[[noreturn]] void fail(const Node& n, const std::string& why) {
  throw Error(std::string("reference interpreter: ") + op_kind_name(n.kind) + " node #" +
              std::to_string(n.id) + ": " + why);
}

size_t expected_inputs(OpKind k) {
  switch (k) {
    case OpKind::Leaf:
    case OpKind::Scalar:
    case OpKind::Iota:
      return 0;
    case OpKind::Binary:
      return 2;
    case OpKind::Where:
      return 3;
    default:
      return 1;
  }
}

// Rejects what ix_eval cannot evaluate here: Param leaves (code generator only) and i<k>
// beyond the index space.
void check_expr(const Node& n, const IndexExprPtr& e, size_t num_vars, const char* what) {
  if (!e) fail(n, std::string("null expression in ") + what);
  if (e->kind == IxKind::Param) fail(n, std::string("Param leaf in ") + what);
  if (e->kind == IxKind::Var && (e->value < 0 || size_t(e->value) >= num_vars))
    fail(n, std::string(what) + " uses i" + std::to_string(e->value) + " but only " +
                std::to_string(num_vars) + " indices exist");
  for (const IndexExprPtr& c : {e->a, e->b, e->c})
    if (c) check_expr(n, c, num_vars, what);
  for (const IndexExprPtr& c : e->args) check_expr(n, c, num_vars, what);
}

void check_same_shape(const Node& n, const HostTensor& in) {
  if (in.shape != n.shape)
    fail(n, "input shape " + shape_str(in.shape) + " differs from output " + shape_str(n.shape));
}

HostTensor eval_leaf(const Node& n) {
  HostTensor out = make_tensor(n.dtype, n.shape);
  if (out.bytes.empty()) return out;
  const BufferPtr host = n.data ? buffer_on(n, Device::CPU) : nullptr;
  if (!host || host->bytes() < out.bytes.size())
    fail(n, "missing or short buffer for shape " + shape_str(n.shape));
  std::memcpy(out.bytes.data(), host->data(), out.bytes.size());
  // Bool must be 0/1 to be read as bool; normalise anything else that was stored.
  if (n.dtype == DType::Bool)
    for (unsigned char& b : out.bytes) b = b != 0;
  return out;
}

HostTensor eval_scalar(const Node& n) {
  HostTensor out = make_tensor(n.dtype, n.shape);
  visit_dtype(n.dtype, [&]<class T>() {
    const T v = convert<T>(n.scalar);
    T* dst = elems<T>(out);
    for (int64_t i = 0; i < count(out); ++i) dst[i] = v;
  });
  return out;
}

HostTensor eval_iota(const Node& n) {
  if (n.axes.size() != 1 || n.axes[0] < 0 || size_t(n.axes[0]) >= n.shape.size())
    fail(n, "axes must name one axis of shape " + shape_str(n.shape));
  const size_t axis = size_t(n.axes[0]);
  const int64_t stride = strides_of(n.shape)[axis], extent = n.shape[axis];
  HostTensor out = make_tensor(n.dtype, n.shape);
  visit_dtype(n.dtype, [&]<class T>() {
    T* dst = elems<T>(out);
    for (int64_t i = 0; i < count(out); ++i) dst[i] = convert<T>((i / stride) % extent);
  });
  return out;
}

HostTensor eval_unary(const Node& n, const HostTensor& in) {
  check_same_shape(n, in);
  const UnaryOp op = static_cast<UnaryOp>(n.op);
  HostTensor out = make_tensor(n.dtype, n.shape);
  const int64_t num = count(out);
  if (op == UnaryOp::LogicalNot) {
    // Any input dtype; the result is whatever "x == 0" gives, in the output dtype.
    visit_dtype(in.dtype, [&]<class X>() {
      visit_dtype(n.dtype, [&]<class T>() {
        const X* src = elems<X>(in);
        T* dst = elems<T>(out);
        for (int64_t i = 0; i < num; ++i) dst[i] = convert<T>(!convert<bool>(src[i]));
      });
    });
    return out;
  }
  HostTensor scratch;
  const HostTensor& x = as_dtype(in, n.dtype, scratch);
  visit_dtype(n.dtype, [&]<class T>() {
    const T* src = elems<T>(x);
    T* dst = elems<T>(out);
    for (int64_t i = 0; i < num; ++i) dst[i] = unary_value(op, src[i]);
  });
  return out;
}

HostTensor eval_binary(const Node& n, const HostTensor& in0, const HostTensor& in1) {
  check_same_shape(n, in0);
  check_same_shape(n, in1);
  const BinaryOp op = static_cast<BinaryOp>(n.op);
  HostTensor out = make_tensor(n.dtype, n.shape);
  const int64_t num = count(out);
  HostTensor s0, s1;
  if (is_comparison(op) || op == BinaryOp::LogicalAnd || op == BinaryOp::LogicalOr) {
    // Comparisons compare in the promoted operand type; logical ops test != 0.
    const bool logical = !is_comparison(op);
    const DType t = logical ? DType::Bool : promote(in0.dtype, in1.dtype);
    const HostTensor& a = as_dtype(in0, t, s0);
    const HostTensor& b = as_dtype(in1, t, s1);
    visit_dtype(t, [&]<class T>() {
      visit_dtype(n.dtype, [&]<class R>() {
        const T* pa = elems<T>(a);
        const T* pb = elems<T>(b);
        R* dst = elems<R>(out);
        for (int64_t i = 0; i < num; ++i) {
          bool r;
          if (!logical)
            r = compare_value(op, pa[i], pb[i]);
          else if (op == BinaryOp::LogicalAnd)
            r = convert<bool>(pa[i]) && convert<bool>(pb[i]);
          else
            r = convert<bool>(pa[i]) || convert<bool>(pb[i]);
          dst[i] = convert<R>(r);
        }
      });
    });
    return out;
  }
  const HostTensor& a = as_dtype(in0, n.dtype, s0);
  const HostTensor& b = as_dtype(in1, n.dtype, s1);
  visit_dtype(n.dtype, [&]<class T>() {
    const T* pa = elems<T>(a);
    const T* pb = elems<T>(b);
    T* dst = elems<T>(out);
    for (int64_t i = 0; i < num; ++i) dst[i] = arith_value(op, pa[i], pb[i]);
  });
  return out;
}

HostTensor eval_where(const Node& n, const HostTensor& c, const HostTensor& a,
                      const HostTensor& b) {
  check_same_shape(n, c);
  check_same_shape(n, a);
  check_same_shape(n, b);
  HostTensor sc, sa, sb;
  const bool* pc = elems<bool>(as_dtype(c, DType::Bool, sc));
  const HostTensor& ta = as_dtype(a, n.dtype, sa);
  const HostTensor& tb = as_dtype(b, n.dtype, sb);
  HostTensor out = make_tensor(n.dtype, n.shape);
  visit_dtype(n.dtype, [&]<class T>() {
    const T* pa = elems<T>(ta);
    const T* pb = elems<T>(tb);
    T* dst = elems<T>(out);
    for (int64_t i = 0; i < count(out); ++i) dst[i] = pc[i] ? pa[i] : pb[i];
  });
  return out;
}

HostTensor eval_cast(const Node& n, const HostTensor& in) {
  check_same_shape(n, in);
  return convert_tensor(in, n.dtype);
}

HostTensor eval_broadcast(const Node& n, const HostTensor& in) {
  const size_t nd = n.shape.size();
  if (n.bcast.size() != nd)
    fail(n, std::to_string(n.bcast.size()) + " bcast entries for output " + shape_str(n.shape));
  // Input stride seen by each output axis: 0 for New and Expand axes.
  const Shape in_strides = strides_of(in.shape);
  std::vector<int64_t> strides(nd, 0);
  size_t j = 0;
  for (size_t k = 0; k < nd; ++k) {
    if (n.bcast[k] == BroadcastAxis::New) continue;
    if (j >= in.shape.size()) fail(n, "more non-New axes than input " + shape_str(in.shape));
    if (n.bcast[k] == BroadcastAxis::Keep) {
      if (in.shape[j] != n.shape[k])
        fail(n, "Keep axis " + std::to_string(k) + " of " + shape_str(n.shape) +
                    " does not match input " + shape_str(in.shape));
      strides[k] = in_strides[j];
    } else if (in.shape[j] != 1) {
      fail(n, "Expand axis " + std::to_string(k) + " reads input " + shape_str(in.shape) +
                  " whose axis is not 1");
    }
    ++j;
  }
  if (j != in.shape.size()) fail(n, "fewer non-New axes than input " + shape_str(in.shape));

  HostTensor scratch;
  const HostTensor& x = as_dtype(in, n.dtype, scratch);
  HostTensor out = make_tensor(n.dtype, n.shape);
  visit_dtype(n.dtype, [&]<class T>() {
    const T* src = elems<T>(x);
    T* dst = elems<T>(out);
    std::vector<int64_t> idx(nd, 0);
    for (int64_t i = 0; i < count(out); ++i, next_index(idx, n.shape))
      dst[i] = src[dot(idx, strides)];
  });
  return out;
}

// The extras of a Reindex/ReindexReduce node (its inputs after the first), read by @eK.
class HostExtras : public IxExtras {
 public:
  HostExtras(const Node& n, const std::vector<const HostTensor*>& in) : n_(n) {
    for (size_t k = 1; k < in.size(); ++k) {
      if (!is_index_dtype(in[k]->dtype))
        fail(n, "extras[" + std::to_string(k - 1) + "] is " + dtype_name(in[k]->dtype));
      extras_.push_back(in[k]);
    }
  }
  size_t size() const { return extras_.size(); }
  const Shape& extra_shape(int64_t k) const override { return at(k).shape; }
  int64_t extra_value(int64_t k, const int64_t* idx) const override {
    const HostTensor& t = at(k);
    int64_t off = 0;
    for (size_t a = 0; a < t.shape.size(); ++a) off = off * t.shape[a] + idx[a];
    switch (t.dtype) {
      case DType::Int8:
        return elems<int8_t>(t)[off];
      case DType::UInt8:
        return elems<uint8_t>(t)[off];
      case DType::Int16:
        return elems<int16_t>(t)[off];
      case DType::Int32:
        return elems<int32_t>(t)[off];
      default:
        return elems<int64_t>(t)[off];
    }
  }

 private:
  const HostTensor& at(int64_t k) const {
    if (k < 0 || size_t(k) >= extras_.size())
      fail(n_, "@e" + std::to_string(k) + " with " + std::to_string(extras_.size()) + " extras");
    return *extras_[size_t(k)];
  }
  const Node& n_;
  std::vector<const HostTensor*> extras_;
};

// A Reindex/ReindexReduce node's expressions with their Extent leaves replaced by the extents
// of the indexed array `shape` (the Reindex's input, the ReindexReduce's output).
struct NodeExprs {
  std::vector<IndexExprPtr> indexes, conditions;
  NodeExprs(const Node& n, const Shape& shape) {
    auto extent = [&](int axis) {
      if (axis < 0 || size_t(axis) >= shape.size())
        fail(n, "extent of axis " + std::to_string(axis) + " of " + shape_str(shape));
      return ix_const(shape[size_t(axis)]);
    };
    for (const IndexExprPtr& e : n.indexes) indexes.push_back(ix_replace_extents(e, extent));
    for (const IndexExprPtr& e : n.conditions) conditions.push_back(ix_replace_extents(e, extent));
  }
};

// Every @e read of the node's expressions, at `idx`, is inside its extra.
bool extra_reads_in_range(const NodeExprs& n, const int64_t* idx, const HostExtras& extras) {
  if (extras.size() == 0) return true;
  for (const auto* list : {&n.indexes, &n.conditions})
    for (const IndexExprPtr& e : *list)
      if (!ix_extra_reads_in_range(*e, idx, nullptr, extras)) return false;
  return true;
}

HostTensor eval_reindex(const Node& n, const HostTensor& in, const HostExtras& extras) {
  const size_t nx = in.shape.size(), nd = n.shape.size();
  if (n.indexes.size() != nx)
    fail(n, std::to_string(n.indexes.size()) + " indexes for input " + shape_str(in.shape));
  for (const auto& e : n.indexes) check_expr(n, e, nd, "indexes");
  for (const auto& e : n.conditions) check_expr(n, e, nd, "conditions");

  HostTensor scratch;
  const HostTensor& x = as_dtype(in, n.dtype, scratch);
  const Shape x_strides = strides_of(x.shape);
  const NodeExprs exprs(n, x.shape);
  HostTensor out = make_tensor(n.dtype, n.shape);
  visit_dtype(n.dtype, [&]<class T>() {
    const T overflow = convert<T>(n.scalar);
    const T* src = elems<T>(x);
    T* dst = elems<T>(out);
    std::vector<int64_t> idx(nd, 0);
    for (int64_t i = 0; i < count(out); ++i, next_index(idx, n.shape)) {
      bool inside = extra_reads_in_range(exprs, idx.data(), extras);
      int64_t off = 0;
      for (size_t k = 0; k < nx && inside; ++k) {
        const int64_t v = ix_eval(*exprs.indexes[k], idx.data(), nullptr, &extras);
        inside = v >= 0 && v < x.shape[k];
        if (inside) off += v * x_strides[k];  // a far index would overflow the product
      }
      for (size_t c = 0; c < exprs.conditions.size() && inside; ++c)
        inside = ix_eval(*exprs.conditions[c], idx.data(), nullptr, &extras) == 0;
      dst[i] = inside ? src[off] : overflow;
    }
  });
  return out;
}

HostTensor eval_reindex_reduce(const Node& n, const HostTensor& in, const HostExtras& extras) {
  const size_t ny = in.shape.size(), nd = n.shape.size();
  if (n.indexes.size() != nd)
    fail(n, std::to_string(n.indexes.size()) + " indexes for output " + shape_str(n.shape));
  for (const auto& e : n.indexes) check_expr(n, e, ny, "indexes");
  for (const auto& e : n.conditions) check_expr(n, e, ny, "conditions");
  const ReduceOp op = static_cast<ReduceOp>(n.op);

  HostTensor scratch;
  const HostTensor& y = as_dtype(in, n.dtype, scratch);
  const Shape out_strides = strides_of(n.shape);
  const NodeExprs exprs(n, n.shape);
  HostTensor out = make_tensor(n.dtype, n.shape);
  visit_dtype(n.dtype, [&]<class T>() {
    const T* src = elems<T>(y);
    T* dst = elems<T>(out);
    const T init = reduce_identity<T>(op);
    for (int64_t o = 0; o < count(out); ++o) dst[o] = init;
    // Sequential, in row-major order of y: the order of accumulation into each target.
    std::vector<int64_t> idx(ny, 0);
    for (int64_t i = 0; i < count(y); ++i, next_index(idx, y.shape)) {
      bool inside = extra_reads_in_range(exprs, idx.data(), extras);
      int64_t off = 0;
      for (size_t k = 0; k < nd && inside; ++k) {
        const int64_t t = ix_eval(*exprs.indexes[k], idx.data(), nullptr, &extras);
        inside = t >= 0 && t < n.shape[k];
        if (inside) off += t * out_strides[k];
      }
      for (size_t c = 0; c < exprs.conditions.size() && inside; ++c)
        inside = ix_eval(*exprs.conditions[c], idx.data(), nullptr, &extras) == 0;
      if (inside) dst[off] = reduce_combine(op, dst[off], src[i]);
    }
  });
  return out;
}

HostTensor eval_reduce(const Node& n, const HostTensor& in) {
  const size_t nx = in.shape.size();
  std::vector<bool> reduced(nx, false);
  for (size_t r = 0; r < n.axes.size(); ++r) {
    const int64_t a = n.axes[r];
    if (a < 0 || size_t(a) >= nx || (r > 0 && a <= n.axes[r - 1]))
      fail(n, "axes must be sorted, distinct axes of input " + shape_str(in.shape));
    reduced[size_t(a)] = true;
  }
  // Split the input axes into kept (output) axes and reduced axes, each with input strides.
  const Shape in_strides = strides_of(in.shape);
  Shape kept_shape, kept_strides, red_shape, red_strides, want;
  for (size_t k = 0; k < nx; ++k) {
    if (reduced[k]) {
      red_shape.push_back(in.shape[k]);
      red_strides.push_back(in_strides[k]);
      if (n.keepdims) want.push_back(1);
    } else {
      kept_shape.push_back(in.shape[k]);
      kept_strides.push_back(in_strides[k]);
      want.push_back(in.shape[k]);
    }
  }
  if (want != n.shape)
    fail(n, "output shape " + shape_str(n.shape) + " should be " + shape_str(want) + " for input " +
                shape_str(in.shape));
  const ReduceOp op = static_cast<ReduceOp>(n.op);
  const int64_t red_count = numel_of(red_shape);

  HostTensor scratch;
  const HostTensor& x = as_dtype(in, n.dtype, scratch);
  HostTensor out = make_tensor(n.dtype, n.shape);
  visit_dtype(n.dtype, [&]<class T>() {
    const T* src = elems<T>(x);
    T* dst = elems<T>(out);
    const T init = reduce_identity<T>(op);
    std::vector<int64_t> kidx(kept_shape.size(), 0), ridx(red_shape.size(), 0);
    // float32 sums and products accumulate in double, as the generated kernels do: the result
    // is the rounded value of a sum far more accurate than float32 itself, so the order in
    // which kernels add (vector lanes, threads) does not show in float32. The half types
    // accumulate in float and round once (the precision contract, shared/api.md).
    using Acc = std::conditional_t<std::is_same_v<T, float>, double,
                                   std::conditional_t<kHalf<T>, float, T>>;
    const bool widen =
        kHalf<T> || (std::is_same_v<T, float> && (op == ReduceOp::Add || op == ReduceOp::Mul));
    for (int64_t o = 0; o < count(out); ++o, next_index(kidx, kept_shape)) {
      // One accumulator per output, over the reduced axes in row-major order.
      const int64_t base = dot(kidx, kept_strides);
      std::fill(ridx.begin(), ridx.end(), 0);
      if (widen) {
        Acc acc = reduce_identity<Acc>(op);
        for (int64_t r = 0; r < red_count; ++r, next_index(ridx, red_shape))
          acc = reduce_combine<Acc>(op, acc, convert<Acc>(src[base + dot(ridx, red_strides)]));
        dst[o] = convert<T>(acc);
      } else {
        T acc = init;
        for (int64_t r = 0; r < red_count; ++r, next_index(ridx, red_shape))
          acc = reduce_combine(op, acc, src[base + dot(ridx, red_strides)]);
        dst[o] = acc;
      }
    }
  });
  return out;
}

HostTensor eval_node(const Node& n, const std::vector<const HostTensor*>& in) {
  const bool reads_extras = n.kind == OpKind::Reindex || n.kind == OpKind::ReindexReduce;
  if (reads_extras ? in.size() < 1 : in.size() != expected_inputs(n.kind))
    fail(n, std::to_string(in.size()) + " inputs; expected " +
                std::to_string(expected_inputs(n.kind)));
  switch (n.kind) {
    case OpKind::Leaf:
      return eval_leaf(n);
    case OpKind::Scalar:
      return eval_scalar(n);
    case OpKind::Iota:
      return eval_iota(n);
    case OpKind::Unary:
      return eval_unary(n, *in[0]);
    case OpKind::Binary:
      return eval_binary(n, *in[0], *in[1]);
    case OpKind::Where:
      return eval_where(n, *in[0], *in[1], *in[2]);
    case OpKind::Cast:
      return eval_cast(n, *in[0]);
    case OpKind::BroadcastTo:
      return eval_broadcast(n, *in[0]);
    case OpKind::Reindex:
      return eval_reindex(n, *in[0], HostExtras(n, in));
    case OpKind::ReindexReduce:
      return eval_reindex_reduce(n, *in[0], HostExtras(n, in));
    case OpKind::Reduce:
      return eval_reduce(n, *in[0]);
    case OpKind::Collective:
      // A world of one, where every collective is the identity; the interpreter knows no
      // other ranks (tests/test_distributed.cc checks those against hand-computed values).
      if (n.shape != in[0]->shape) fail(n, "a collective over more than one rank");
      return *in[0];
  }
  fail(n, "unknown op kind " + std::to_string(int(n.kind)));
}

// A Leaf's value is its buffer: whatever inputs it may still list are not read.
const std::vector<NodePtr>& inputs_of(const Node& n) {
  static const std::vector<NodePtr> none;
  return n.kind == OpKind::Leaf ? none : n.inputs;
}

// ---------------------------------------------------------------- the graph

// Evaluates a DAG once per distinct node. Nodes are put in post-order iteratively (graphs
// can be thousands of nodes deep), and an intermediate's tensor is freed as soon as its
// last consumer has run, so long chains of large tensors do not pile up.
class GraphInterpreter {
 public:
  std::vector<HostTensor> run(const std::vector<Var>& vars) {
    for (const Var& v : vars) {
      if (!v.defined()) throw Error("interpret: the Var is undefined (default-constructed)");
      collect(v.node().get());
    }
    std::vector<int64_t> uses(order_.size(), 0);
    for (const Node* n : order_)
      for (const NodePtr& p : inputs_of(*n)) ++uses[slot_.at(p.get())];
    for (const Var& v : vars) ++uses[slot_.at(v.node().get())];  // outputs live to the end

    std::vector<HostTensor> values(order_.size());
    std::vector<const HostTensor*> in;
    for (size_t s = 0; s < order_.size(); ++s) {
      const Node& n = *order_[s];
      in.clear();
      for (const NodePtr& p : inputs_of(n)) in.push_back(&values[slot_.at(p.get())]);
      values[s] = eval_node(n, in);
      for (const NodePtr& p : inputs_of(n)) {
        const size_t i = slot_.at(p.get());
        if (--uses[i] == 0) values[i] = HostTensor();
      }
    }
    std::vector<HostTensor> result;
    result.reserve(vars.size());
    for (const Var& v : vars) result.push_back(values[slot_.at(v.node().get())]);
    return result;
  }

 private:
  static constexpr size_t kInProgress = static_cast<size_t>(-1);

  // Appends `root` and everything it depends on to order_, inputs before consumers.
  void collect(const Node* root) {
    if (slot_.count(root)) return;
    struct Frame {
      const Node* node;
      size_t next;  // next input to visit
    };
    std::vector<Frame> stack{{root, 0}};
    slot_[root] = kInProgress;
    while (!stack.empty()) {
      Frame& f = stack.back();
      const std::vector<NodePtr>& ins = inputs_of(*f.node);
      if (f.next < ins.size()) {
        const Node* child = ins[f.next++].get();
        if (!child) fail(*f.node, "null input");
        auto [it, fresh] = slot_.try_emplace(child, kInProgress);
        if (fresh)
          stack.push_back({child, 0});  // invalidates f; the loop re-reads the back
        else if (it->second == kInProgress)
          fail(*child, "the graph has a cycle");
        continue;
      }
      slot_[f.node] = order_.size();
      order_.push_back(f.node);
      stack.pop_back();
    }
  }

  std::vector<const Node*> order_;
  std::unordered_map<const Node*, size_t> slot_;
};

}  // namespace

void check_host_tensor_dtype(DType have, DType want) {
  if (have != want)
    throw DTypeError(std::string("HostTensor::as: the tensor has dtype ") + dtype_name(have) +
                     " but " + dtype_name(want) + " was requested (use the C++ type of " +
                     dtype_name(have) + ", or as_double())");
}

std::vector<double> HostTensor::as_double() const {
  const int64_t n = int64_t(bytes.size() / dtype_size(dtype));
  std::vector<double> out(static_cast<size_t>(n));
  visit_dtype(dtype, [&]<class T>() {
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        out[size_t(i)] = bytes[size_t(i)] != 0;  // any non-zero byte reads as true
      } else {
        T v;  // memcpy: the bytes need not be aligned or written as T here
        std::memcpy(&v, bytes.data() + size_t(i) * sizeof(T), sizeof(T));
        if constexpr (kHalf<T>)
          out[size_t(i)] = double(float(v));
        else
          out[size_t(i)] = static_cast<double>(v);
      }
    }
  });
  return out;
}

std::vector<HostTensor> interpret(const std::vector<Var>& vars) {
  // realize() on another thread would drop inputs under our feet.
  std::lock_guard<std::recursive_mutex> lock(graph_mutex());
  return GraphInterpreter().run(vars);
}

HostTensor interpret(const Var& v) {
  return interpret(std::vector<Var>{v}).front();
}

}  // namespace metajit
