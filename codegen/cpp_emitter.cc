#include "codegen/cpp_emitter.h"

#include <cstdint>
#include <map>
#include <stdexcept>

namespace metajit {
namespace {

constexpr const char* kPrelude = R"(typedef long long i64;
typedef unsigned long long u64;
// Integer division never traps: x/0 == x%0 == 0, and INT_MIN/-1 wraps.
static inline i64 mj_div(i64 a, i64 b) { return b == 0 ? 0 : (b == -1 ? (i64)(0ULL - (u64)a) : a / b); }
static inline i64 mj_mod(i64 a, i64 b) { return (b == 0 || b == -1) ? 0 : a % b; }
static inline i64 mj_min(i64 a, i64 b) { return a < b ? a : b; }
static inline i64 mj_max(i64 a, i64 b) { return a > b ? a : b; }
// Integer pow through double; NaN or out-of-range results give 0.
static inline int mj_pow_i32(double a, double b) { double r = __builtin_pow(a, b); return (r == r && r >= -2147483648.0 && r <= 2147483647.0) ? (int)r : 0; }
static inline i64 mj_pow_i64(double a, double b) { double r = __builtin_pow(a, b); return (r == r && r >= -9223372036854775808.0 && r < 9223372036854775808.0) ? (i64)r : 0; }
)";

class CppEmitter {
 public:
  explicit CppEmitter(const KernelIR& ir) : ir_(ir) {}

  std::string run() {
    out_ = "// metajit generated kernel: ";
    for (size_t k = 0; k < ir_.ops.size(); ++k) out_ += (k ? ", " : "") + ir_.ops[k];
    out_ += "\n";
    out_ += kPrelude;
    out_ +=
        "\nextern \"C\" void metajit_kernel(void* const* B, const long long* P, const double* S) "
        "{\n";
    for (int k = 0; k < ir_.num_params; ++k)
      line(1, "const i64 p" + std::to_string(k) + " = P[" + std::to_string(k) + "];");
    if (ir_.num_params == 0) line(1, "(void)P;");
    if (ir_.num_scalars == 0) line(1, "(void)S;");
    for (size_t k = 0; k < ir_.inputs.size(); ++k) {
      std::string name = "in" + std::to_string(k);
      std::string t = ctype(ir_.inputs[k].dtype);
      line(1, "const " + t + "* __restrict__ " + name + " = (const " + t + "*)B[" +
                  std::to_string(k) + "];");
      strides(name, ir_.inputs[k]);
    }
    std::string ot = ctype(ir_.output.dtype);
    line(1, ot + "* __restrict__ out = (" + ot + "*)B[" + std::to_string(ir_.inputs.size()) + "];");
    strides("out", ir_.output);
    if (ir_.kind == KernelKind::Map)
      map_kernel();
    else
      scatter_kernel();
    out_ += "}\n";
    return out_;
  }

 private:
  static std::string ctype(DType t) {
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
    }
    return "?";
  }

  void line(int depth, const std::string& s) { out_ += std::string(2 * depth, ' ') + s + "\n"; }

  // Row-major strides of a buffer: name_s<k> = product of dims after k; the last is 1.
  void strides(const std::string& name, const KBuffer& b) {
    for (size_t k = 0; k + 1 < b.dims.size(); ++k) {
      std::string s;
      for (size_t j = k + 1; j < b.dims.size(); ++j) s += (s.empty() ? "" : " * ") + ix(*b.dims[j]);
      line(1, "const i64 " + name + "_s" + std::to_string(k) + " = " + s + ";");
    }
  }

  std::string offset(const std::string& name, const std::vector<IndexExprPtr>& idx) {
    if (idx.empty()) return "0";
    std::string s;
    for (size_t k = 0; k < idx.size(); ++k) {
      std::string term = ix(*idx[k]);
      if (k + 1 < idx.size()) term = "(" + term + ") * " + name + "_s" + std::to_string(k);
      s += (k ? " + " : "") + term;
    }
    return s;
  }

  static std::string ix(const IndexExpr& e) {
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
      case IxKind::Neg:
        return "(-" + ix(*e.a) + ")";
      case IxKind::Not:
        return "(!" + ix(*e.a) + ")";
      case IxKind::Add:
        return bin("+");
      case IxKind::Sub:
        return bin("-");
      case IxKind::Mul:
        return bin("*");
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
    }
    return "0";
  }

  static std::string v(int id) { return "v" + std::to_string(id); }

  static std::string identity(ReduceOp op, DType t) {
    const bool f = t == DType::Float32;
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
          default:
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
          default:
            return f ? "__builtin_inff()" : "__builtin_inf()";
        }
    }
    return "0";
  }

  // acc <- op(acc, x), NaN-propagating for float max/min like numpy.
  static std::string combine(ReduceOp op, DType t, const std::string& acc, const std::string& x) {
    const std::string T = ctype(t);
    switch (op) {
      case ReduceOp::Add:
      case ReduceOp::Mean:
        return "(" + T + ")(" + acc + " + " + x + ")";
      case ReduceOp::Mul:
        return "(" + T + ")(" + acc + " * " + x + ")";
      case ReduceOp::Max:
        if (t == DType::Bool) return "(" + acc + " || " + x + ")";
        if (is_float(t))
          return "((" + x + " > " + acc + " || " + x + " != " + x + ") ? " + x + " : " + acc + ")";
        return "(" + x + " > " + acc + " ? " + x + " : " + acc + ")";
      case ReduceOp::Min:
        if (t == DType::Bool) return "(" + acc + " && " + x + ")";
        if (is_float(t))
          return "((" + x + " < " + acc + " || " + x + " != " + x + ") ? " + x + " : " + acc + ")";
        return "(" + x + " < " + acc + " ? " + x + " : " + acc + ")";
    }
    return acc;
  }

  std::string unary(UnaryOp op, DType t, const std::string& x) {
    const bool f32 = t == DType::Float32;
    const std::string T = ctype(t);
    auto fn = [&](const char* name) {
      return std::string("__builtin_") + name + (f32 ? "f" : "") + "(" + x + ")";
    };
    if (is_float(t)) {
      switch (op) {
        case UnaryOp::Neg:
          return "(-" + x + ")";
        case UnaryOp::Abs:
          return fn("fabs");
        case UnaryOp::Exp:
          return fn("exp");
        case UnaryOp::Log:
          return fn("log");
        case UnaryOp::Sqrt:
          return fn("sqrt");
        case UnaryOp::Sin:
          return fn("sin");
        case UnaryOp::Cos:
          return fn("cos");
        case UnaryOp::Tanh:
          return fn("tanh");
        case UnaryOp::Floor:
          return fn("floor");
        case UnaryOp::Sigmoid:
          return "((" + T + ")1 / ((" + T + ")1 + __builtin_exp" + (f32 ? "f" : "") + "(-" + x +
                 ")))";
        case UnaryOp::Relu:
          return "(" + x + " > 0 ? " + x + " : (" + T + ")0)";
        case UnaryOp::LogicalNot:
          return "(!" + x + ")";
      }
    }
    switch (op) {
      case UnaryOp::Neg:
        return "(" + T + ")(-" + x + ")";
      case UnaryOp::Abs:
        return "(" + T + ")(" + x + " < 0 ? -" + x + " : " + x + ")";
      case UnaryOp::Relu:
        return "(" + x + " > 0 ? " + x + " : (" + T + ")0)";
      case UnaryOp::LogicalNot:
        return "(!" + x + ")";
      case UnaryOp::Floor:
        return x;
      default:
        throw std::logic_error(std::string("emit: unary ") + unary_op_name(op) + " on " +
                               dtype_name(t));
    }
  }

  std::string binary(BinaryOp op, DType operand, const std::string& a, const std::string& b) {
    const std::string T = ctype(operand);
    const bool flt = is_float(operand);
    switch (op) {
      case BinaryOp::Add:
        return "(" + T + ")(" + a + " + " + b + ")";
      case BinaryOp::Sub:
        return "(" + T + ")(" + a + " - " + b + ")";
      case BinaryOp::Mul:
        return "(" + T + ")(" + a + " * " + b + ")";
      case BinaryOp::Div:
        if (flt) return "(" + a + " / " + b + ")";
        return "(" + T + ")mj_div(" + a + ", " + b + ")";
      case BinaryOp::Pow:
        if (operand == DType::Float32) return "__builtin_powf(" + a + ", " + b + ")";
        if (operand == DType::Float64) return "__builtin_pow(" + a + ", " + b + ")";
        return std::string(operand == DType::Int64 ? "mj_pow_i64" : "(" + T + ")mj_pow_i32") +
               "((double)" + a + ", (double)" + b + ")";
      case BinaryOp::Maximum:
        if (operand == DType::Bool) return "(" + a + " || " + b + ")";
        if (flt)
          return "((" + a + " > " + b + " || " + a + " != " + a + ") ? " + a + " : " + b + ")";
        return "(" + a + " > " + b + " ? " + a + " : " + b + ")";
      case BinaryOp::Minimum:
        if (operand == DType::Bool) return "(" + a + " && " + b + ")";
        if (flt)
          return "((" + a + " < " + b + " || " + a + " != " + a + ") ? " + a + " : " + b + ")";
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
    }
    return "0";
  }

  void block(const KBlock& b, int depth) {
    for (const KStmt& st : b.stmts) stmt(st, depth);
  }

  void stmt(const KStmt& st, int depth) {
    const std::string T = ctype(st.dtype);
    dtypes_[st.id] = st.dtype;
    std::string expr;
    switch (st.kind) {
      case KOp::Load:
        expr = "in" + std::to_string(st.buffer) + "[" +
               offset("in" + std::to_string(st.buffer), st.index) + "]";
        break;
      case KOp::Scalar:
        expr = st.dtype == DType::Bool ? "(S[" + std::to_string(st.slot) + "] != 0)"
                                       : "(" + T + ")S[" + std::to_string(st.slot) + "]";
        break;
      case KOp::Iota:
        expr = "(" + T + ")" + ix(*st.index[0]);
        break;
      case KOp::Unary:
        expr = unary(UnaryOp(st.op), st.dtype, v(st.args[0]));
        break;
      case KOp::Binary:
        expr = binary(BinaryOp(st.op), dtypes_.at(st.args[0]), v(st.args[0]), v(st.args[1]));
        break;
      case KOp::Where:
        expr = "(" + v(st.args[0]) + " ? " + v(st.args[1]) + " : " + v(st.args[2]) + ")";
        break;
      case KOp::Cast:
        expr = st.dtype == DType::Bool ? "(" + v(st.args[0]) + " != 0)"
                                       : "(" + T + ")" + v(st.args[0]);
        break;
      case KOp::Guard: {
        line(depth, T + " " + v(st.id) + ";");
        line(depth, "if (" + ix(*st.cond) + ") {");
        block(*st.body, depth + 1);
        line(depth + 1, v(st.id) + " = " + v(st.body->result) + ";");
        line(depth, "} else {");
        line(depth + 1,
             v(st.id) + " = " +
                 (st.dtype == DType::Bool ? "(S[" + std::to_string(st.slot) + "] != 0)"
                                          : "(" + T + ")S[" + std::to_string(st.slot) + "]") +
                 ";");
        line(depth, "}");
        return;
      }
      case KOp::Reduce: {
        std::string acc = "acc" + std::to_string(st.id);
        line(depth, T + " " + acc + " = " + identity(ReduceOp(st.op), st.dtype) + ";");
        int d = depth;
        for (const KLoop& l : st.loops) {
          line(d, "for (i64 i" + std::to_string(l.var) + " = 0; i" + std::to_string(l.var) + " < " +
                      ix(*l.extent) + "; ++i" + std::to_string(l.var) + ") {");
          ++d;
        }
        block(*st.body, d);
        line(d, acc + " = " + combine(ReduceOp(st.op), st.dtype, acc, v(st.body->result)) + ";");
        for (size_t k = 0; k < st.loops.size(); ++k) line(--d, "}");
        line(depth, "const " + T + " " + v(st.id) + " = " + acc + ";");
        return;
      }
    }
    line(depth, "const " + T + " " + v(st.id) + " = " + expr + ";");
  }

  // Product of loop extents, as an expression; used to keep tiny kernels single-threaded.
  std::string work(const std::vector<KLoop>& loops) {
    std::string s = "1LL";
    for (const KLoop& l : loops) s += " * " + ix(*l.extent);
    return s;
  }

  void open_loops(const std::vector<KLoop>& loops, int depth, bool parallel) {
    if (parallel && !loops.empty()) {
      std::string w = work(loops);
      if (!ir_.body.stmts.empty() && ir_.body.stmts.back().kind == KOp::Reduce)
        for (const KLoop& l : ir_.body.stmts.back().loops) w += " * " + ix(*l.extent);
      size_t collapse = loops.size() > 1 ? loops.size() - 1 : 1;
      line(depth,
           "#pragma omp parallel for" +
               (collapse > 1 ? " collapse(" + std::to_string(collapse) + ")" : std::string()) +
               " schedule(static) if(" + w + " > 32768)");
    }
    for (size_t k = 0; k < loops.size(); ++k) {
      const KLoop& l = loops[k];
      std::string i = "i" + std::to_string(l.var);
      line(depth + int(k),
           "for (i64 " + i + " = 0; " + i + " < " + ix(*l.extent) + "; ++" + i + ") {");
    }
  }
  void close_loops(size_t n, int depth) {
    for (size_t k = n; k-- > 0;) line(depth + int(k), "}");
  }

  void map_kernel() {
    open_loops(ir_.loops, 1, true);
    int d = 1 + int(ir_.loops.size());
    block(ir_.body, d);
    std::vector<IndexExprPtr> idx;
    for (const KLoop& l : ir_.loops) idx.push_back(ix_var(l.var));
    line(d, "out[" + offset("out", idx) + "] = " + v(ir_.body.result) + ";");
    close_loops(ir_.loops.size(), 1);
  }

  void scatter_kernel() {
    ReduceOp op = ReduceOp(ir_.scatter_op);
    std::string n = "1LL";
    for (const auto& d : ir_.output.dims) n += " * " + ix(*d);
    line(1, "const i64 out_n = " + n + ";");
    line(1, "#pragma omp parallel for schedule(static) if(out_n > 32768)");
    line(1, "for (i64 j = 0; j < out_n; ++j) out[j] = " + identity(op, ir_.output.dtype) + ";");
    // Targets may collide, so the accumulation runs in order on one thread.
    open_loops(ir_.loops, 1, false);
    int d = 1 + int(ir_.loops.size());
    block(ir_.body, d);
    line(d, "if (" + ix(*ir_.target_valid) + ") {");
    line(d + 1, ctype(ir_.output.dtype) + "& t = out[" + offset("out", ir_.target) + "];");
    line(d + 1, "t = " + combine(op, ir_.output.dtype, "t", v(ir_.body.result)) + ";");
    line(d, "}");
    close_loops(ir_.loops.size(), 1);
  }

  const KernelIR& ir_;
  std::string out_;
  std::map<int, DType> dtypes_;
};

}  // namespace

std::string emit_cpp(const KernelIR& ir) {
  return CppEmitter(ir).run();
}

}  // namespace metajit
