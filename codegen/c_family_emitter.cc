#include "codegen/c_family_emitter.h"

#include <algorithm>
#include <cstdint>

#include "base/check.h"
#include "codegen/cpp_preludes.h"
#include "codegen/half_strips.h"

namespace metajit {

std::string CFamilyEmitter::ctype(DType t) {
  switch (t) {
    case DType::Bool:
      return "bool";
    case DType::Int32:
      return "int";
    case DType::Int64:
      return "i64";
    case DType::Float32:
      return "float";
    case DType::Float64:
      return "double";
    case DType::Int8:
      return "signed char";
    case DType::UInt8:
      return "unsigned char";
    case DType::Int16:
      return "short";
    case DType::Float16:
    case DType::BFloat16:
      return "float";
  }
  return "?";
}

std::string CFamilyEmitter::storage_ctype(DType t) {
  if (t == DType::Float16) return "mj_f16";
  if (t == DType::BFloat16) return "mj_bf16";
  return ctype(t);
}

namespace {

bool narrow(DType t) {
  return t == DType::Int8 || t == DType::UInt8 || t == DType::Int16 || is_half(t);
}

bool block_uses_narrow(const KBlock& b) {
  for (const KStmt& st : b.stmts)
    if (narrow(st.dtype) || (st.body && block_uses_narrow(*st.body))) return true;
  return false;
}

}  // namespace

bool CFamilyEmitter::uses_narrow_types(const KernelIR& ir) {
  for (const KBuffer& b : ir.inputs)
    if (narrow(b.dtype)) return true;
  for (const auto& e : ir.extra_outputs)
    if (narrow(e.buffer.dtype)) return true;
  return narrow(ir.output.dtype) || block_uses_narrow(ir.body);
}

namespace {

// The open interval of values of a float type (`dbl`: double, else float) that truncate into
// integer type `to`, as literals of that type. Its ends are the nearest values of the float
// type outside the integer range: -2^31 - 1 in double, but the float below -2^31 is -2^31 - 256.
std::pair<std::string, std::string> truncating_interval(DType to, bool dbl) {
  switch (to) {
    case DType::Int8:
      return dbl ? std::pair{"-129.0", "128.0"} : std::pair{"-129.0f", "128.0f"};
    case DType::UInt8:
      return dbl ? std::pair{"-1.0", "256.0"} : std::pair{"-1.0f", "256.0f"};
    case DType::Int16:
      return dbl ? std::pair{"-32769.0", "32768.0"} : std::pair{"-32769.0f", "32768.0f"};
    case DType::Int32:
      return dbl ? std::pair{"-2147483649.0", "2147483648.0"}
                 : std::pair{"-2147483904.0f", "2147483648.0f"};
    default:  // Int64: 2^63 + 2^11 and 2^63 + 2^40 are the neighbours below -2^63
      return dbl ? std::pair{"-9223372036854777856.0", "9223372036854775808.0"}
                 : std::pair{"-9223373136366403584.0f", "9223372036854775808.0f"};
  }
}

}  // namespace

// Casts follow the reference interpreter (tests/support/reference_interpreter.cc): a float to
// an integer truncates, 0 where out of range or NaN (integer_prelude.h's mj_float_to_int); a
// half type is rounded to once, from a double or a 32- or 64-bit integer directly (through the
// double, mj_round_*d), which a float in between would round twice.
std::string CFamilyEmitter::cast_expr(DType to, DType from, const std::string& x) {
  if (to == DType::Bool) return "(" + x + " != 0)";
  if (!is_float(to) && is_float(from)) {
    const auto [lo, hi] = truncating_interval(to, from == DType::Float64);
    return "mj_float_to_int<" + ctype(to) + ">(" + x + ", " + lo + ", " + hi + ")";
  }
  // Bool, Int8 and UInt8 values and a half of the same type are exact in either half type:
  // no rounding (the digits CNN's float16 pooling gradient counts window maxima as float16
  // ones, and rounded each bool in a scalar loop, 408 us a call).
  const bool exact = from == DType::Bool || from == DType::Int8 || from == DType::UInt8 ||
                     from == to;
  if (is_half(to) && exact) return "(float)" + x;
  if (is_half(to)) {
    const std::string r = to == DType::Float16 ? "mj_round_f16" : "mj_round_bf16";
    if (from == DType::Float64 || from == DType::Int32 || from == DType::Int64)
      return r + "d((double)" + x + ")";
    return r + "((float)" + x + ")";
  }
  return "(" + ctype(to) + ")" + x;
}

std::string CFamilyEmitter::integer_prelude(const std::string& qualifier) {
  return "#define MJ_FN " + qualifier + "\n" + kIntegerPrelude;
}

std::string CFamilyEmitter::acc_ctype(ReduceOp op, DType t) {
  const DType at = acc_dtype(op, t);
  if (is_wrapping(at) && op != ReduceOp::Max && op != ReduceOp::Min)
    return at == DType::Int64 ? "u64" : "unsigned";
  return ctype(at);
}

std::string CFamilyEmitter::wrapping(const std::string& T, DType t, const std::string& a,
                                     const char* op, const std::string& b) {
  const std::string U = t == DType::Int64 ? "u64" : "unsigned";
  return "(" + T + ")((" + U + ")" + a + " " + op + " (" + U + ")" + b + ")";
}

DType CFamilyEmitter::acc_dtype(ReduceOp op, DType t) {
  if (is_half(t)) return DType::Float32;  // float32 accumulation, one rounding at the end
  return t == DType::Float32 && (op == ReduceOp::Add || op == ReduceOp::Mul || op == ReduceOp::Mean)
             ? DType::Float64
             : t;
}

void CFamilyEmitter::strides(const std::string& name, const KBuffer& b, int depth) {
  for (size_t k = 0; k + 1 < b.dims.size(); ++k) {
    std::string s;
    for (size_t j = k + 1; j < b.dims.size(); ++j) s += (s.empty() ? "" : " * ") + ix(*b.dims[j]);
    line(depth, "const i64 " + name + "_s" + std::to_string(k) + " = " + s + ";");
  }
}

bool CFamilyEmitter::lane_offset(const std::string& name, const std::vector<IndexExprPtr>& idx,
                                 std::string& wide, std::string& lanes) const {
  wide.clear();
  lanes.clear();
  if (int_lanes_.empty()) return false;
  for (size_t k = 0; k < idx.size(); ++k) {
    const bool lane = std::any_of(int_lanes_.begin(), int_lanes_.end(),
                                  [&](int v) { return ix_reads_var(*idx[k], v); });
    const std::string stride = k + 1 < idx.size() ? name + "_s" + std::to_string(k) : "";
    if (lane) {
      lanes += (lanes.empty() ? "" : " + ") + narrow_ix(*idx[k]) +
               (stride.empty() ? "" : " * (int)" + stride);
    } else {
      const std::string term = ix(*idx[k]);
      wide += (wide.empty() ? "" : " + ") + (stride.empty() ? term : "(" + term + ") * " + stride);
    }
  }
  return !lanes.empty();
}

std::string CFamilyEmitter::offset(const std::string& name,
                                   const std::vector<IndexExprPtr>& idx) const {
  if (idx.empty()) return "0";
  if (std::string wide, lanes; lane_offset(name, idx, wide, lanes))
    return (wide.empty() ? "" : wide + " + ") + "(i64)(" + lanes + ")";
  std::string s;
  for (size_t k = 0; k < idx.size(); ++k) {
    std::string term = ix(*idx[k]);
    if (k + 1 == idx.size() && in_bounds_ &&
        in_bounds_->narrow_indexes.count(ix_to_string(*idx[k])))
      term = "(i64)" + narrow_ix(*idx[k]);  // a gather g++ vectorises: codegen/extra_bounds.h
    if (k + 1 < idx.size()) term = "(" + term + ") * " + name + "_s" + std::to_string(k);
    s += (k ? " + " : "") + term;
  }
  return s;
}

// `e` (constants, loop variables, + - * / %) computed in int: the caller knows every value fits
// (codegen/extra_bounds.h narrow_indexes).
std::string CFamilyEmitter::narrow_ix(const IndexExpr& e) const {
  if (e.kind == IxKind::Const)
    return e.value < 0 ? "(" + std::to_string(e.value) + ")" : std::to_string(e.value);
  if (e.kind == IxKind::Var) return "(int)i" + std::to_string(e.value);
  if (e.kind == IxKind::Neg) return "(-" + narrow_ix(*e.a) + ")";
  const bool arithmetic = e.kind == IxKind::Add || e.kind == IxKind::Sub || e.kind == IxKind::Mul ||
                          e.kind == IxKind::Div || e.kind == IxKind::Mod;
  METAJIT_CHECK(arithmetic, "emit: a narrowed index holds " + ix_to_string(e));
  return "(" + narrow_ix(*e.a) + " " + ix_operator_text(e.kind) + " " + narrow_ix(*e.b) + ")";
}

namespace {

void extra_ranks_in(const IndexExpr* e, const KernelIR& ir, std::set<int>& ranks) {
  if (!e) return;
  if (e->kind == IxKind::Extra) ranks.insert(int(ir.inputs.at(size_t(e->value)).dims.size()));
  for (const IndexExprPtr& a : e->args) extra_ranks_in(a.get(), ir, ranks);
  for (const IndexExpr* c : {e->a.get(), e->b.get(), e->c.get()}) extra_ranks_in(c, ir, ranks);
}

void extra_ranks_in(const KBlock& b, const KernelIR& ir, std::set<int>& ranks) {
  for (const KStmt& st : b.stmts) {
    for (const IndexExprPtr& e : st.index) extra_ranks_in(e.get(), ir, ranks);
    extra_ranks_in(st.cond.get(), ir, ranks);
    if (st.body) extra_ranks_in(*st.body, ir, ranks);
  }
}

bool vars_within(const IndexExpr* e, const std::set<int>& outer) {
  if (!e) return true;
  if (e->kind == IxKind::Var && !outer.count(int(e->value))) return false;
  for (const IndexExprPtr& a : e->args)
    if (!vars_within(a.get(), outer)) return false;
  return vars_within(e->a.get(), outer) && vars_within(e->b.get(), outer) &&
         vars_within(e->c.get(), outer);
}

// The outermost Extra subtrees of `e` that read only `outer` variables, in evaluation order
// (a read's arguments before it).
void invariant_extras(const IndexExpr* e, const std::set<int>& outer,
                      std::vector<const IndexExpr*>& out) {
  if (!e) return;
  if (e->kind == IxKind::Extra && vars_within(e, outer)) {
    out.push_back(e);
    return;
  }
  for (const IndexExprPtr& a : e->args) invariant_extras(a.get(), outer, out);
  for (const IndexExpr* c : {e->a.get(), e->b.get(), e->c.get()}) invariant_extras(c, outer, out);
}

void invariant_extras(const KBlock& b, const std::set<int>& outer,
                      std::vector<const IndexExpr*>& out) {
  for (const KStmt& st : b.stmts) {
    for (const IndexExprPtr& e : st.index) invariant_extras(e.get(), outer, out);
    invariant_extras(st.cond.get(), outer, out);
    if (st.body) invariant_extras(*st.body, outer, out);
  }
}

}  // namespace

void CFamilyEmitter::hoist_extra_reads(const KBlock& b, const std::vector<IndexExprPtr>& more,
                                       const std::set<int>& outer, int depth) {
  std::vector<const IndexExpr*> reads;
  invariant_extras(b, outer, reads);
  for (const IndexExprPtr& e : more) invariant_extras(e.get(), outer, reads);
  for (const IndexExpr* e : reads) {
    const std::string key = ix_to_string(*e);
    if (hoisted_extras_.count(key)) continue;
    const std::string name = "mj_x" + std::to_string(next_hoisted_extra_++);
    line(depth, "const i64 " + name + " = " + ix(*e) + ";");
    hoisted_extras_[key] = name;
  }
}

std::string CFamilyEmitter::extra_readers() const {
  std::set<int> ranks;
  extra_ranks_in(ir_.body, ir_, ranks);
  for (const IndexExprPtr& e : ir_.target) extra_ranks_in(e.get(), ir_, ranks);
  extra_ranks_in(ir_.target_valid.get(), ir_, ranks);
  std::string out;
  if (!ranks.empty()) out += "// Extra reads (data-dependent indexing): 0 outside the array.\n";
  for (int r : ranks) {
    std::string params, test, flat;
    for (int k = 0; k < r; ++k) params += ", i64 d" + std::to_string(k);
    for (int k = 0; k < r; ++k) {
      const std::string a = "a" + std::to_string(k), d = "d" + std::to_string(k);
      params += ", i64 " + a;
      test += (k ? " && " : "") + ("(u64)" + a + " < (u64)" + d);
      flat = k ? "(" + flat + ") * " + d + " + " + a : a;
    }
    out += "template <class T> MJ_FN i64 mj_read" + std::to_string(r) + "(const T* b" + params +
           ") { return " +
           (r == 0 ? std::string("(i64)b[0]") : "(" + test + ") ? (i64)b[" + flat + "] : 0") +
           "; }\n";
  }
  return out;
}

std::string CFamilyEmitter::ix(const IndexExpr& e) const {
  if (in_bounds_ && (e.kind == IxKind::Lt || e.kind == IxKind::Ge) &&
      in_bounds_->true_tests.count(ix_to_string(e)))
    return "true";
  auto bin = [&](const char* op) { return "(" + ix(*e.a) + " " + op + " " + ix(*e.b) + ")"; };
  switch (e.kind) {
    case IxKind::Const:
      // INT64_MIN has no literal: -9223372036854775808LL is unary minus on an overflowing one.
      if (e.value == INT64_MIN) return "(-9223372036854775807LL - 1)";
      return e.value < 0 ? "(" + std::to_string(e.value) + "LL)" : std::to_string(e.value) + "LL";
    case IxKind::Var:
      return "i" + std::to_string(e.value);
    case IxKind::Param:
      return "p" + std::to_string(e.value);
    case IxKind::Extent:  // lowering made it a parameter (codegen/lowering.cc)
      METAJIT_UNREACHABLE("emit: an extent leaf reached the kernel IR");
    case IxKind::Neg:
      return "(-" + ix(*e.a) + ")";
    case IxKind::Not:
      return "(!" + ix(*e.a) + ")";
    case IxKind::Add:
    case IxKind::Sub:
    case IxKind::Mul:
      return bin(ix_operator_text(e.kind));
    case IxKind::Div:
    case IxKind::Mod: {
      bool safe = e.b->kind == IxKind::Const && e.b->value != 0 && e.b->value != -1;
      if (safe) return bin(e.kind == IxKind::Div ? "/" : "%");
      return std::string(e.kind == IxKind::Div ? "mj_div(" : "mj_mod(") + ix(*e.a) + ", " +
             ix(*e.b) + ")";
    }
    case IxKind::Lt:
      return bin("<");
    case IxKind::Le:
      return bin("<=");
    case IxKind::Gt:
      return bin(">");
    case IxKind::Ge:
      return bin(">=");
    case IxKind::Eq:
      return bin("==");
    case IxKind::Ne:
      return bin("!=");
    case IxKind::And:
      return bin("&&");
    case IxKind::Or:
      return bin("||");
    // Functions, not ?: with each operand printed twice: nested min/max would grow the
    // source exponentially.
    case IxKind::Min:
      return "mj_min(" + ix(*e.a) + ", " + ix(*e.b) + ")";
    case IxKind::Max:
      return "mj_max(" + ix(*e.a) + ", " + ix(*e.b) + ")";
    case IxKind::Select:
      return "(" + ix(*e.a) + " ? " + ix(*e.b) + " : " + ix(*e.c) + ")";
    case IxKind::Extra: {
      if (!hoisted_extras_.empty())
        if (auto it = hoisted_extras_.find(ix_to_string(e)); it != hoisted_extras_.end())
          return it->second;
      const KBuffer& b = ir_.inputs.at(size_t(e.value));
      if (in_bounds_ && in_bounds_->unchecked_reads.count(ix_to_string(e))) {
        std::string flat;
        for (size_t k = 0; k < e.args.size(); ++k)
          flat = k ? "(" + flat + ") * " + ix(*b.dims[k]) + " + " + ix(*e.args[k]) : ix(*e.args[k]);
        return "(i64)in" + std::to_string(e.value) + "[" + (flat.empty() ? "0" : flat) + "]";
      }
      std::string s = "mj_read" + std::to_string(b.dims.size()) + "(in" + std::to_string(e.value);
      for (const IndexExprPtr& d : b.dims) s += ", " + ix(*d);
      for (const IndexExprPtr& a : e.args) s += ", " + ix(*a);
      return s + ")";
    }
  }
  return "0";
}

std::string CFamilyEmitter::identity(ReduceOp op, DType t) const {
  const bool f = single(t);
  const bool cuda = dialect_ == Dialect::Cuda;
  switch (op) {
    case ReduceOp::Add:
    case ReduceOp::Mean:
      return t == DType::Bool ? "false" : "0";
    case ReduceOp::Mul:
      return t == DType::Bool ? "true" : "1";
    case ReduceOp::Max:
      switch (t) {
        case DType::Bool:
          return "false";
        case DType::Int32:
          return "(-2147483647 - 1)";
        case DType::Int64:
          return "(-9223372036854775807LL - 1)";
        case DType::Int8:
          return "(-128)";
        case DType::UInt8:
          return "0";
        case DType::Int16:
          return "(-32768)";
        default:
          if (cuda) return f ? "(-MJ_INFF)" : "(-MJ_INF)";
          return f ? "(-__builtin_inff())" : "(-__builtin_inf())";
      }
    case ReduceOp::Min:
      switch (t) {
        case DType::Bool:
          return "true";
        case DType::Int32:
          return "2147483647";
        case DType::Int64:
          return "9223372036854775807LL";
        case DType::Int8:
          return "127";
        case DType::UInt8:
          return "255";
        case DType::Int16:
          return "32767";
        default:
          if (cuda) return f ? "MJ_INFF" : "MJ_INF";
          return f ? "__builtin_inff()" : "__builtin_inf()";
      }
  }
  return "0";
}

std::string CFamilyEmitter::combine(ReduceOp op, DType t, const std::string& acc,
                                    const std::string& x) const {
  const std::string T = ctype(t);
  switch (op) {
    case ReduceOp::Add:
    case ReduceOp::Mean:
      if (is_wrapping(t)) return wrapping(T, t, acc, "+", x);
      return "(" + T + ")(" + acc + " + " + x + ")";
    case ReduceOp::Mul:
      if (is_wrapping(t)) return wrapping(T, t, acc, "*", x);
      return "(" + T + ")(" + acc + " * " + x + ")";
    case ReduceOp::Max:
      if (t == DType::Bool) return "(" + acc + " || " + x + ")";
      if (is_float(t)) return float_extremum(true, t, x, acc);
      return "(" + x + " > " + acc + " ? " + x + " : " + acc + ")";
    case ReduceOp::Min:
      if (t == DType::Bool) return "(" + acc + " && " + x + ")";
      if (is_float(t)) return float_extremum(false, t, x, acc);
      return "(" + x + " < " + acc + " ? " + x + " : " + acc + ")";
  }
  return acc;
}

// Float max (or min) of a and b that propagates NaN (a's first): in C++ the prelude's
// branch-free mj_max_nan(f) (codegen/cpp_kernel_prelude.h), in CUDA the plain expression.
std::string CFamilyEmitter::float_extremum(bool max, DType t, const std::string& a,
                                           const std::string& b) const {
  if (dialect_ == Dialect::Cpp)
    return std::string(max ? "mj_max_nan" : "mj_min_nan") + (single(t) ? "f" : "") + "(" + a +
           ", " + b + ")";
  const char* cmp = max ? " > " : " < ";
  return "((" + a + cmp + b + " || " + a + " != " + a + ") ? " + a + " : " + b + ")";
}

std::string CFamilyEmitter::unary(UnaryOp op, DType t, const std::string& x) const {
  const bool f32 = single(t);
  const std::string T = ctype(t);
  auto fn = [&](const char* name) { return std::string(name) + (f32 ? "f" : "") + "(" + x + ")"; };
  // CUDA's device math library has these under their libm names.
  auto builtin = [&](const char* name) {
    return std::string(dialect_ == Dialect::Cuda ? "" : "__builtin_") + name + (f32 ? "f" : "") +
           "(" + x + ")";
  };
  if (is_float(t)) {
    switch (op) {
      case UnaryOp::Neg:
        return "(-" + x + ")";
      case UnaryOp::Abs:
        return builtin("fabs");
      case UnaryOp::Exp:
        // The C++ prelude's exp (codegen/cpp_kernel_prelude.h: float32 inline, float64 libmvec
        // guarded); CUDA's expf has no slow lanes.
        return dialect_ == Dialect::Cuda ? fn("exp") : fn("mj_exp");
      case UnaryOp::Log:
        return fn("log");
      case UnaryOp::Sqrt:
        return builtin("sqrt");
      case UnaryOp::Sin:
        return fn("sin");
      case UnaryOp::Cos:
        return fn("cos");
      case UnaryOp::Tanh:
        return fn("tanh");
      case UnaryOp::Floor:
        return builtin("floor");
      case UnaryOp::Sigmoid:
        // Through the prelude's exp as Exp is: no slow lanes for large x.
        return "((" + T + ")1 / ((" + T + ")1 + " + (dialect_ == Dialect::Cuda ? "exp" : "mj_exp") +
               (f32 ? "f" : "") + "(-" + x + ")))";
      case UnaryOp::Relu:
        if (dialect_ == Dialect::Cpp) return fn("mj_relu");  // branch-free: cpp_kernel_prelude.h
        return "(" + x + " > 0 ? " + x + " : (" + T + ")0)";
      case UnaryOp::LogicalNot:
        return "(!" + x + ")";
      case UnaryOp::Erf:
        return fn("erf");
      case UnaryOp::Log1p:
        return dialect_ == Dialect::Cuda ? fn("log1p") : fn("mj_log1p");  // cpp_kernel_prelude.h
      case UnaryOp::Expm1:
        return fn("expm1");
      case UnaryOp::Tan:
        return fn("tan");
      case UnaryOp::Atan:
        return dialect_ == Dialect::Cuda ? fn("atan") : fn("mj_atan");  // cpp_kernel_prelude.h
      case UnaryOp::Asin:
        return dialect_ == Dialect::Cuda ? fn("asin") : fn("mj_asin");  // cpp_kernel_prelude.h
      case UnaryOp::Acos:
        return dialect_ == Dialect::Cuda ? fn("acos") : fn("mj_acos");  // cpp_kernel_prelude.h
      case UnaryOp::BitwiseNot:
        break;  // integers only (meta_ops/ops.cc): the switch below throws
    }
  }
  switch (op) {
    case UnaryOp::Neg:
      if (is_wrapping(t)) return wrapping(T, t, "0", "-", x);
      return "(" + T + ")(-" + x + ")";
    case UnaryOp::Abs:
      if (is_wrapping(t))
        return "(" + x + " < 0 ? " + wrapping(T, t, "0", "-", x) + " : " + x + ")";
      return "(" + T + ")(" + x + " < 0 ? -" + x + " : " + x + ")";
    case UnaryOp::Relu:
      return "(" + x + " > 0 ? " + x + " : (" + T + ")0)";
    case UnaryOp::LogicalNot:
      return "(!" + x + ")";
    case UnaryOp::Floor:
      return x;
    case UnaryOp::BitwiseNot:
      if (t == DType::Bool) return "(!" + x + ")";
      return "(" + T + ")(~" + x + ")";
    default:
      METAJIT_UNREACHABLE(std::string("emit: unary ") + unary_op_name(op) + " on " + dtype_name(t));
  }
}

std::string CFamilyEmitter::binary(BinaryOp op, DType operand, const std::string& a,
                                   const std::string& b) const {
  const std::string T = ctype(operand);
  const bool flt = is_float(operand);
  switch (op) {
    case BinaryOp::Add:
      if (is_wrapping(operand)) return wrapping(T, operand, a, "+", b);
      return "(" + T + ")(" + a + " + " + b + ")";
    case BinaryOp::Sub:
      if (is_wrapping(operand)) return wrapping(T, operand, a, "-", b);
      return "(" + T + ")(" + a + " - " + b + ")";
    case BinaryOp::Mul:
      if (is_wrapping(operand)) return wrapping(T, operand, a, "*", b);
      return "(" + T + ")(" + a + " * " + b + ")";
    case BinaryOp::Div:
      if (flt) return "(" + a + " / " + b + ")";
      return "(" + T + ")mj_div(" + a + ", " + b + ")";
    case BinaryOp::Pow:
      if (single(operand)) return "powf(" + a + ", " + b + ")";
      if (operand == DType::Float64) return "pow(" + a + ", " + b + ")";
      if (operand == DType::Int8 || operand == DType::UInt8 || operand == DType::Int16)
        return cast_expr(operand, DType::Float64,
                         "__builtin_pow((double)" + a + ", (double)" + b + ")");
      return std::string(operand == DType::Int64 ? "mj_pow_i64" : "(" + T + ")mj_pow_i32") +
             "((double)" + a + ", (double)" + b + ")";
    case BinaryOp::Maximum:
      if (operand == DType::Bool) return "(" + a + " || " + b + ")";
      if (flt) return float_extremum(true, operand, a, b);
      return "(" + a + " > " + b + " ? " + a + " : " + b + ")";
    case BinaryOp::Minimum:
      if (operand == DType::Bool) return "(" + a + " && " + b + ")";
      if (flt) return float_extremum(false, operand, a, b);
      return "(" + a + " < " + b + " ? " + a + " : " + b + ")";
    case BinaryOp::Eq:
      return "(" + a + " == " + b + ")";
    case BinaryOp::Ne:
      return "(" + a + " != " + b + ")";
    case BinaryOp::Lt:
      return "(" + a + " < " + b + ")";
    case BinaryOp::Le:
      return "(" + a + " <= " + b + ")";
    case BinaryOp::Gt:
      return "(" + a + " > " + b + ")";
    case BinaryOp::Ge:
      return "(" + a + " >= " + b + ")";
    case BinaryOp::LogicalAnd:
      return "(" + a + " && " + b + ")";
    case BinaryOp::LogicalOr:
      return "(" + a + " || " + b + ")";
    case BinaryOp::BitwiseAnd:
      return "(" + T + ")(" + a + " & " + b + ")";
    case BinaryOp::BitwiseOr:
      return "(" + T + ")(" + a + " | " + b + ")";
    case BinaryOp::BitwiseXor:
      return "(" + T + ")(" + a + " ^ " + b + ")";
    case BinaryOp::ShiftLeft:
    case BinaryOp::ShiftRight:
      return shift(op == BinaryOp::ShiftLeft, operand, a, b);
  }
  return "0";
}

// Shifts without undefined behaviour: the amount is tested as unsigned against the width (a
// negative amount is huge), the left shift is done on u64 and wraps to T, and a shift by the
// width or more gives 0, or the sign for a right shift (numpy's rule; meta_ops/node.h).
std::string CFamilyEmitter::shift(bool left, DType t, const std::string& a, const std::string& b) {
  const std::string T = ctype(t);
  const std::string bits = t == DType::Int64 ? "64" : "32";
  const std::string in_range = "(u64)" + b + " < " + bits + "ULL";
  if (left) return "(" + in_range + " ? (" + T + ")((u64)" + a + " << " + b + ") : (" + T + ")0)";
  return "(" + in_range + " ? (" + T + ")(" + a + " >> " + b + ") : (" + T + ")(" + a +
         " < 0 ? -1 : 0))";
}

std::string CFamilyEmitter::scalar_arg(DType t, int slot) const {
  if (scalar_locals_.count({slot, t})) return scalar_local(slot, t);
  const std::string s = "S[" + std::to_string(slot) + "]";
  if (is_half(t)) return cast_expr(t, DType::Float64, s);  // a half scalar holds a half value
  return t == DType::Bool ? "(" + s + " != 0)" : "(" + ctype(t) + ")" + s;
}

std::string CFamilyEmitter::scalar_local(int slot, DType t) {
  return "mj_s" + std::to_string(slot) + "_" + std::to_string(int(t));
}

void CFamilyEmitter::block(const KBlock& b, int depth) {
  for (const KStmt& st : b.stmts) stmt(st, depth);
}

// A load's value. A half element gathered across SIMD lanes (a flat strip's, int_lanes_, or
// the innermost SIMD loop's, simd_var_, where the read is not contiguous along it) is read as
// the low half of the 32-bit word at its address (codegen/cpp_narrow_prelude.h mj_half_word),
// which g++ gathers with vpgatherdd; a 16-bit element it loaded one lane at a time, or left the
// loop scalar (the digits CNN's float16 2x2 pooling: 240 us a call against 25 in float32, its
// gradient's i / 2 reads 240 against 96; AVX-512).
std::string CFamilyEmitter::load_expr(const KStmt& st) const {
  const std::string name = "in" + std::to_string(st.buffer);
  if (dialect_ != Dialect::Cpp || !is_half(st.dtype))
    return name + "[" + offset(name, st.index) + "]";
  if (scalar_halves_ && st.dtype == DType::Float16)
    return "mj_f16_one(" + name + "[" + offset(name, st.index) + "])";
  const std::string widen = st.dtype == DType::Float16 ? "mj_f16_to_float(mj_half_word("
                                                       : "mj_bf16_to_float(mj_half_word(";
  if (std::string wide, lanes; lane_offset(name, st.index, wide, lanes))
    return widen + name + (wide.empty() ? "" : " + (" + wide + ")") + ", (i64)(" + lanes + ")))";
  bool across = false;
  for (const IndexExprPtr& e : st.index)
    across = across || (simd_var_ >= 0 && ix_reads_var(*e, simd_var_));
  if (across && !contiguous_along(st, simd_var_))
    return widen + name + ", " + offset(name, st.index) + "))";
  return name + "[" + offset(name, st.index) + "]";
}

void CFamilyEmitter::stmt(const KStmt& st, int depth) {
  const std::string T = ctype(st.dtype);
  dtypes_[st.id] = st.dtype;
  std::string expr;
  switch (st.kind) {
    case KOp::Load:
      expr = load_expr(st);
      break;
    case KOp::Scalar:
      expr = scalar_arg(st.dtype, st.slot);
      break;
    case KOp::Iota:
      expr = is_half(st.dtype) ? cast_expr(st.dtype, DType::Int64, ix(*st.index[0]))
                               : "(" + T + ")" + ix(*st.index[0]);
      break;
    case KOp::Unary:
      expr = unary(UnaryOp(st.op), st.dtype, v(st.args[0]));
      break;
    case KOp::Binary:
      expr = binary(BinaryOp(st.op), dtypes_.at(st.args[0]), v(st.args[0]), v(st.args[1]));
      break;
    case KOp::Where:
      // Floats in C++ through the prelude's branch-free select (codegen/cpp_kernel_prelude.h).
      if (dialect_ == Dialect::Cpp && is_float(st.dtype))
        expr = std::string(single(st.dtype) ? "mj_selectf(" : "mj_select(") + v(st.args[0]) + ", " +
               v(st.args[1]) + ", " + v(st.args[2]) + ")";
      else
        expr = "(" + v(st.args[0]) + " ? " + v(st.args[1]) + " : " + v(st.args[2]) + ")";
      break;
    case KOp::Cast:
      expr = cast_expr(st.dtype, dtypes_.at(st.args[0]), v(st.args[0]));
      break;
    case KOp::Guard: {
      line(depth, T + " " + v(st.id) + ";");
      line(depth, "if (" + ix(*st.cond) + ") {");
      block(*st.body, depth + 1);
      line(depth + 1, v(st.id) + " = " + v(st.body->result) + ";");
      line(depth, "} else {");
      line(depth + 1, v(st.id) + " = " + scalar_arg(st.dtype, st.slot) + ";");
      line(depth, "}");
      return;
    }
    case KOp::Reduce: {
      // A reduction's own loops may be SIMD ones: its reads keep the lanes' conversions.
      const bool scalar = scalar_halves_;
      scalar_halves_ = false;
      reduce_stmt(st, depth);
      scalar_halves_ = scalar;
      return;
    }
  }
  line(depth, "const " + T + " " + v(st.id) + " = " + expr + ";");
}

void CFamilyEmitter::reduce_stmt(const KStmt& st, int depth) {
  sequential_reduce(st, depth, "", "");
}

void CFamilyEmitter::sequential_reduce(const KStmt& st, int depth,
                                       const std::string& innermost_pragma,
                                       const std::string& outermost_pragma) {
  dtypes_[st.id] = st.dtype;
  const ReduceOp op = ReduceOp(st.op);
  const DType at = acc_dtype(op, st.dtype);
  const std::string T = ctype(st.dtype), A = acc_ctype(op, st.dtype);
  std::string acc = "acc" + std::to_string(st.id);
  line(depth, A + " " + acc + " = " + identity(op, at) + ";");
  int d = depth;
  const size_t n = st.loops.size();
  for (size_t k = 0; k + 1 < n; ++k) {
    if (k == 0 && !outermost_pragma.empty()) line(d, outermost_pragma);
    std::string i = "i" + std::to_string(st.loops[k].var);
    line(d, "for (i64 " + i + " = 0; " + i + " < " + ix(*st.loops[k].extent) + "; ++" + i + ") {");
    ++d;
  }
  const std::string extent = ix(*st.loops[n - 1].extent);
  if (n == 1 && !outermost_pragma.empty()) {
    reduce_loop(st, st.body->stmts, "0", extent, outermost_pragma, d);
  } else if (innermost_pragma.empty()) {
    reduce_loop(st, st.body->stmts, "0", extent, "", d);
  } else if (!outermost_pragma.empty() || !custom_innermost_reduce(st, innermost_pragma, d)) {
    // A SIMD reduction sets up and combines a vector of partial results around the loop: over
    // a pooling or convolution window (2, 3, 9 elements) that costs up to 8x a plain loop, so
    // short extents (known only at run time: kernels are shape-generic) take the plain loop.
    line(d, "if (" + extent + " >= " + std::to_string(kMinSimdReduceExtent) + ") {");
    reduce_loop(st, st.body->stmts, "0", extent, innermost_pragma, d + 1);
    line(d, "} else {");
    reduce_loop(st, st.body->stmts, "0", extent, "", d + 1);
    line(d, "}");
  }
  for (size_t k = 0; k + 1 < n; ++k) line(--d, "}");
  line(depth, "const " + T + " " + v(st.id) + " = (" + T + ")" + acc + ";");
}

void CFamilyEmitter::reduce_loop(const KStmt& st, const std::vector<KStmt>& stmts,
                                 const std::string& from, const std::string& to,
                                 const std::string& pragma, int depth) {
  const ReduceOp op = ReduceOp(st.op);
  const std::string i = "i" + std::to_string(st.loops.back().var);
  const std::string acc = "acc" + std::to_string(st.id);
  if (!pragma.empty()) line(depth, pragma);
  line(depth, "for (i64 " + i + " = " + from + "; " + i + " < " + to + "; ++" + i + ") {");
  for (const KStmt& s : stmts) stmt(s, depth + 1);
  reduce_body_extra(st, depth + 1);
  line(depth + 1,
       acc + " = " + combine(op, acc_dtype(op, st.dtype), acc, v(st.body->result)) + ";");
  line(depth, "}");
}

}  // namespace metajit
