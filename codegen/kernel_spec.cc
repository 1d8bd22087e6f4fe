#include "codegen/kernel_spec.h"

#include <metajit/error.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/dtype.h"
#include "codegen/verify_kernel_ir.h"

namespace metajit {
namespace {

using nlohmann::json;

// Limits for hostile files. Depths bound the reader's recursion (and that of everything that
// later walks the tree); the planner's deepest expressions are far below them.
constexpr int kMaxExprDepth = 256;
constexpr int kMaxBlockDepth = 64;
constexpr int64_t kMaxSlots = 4096;  // num_params, num_scalars, num_vars
constexpr size_t kMaxRank = 64;      // the emitter's stride text grows with rank squared
constexpr size_t kMaxOpText = 1024;

constexpr const char* kKindNames[] = {"load",  "scalar", "iota",  "unary", "binary",
                                      "where", "cast",   "guard", "reduce"};
constexpr int kNumUnary = int(UnaryOp::BitwiseNot) + 1;
constexpr int kNumBinary = int(BinaryOp::ShiftRight) + 1;
constexpr int kNumReduce = int(ReduceOp::Mean) + 1;
constexpr DType kDTypes[] = {DType::Bool,    DType::Int32,   DType::Int64, DType::Float32,
                             DType::Float64, DType::Int8,    DType::UInt8, DType::Int16,
                             DType::Float16, DType::BFloat16};

struct IxName {
  IxKind kind;
  const char* name;
  int arity;
};
constexpr IxName kIxNames[] = {
    {IxKind::Neg, "neg", 1}, {IxKind::Not, "not", 1}, {IxKind::Add, "add", 2},
    {IxKind::Sub, "sub", 2}, {IxKind::Mul, "mul", 2}, {IxKind::Div, "div", 2},
    {IxKind::Mod, "mod", 2}, {IxKind::Lt, "lt", 2},   {IxKind::Le, "le", 2},
    {IxKind::Gt, "gt", 2},   {IxKind::Ge, "ge", 2},   {IxKind::Eq, "eq", 2},
    {IxKind::Ne, "ne", 2},   {IxKind::And, "and", 2}, {IxKind::Or, "or", 2},
    {IxKind::Min, "min", 2}, {IxKind::Max, "max", 2}, {IxKind::Select, "select", 3},
};

const IxName* ix_name(IxKind k) {
  for (const IxName& n : kIxNames)
    if (n.kind == k) return &n;
  return nullptr;
}

// ---- writing ----

// Const -> n, Var -> {"i": k}, Param -> {"p": slot}, others -> ["op", operands...].
json expr_to_json(const IndexExpr& e) {
  switch (e.kind) {
    case IxKind::Const:
      return e.value;
    case IxKind::Var:
      return json{{"i", e.value}};
    case IxKind::Param:
      return json{{"p", e.value}};
    case IxKind::Extra: {
      json at = json::array();
      for (const IndexExprPtr& a : e.args) at.push_back(expr_to_json(*a));
      return json{{"e", e.value}, {"at", std::move(at)}};
    }
    default:
      break;
  }
  const IxName* n = ix_name(e.kind);
  json a = json::array({n ? n->name : "?"});
  for (const IndexExpr* c : {e.a.get(), e.b.get(), e.c.get()})
    if (c) a.push_back(expr_to_json(*c));
  return a;
}

json exprs_to_json(const std::vector<IndexExprPtr>& v) {
  json a = json::array();
  for (const IndexExprPtr& e : v) a.push_back(expr_to_json(*e));
  return a;
}

json buffer_to_json(const KBuffer& b) {
  return json{{"dtype", dtype_name(b.dtype)}, {"dims", exprs_to_json(b.dims)}};
}

json loops_to_json(const std::vector<KLoop>& loops) {
  json a = json::array();
  for (const KLoop& l : loops)
    a.push_back(json{{"var", l.var}, {"extent", expr_to_json(*l.extent)}});
  return a;
}

json block_to_json(const KBlock& b);

// Only the fields the statement's kind uses, so that specs stay small and readable.
json stmt_to_json(const KStmt& st) {
  json j{{"kind", kKindNames[int(st.kind)]}, {"id", st.id}, {"dtype", dtype_name(st.dtype)}};
  switch (st.kind) {
    case KOp::Load:
      j["buffer"] = st.buffer;
      j["index"] = exprs_to_json(st.index);
      break;
    case KOp::Scalar:
      j["slot"] = st.slot;
      break;
    case KOp::Iota:
      j["index"] = exprs_to_json(st.index);
      break;
    case KOp::Unary:
      j["op"] = unary_op_name(UnaryOp(st.op));
      j["args"] = st.args;
      break;
    case KOp::Binary:
      j["op"] = binary_op_name(BinaryOp(st.op));
      j["args"] = st.args;
      break;
    case KOp::Where:
    case KOp::Cast:
      j["args"] = st.args;
      break;
    case KOp::Guard:
      j["cond"] = expr_to_json(*st.cond);
      j["slot"] = st.slot;
      j["body"] = block_to_json(*st.body);
      break;
    case KOp::Reduce:
      j["op"] = reduce_op_name(ReduceOp(st.op));
      j["loops"] = loops_to_json(st.loops);
      j["body"] = block_to_json(*st.body);
      break;
  }
  return j;
}

json block_to_json(const KBlock& b) {
  json stmts = json::array();
  for (const KStmt& st : b.stmts) stmts.push_back(stmt_to_json(st));
  return json{{"stmts", std::move(stmts)}, {"result", b.result}};
}

// ---- reading ----

// Where a JSON value sits in the spec: a chain of parents on the stack, rendered as
// "body.stmts[3].args[0]" only when an error is reported.
struct Path {
  const Path* parent = nullptr;
  const char* key = nullptr;  // object member, or
  size_t index = 0;           // array element when key is null

  Path operator/(const char* k) const { return Path{this, k, 0}; }
  Path operator[](size_t i) const { return Path{this, nullptr, i}; }

  // Deep paths keep their two ends: "body.stmts[0]...[1][1]".
  std::string str() const {
    constexpr size_t kEnds = 16;
    std::vector<const Path*> chain;
    for (const Path* p = this; p && p->parent; p = p->parent) chain.push_back(p);
    std::string s;
    for (size_t k = chain.size(); k-- > 0;) {
      const Path& p = *chain[k];
      if (chain.size() > 2 * kEnds + 1 && k < chain.size() - kEnds && k >= kEnds) {
        if (k == kEnds) s += "...";
        continue;
      }
      if (p.key)
        s += (s.empty() || s.back() == '.' ? "" : ".") + std::string(p.key);
      else
        s += "[" + std::to_string(p.index) + "]";
    }
    return s.empty() ? "(top level)" : s;
  }
};

// Text from the file, shortened and made printable so that messages stay one clean line.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (size_t k = 0; k < s.size() && k < 40; ++k) {
    unsigned char c = static_cast<unsigned char>(s[k]);
    out += (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') ? char(c) : '?';
  }
  return out + (s.size() > 40 ? "...\"" : "\"");
}

template <class Names>
std::string list(const Names& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

class Reader {
 public:
  KernelIR read(const json& spec) {
    const Path root;
    need_object(spec, root);
    check_version(spec, root);
    KernelIR ir;
    ir.num_params =
        int(integer(field(spec, root, "num_params"), root / "num_params", 0, kMaxSlots));
    ir.num_scalars =
        int(integer(field(spec, root, "num_scalars"), root / "num_scalars", 0, kMaxSlots));
    ir.num_vars = int(integer(field(spec, root, "num_vars"), root / "num_vars", 0, kMaxSlots));
    num_params_ = ir.num_params;
    num_scalars_ = ir.num_scalars;
    bound_.assign(size_t(ir.num_vars), 0);

    const std::string& kind = string(field(spec, root, "kind"), root / "kind");
    if (kind == "map")
      ir.kind = KernelKind::Map;
    else if (kind == "scatter")
      ir.kind = KernelKind::Scatter;
    else
      fail(root / "kind", "unknown kernel kind " + quoted(kind) + "; valid: map, scatter");
    const bool scatter = ir.kind == KernelKind::Scatter;
    if (scatter)
      check_keys(spec, root,
                 {"version", "kind", "inputs", "output", "loops", "body", "target", "target_valid",
                  "scatter_op", "num_params", "num_scalars", "num_vars", "ops", "ir"});
    else
      check_keys(spec, root,
                 {"version", "kind", "inputs", "output", "extra_outputs", "loops", "body",
                  "num_params", "num_scalars", "num_vars", "ops", "ir"},
                 " (target, target_valid and scatter_op are only for scatter kernels)");

    const Path inputs_path = root / "inputs";
    const json& inputs = array(field(spec, root, "inputs"), inputs_path);
    for (size_t k = 0; k < inputs.size(); ++k)
      ir.inputs.push_back(buffer(inputs[k], inputs_path[k]));
    ir.output = buffer(field(spec, root, "output"), root / "output");
    inputs_ = &ir.inputs;

    const Path loops_path = root / "loops";
    ir.loops = loops(field(spec, root, "loops"), loops_path);
    if (!scatter && ir.loops.size() != ir.output.dims.size())
      fail(loops_path, "a map kernel has one loop per output axis: expected " +
                           std::to_string(ir.output.dims.size()) + ", got " +
                           std::to_string(ir.loops.size()));
    bind(ir.loops, loops_path, true);
    ir.body = block(field(spec, root, "body"), root / "body", 1);
    if (!scatter && spec.contains("extra_outputs"))
      ir.extra_outputs = extra_outputs(spec["extra_outputs"], root / "extra_outputs");

    if (scatter) {
      const Path target_path = root / "target";
      const json& target = array(field(spec, root, "target"), target_path);
      if (target.size() != ir.output.dims.size())
        fail(target_path, "one target index per output axis: expected " +
                              std::to_string(ir.output.dims.size()) + ", got " +
                              std::to_string(target.size()));
      for (size_t k = 0; k < target.size(); ++k)
        ir.target.push_back(expr(target[k], target_path[k], 1));
      ir.target_valid = expr(field(spec, root, "target_valid"), root / "target_valid", 1);
      ir.scatter_op = reduce_op(field(spec, root, "scatter_op"), root / "scatter_op");
    }
    bind(ir.loops, loops_path, false);

    const Path ops_path = root / "ops";
    const json& ops = array(field(spec, root, "ops"), ops_path);
    for (size_t k = 0; k < ops.size(); ++k) ir.ops.push_back(op_text(ops[k], ops_path[k]));
    return ir;
  }

 private:
  [[noreturn]] static void fail(const Path& p, const std::string& what) {
    throw Error("kernel spec: " + p.str() + ": " + what);
  }

  static void need_object(const json& j, const Path& p) {
    if (!j.is_object()) fail(p, std::string("expected an object, got ") + j.type_name());
  }

  static const json& array(const json& j, const Path& p) {
    if (!j.is_array()) fail(p, std::string("expected an array, got ") + j.type_name());
    return j;
  }

  static const json& field(const json& obj, const Path& p, const char* key) {
    auto it = obj.find(key);
    if (it == obj.end()) fail(p / key, "missing field");
    return *it;
  }

  // Unknown members mean a garbled file or one from another format: refuse rather than guess.
  static void check_keys(const json& obj, const Path& p, std::initializer_list<const char*> valid,
                         const char* note = "") {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      bool known = false;
      for (const char* v : valid) known = known || it.key() == v;
      if (!known)
        fail(p, "unknown field " + quoted(it.key()) + "; valid here: " + list(valid) + note);
    }
  }

  static int64_t integer(const json& j, const Path& p, int64_t lo, int64_t hi) {
    auto range = [&] { return " (valid: " + std::to_string(lo) + ".." + std::to_string(hi) + ")"; };
    if (!j.is_number_integer())
      fail(p, std::string("expected an integer, got ") + j.type_name() + range());
    int64_t v;
    if (j.is_number_unsigned()) {  // nlohmann keeps non-negative literals as uint64
      uint64_t u = j.get<uint64_t>();
      if (hi < 0 || u > uint64_t(hi)) fail(p, std::to_string(u) + " is out of range" + range());
      v = int64_t(u);
    } else {
      v = j.get<int64_t>();
    }
    if (v < lo || v > hi) fail(p, std::to_string(v) + " is out of range" + range());
    return v;
  }

  static const std::string& string(const json& j, const Path& p) {
    if (!j.is_string()) fail(p, std::string("expected a string, got ") + j.type_name());
    return j.get_ref<const std::string&>();
  }

  static void check_version(const json& spec, const Path& root) {
    auto it = spec.find("version");
    const std::string supported = "this build reads version " + std::to_string(kKernelSpecVersion);
    if (it == spec.end()) fail(root / "version", "missing field (" + supported + ")");
    if (!it->is_number_integer())
      fail(root / "version",
           std::string("expected an integer, got ") + it->type_name() + " (" + supported + ")");
    if (*it != kKernelSpecVersion)
      fail(root / "version", "version " + it->dump() + " is not supported (" + supported + ")");
  }

  static DType dtype(const json& j, const Path& p) {
    const std::string& s = string(j, p);
    std::vector<const char*> names;
    for (DType t : kDTypes) {
      if (s == dtype_name(t)) return t;
      names.push_back(dtype_name(t));
    }
    fail(p, "unknown dtype " + quoted(s) + "; valid: " + list(names));
  }

  template <class Op>
  static int named_op(const json& j, const Path& p, int count, const char* (*name)(Op),
                      const char* what) {
    const std::string& s = string(j, p);
    std::vector<const char*> names;
    for (int k = 0; k < count; ++k) {
      if (s == name(Op(k))) return k;
      names.push_back(name(Op(k)));
    }
    fail(p, std::string("unknown ") + what + " " + quoted(s) + "; valid: " + list(names));
  }
  static int reduce_op(const json& j, const Path& p) {
    return named_op<ReduceOp>(j, p, kNumReduce, reduce_op_name, "reduce op");
  }

  // ops end up in a comment of the generated source: no line breaks or backslashes.
  static std::string op_text(const json& j, const Path& p) {
    const std::string& s = string(j, p);
    if (s.size() > kMaxOpText)
      fail(p, "op description of " + std::to_string(s.size()) +
                  " characters is too long (at most " + std::to_string(kMaxOpText) + ")");
    for (char ch : s) {
      unsigned char c = static_cast<unsigned char>(ch);
      if (c < 0x20 || c >= 0x7f || c == '\\')
        fail(p, "op description " + quoted(s) +
                    " may only hold printable ASCII characters other than a backslash");
    }
    return s;
  }

  // Buffer dims are evaluated before any loop opens: Params and constants only.
  KBuffer buffer(const json& j, const Path& p) {
    need_object(j, p);
    check_keys(j, p, {"dtype", "dims"});
    KBuffer b;
    b.dtype = dtype(field(j, p, "dtype"), p / "dtype");
    const Path dims_path = p / "dims";
    const json& dims = array(field(j, p, "dims"), dims_path);
    if (dims.size() > kMaxRank)
      fail(dims_path, "rank " + std::to_string(dims.size()) + " is too large (at most " +
                          std::to_string(kMaxRank) + ")");
    for (size_t k = 0; k < dims.size(); ++k)
      b.dims.push_back(expr(dims[k], dims_path[k], 1, false));
    return b;
  }

  // A loop nest. Extents may not use loop variables: the emitter evaluates them before the
  // nest opens (OpenMP conditions and collapse need rectangular nests).
  std::vector<KLoop> loops(const json& j, const Path& p) {
    array(j, p);
    if (j.size() > kMaxRank)
      fail(p, std::to_string(j.size()) + " nested loops are too many (at most " +
                  std::to_string(kMaxRank) + ")");
    if (!j.empty() && bound_.empty()) fail(p, "the kernel has no loop variables (num_vars is 0)");
    std::vector<KLoop> out;
    for (size_t k = 0; k < j.size(); ++k) {
      const Path lp = p[k];
      need_object(j[k], lp);
      check_keys(j[k], lp, {"var", "extent"});
      KLoop l;
      l.var = int(integer(field(j[k], lp, "var"), lp / "var", 0, int64_t(bound_.size()) - 1));
      l.extent = expr(field(j[k], lp, "extent"), lp / "extent", 1, false);
      out.push_back(std::move(l));
    }
    return out;
  }

  // Brings a nest's variables into scope (on) or out of it; a variable bound twice would shadow.
  void bind(const std::vector<KLoop>& loops, const Path& p, bool on) {
    for (size_t k = 0; k < loops.size(); ++k) {
      char& b = bound_[size_t(loops[k].var)];
      if (on && b)
        fail(p[k] / "var", "loop variable i" + std::to_string(loops[k].var) +
                               " is already bound by this or an enclosing loop nest");
      b = on;
    }
  }

  std::string vars_in_scope() const {
    std::string s;
    for (size_t k = 0; k < bound_.size(); ++k)
      if (bound_[k]) s += (s.empty() ? "" : ", ") + ("i" + std::to_string(k));
    return s.empty() ? "none" : s;
  }

  // Interior nodes are built directly, not with ix_unary/ix_binary: those fold constants and
  // identities (x+0), and the tree must come back exactly as written for the key to match.
  IndexExprPtr expr(const json& j, const Path& p, int depth, bool allow_vars = true) {
    if (depth == 1) expr_root_ = &p;
    if (depth > kMaxExprDepth)
      fail(*expr_root_,
           "index expression nested deeper than " + std::to_string(kMaxExprDepth) + " levels");
    if (j.is_number_integer())
      return ix_const(
          integer(j, p, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    if (j.is_object()) {
      if (j.size() == 1 && j.contains("i")) {
        if (bound_.empty()) fail(p / "i", "the kernel has no loop variables (num_vars is 0)");
        int64_t k = integer(*j.find("i"), p / "i", 0, int64_t(bound_.size()) - 1);
        if (!allow_vars)
          fail(p / "i", "i" + std::to_string(k) +
                            " used where no loop variable is in scope (buffer dims and loop "
                            "extents take only params and constants)");
        if (!bound_[size_t(k)])
          fail(p / "i", "i" + std::to_string(k) +
                            " is not a loop variable in scope here (in scope: " + vars_in_scope() +
                            ")");
        return ix_var(int(k));
      }
      if (j.size() == 1 && j.contains("p")) {
        if (num_params_ == 0) fail(p / "p", "the kernel has no params (num_params is 0)");
        return ix_param(int(integer(*j.find("p"), p / "p", 0, num_params_ - 1)));
      }
      if (j.size() == 2 && j.contains("e") && j.contains("at"))
        return extra(j, p, depth, allow_vars);
    } else if (j.is_array() && !j.empty() && j[0].is_string()) {
      const std::string& name = j[0].get_ref<const std::string&>();
      const IxName* op = nullptr;
      for (const IxName& n : kIxNames)
        if (name == n.name) op = &n;
      if (!op) {
        std::vector<const char*> names;
        for (const IxName& n : kIxNames) names.push_back(n.name);
        fail(p[0], "unknown index operator " + quoted(name) + "; valid: " + list(names));
      }
      if (j.size() != size_t(op->arity) + 1)
        fail(p, "\"" + std::string(op->name) + "\" takes " + std::to_string(op->arity) +
                    " operand(s), got " + std::to_string(j.size() - 1));
      auto e = std::make_shared<IndexExpr>();
      e->kind = op->kind;
      e->a = expr(j[1], p[1], depth + 1, allow_vars);
      if (op->arity > 1) e->b = expr(j[2], p[2], depth + 1, allow_vars);
      if (op->arity > 2) e->c = expr(j[3], p[3], depth + 1, allow_vars);
      for (const IndexExprPtr* child : {&e->a, &e->b, &e->c})
        if (*child) e->depth = std::max(e->depth, (*child)->depth + 1);
      return e;
    }
    fail(p, std::string("expected an index expression (an integer, {\"i\": var}, {\"p\": param}, "
                        "{\"e\": buffer, \"at\": [indices...]} or [\"op\", operands...]), got ") +
                j.type_name());
  }

  // {"e": slot, "at": [...]}: a bounds-checked read of integer input buffer `slot`, one index
  // per axis (docs/design.md, "Data-dependent indexing").
  IndexExprPtr extra(const json& j, const Path& p, int depth, bool allow_vars) {
    if (!allow_vars || !inputs_)
      fail(p / "e", "an extra read where only params and constants may appear");
    const int n = int(inputs_->size());
    if (n == 0) fail(p / "e", "the kernel has no input buffers to read");
    const int slot = int(integer(*j.find("e"), p / "e", 0, n - 1));
    const KBuffer& b = (*inputs_)[size_t(slot)];
    if (!is_index_dtype(b.dtype))
      fail(p / "e", "in" + std::to_string(slot) + " is " + dtype_name(b.dtype) +
                        "; extra reads take " + kIndexDTypes + " buffers");
    const Path at_path = p / "at";
    const json& at = array(*j.find("at"), at_path);
    if (at.size() != b.dims.size())
      fail(at_path, "in" + std::to_string(slot) + " has " + std::to_string(b.dims.size()) +
                        " axes; got " + std::to_string(at.size()) + " indices");
    std::vector<IndexExprPtr> args;
    for (size_t k = 0; k < at.size(); ++k) args.push_back(expr(at[k], at_path[k], depth + 1));
    return ix_extra(slot, std::move(args));
  }

  // Arguments must name values visible here: defined earlier in this block or an enclosing
  // one (ids are unique in the kernel, and a Guard/Reduce id is defined after its body).
  int value_ref(const json& j, const Path& p, const char* what) {
    int id = int(integer(j, p, 0, std::numeric_limits<int>::max()));
    if (!visible_.count(id))
      fail(p, "v" + std::to_string(id) + " is not defined " + what +
                  " in this block or an enclosing one");
    return id;
  }

  // A map's further outputs: {"buffer", "value"} each; verify_kernel_ir checks that a value is
  // a top-level statement of the output's dtype and that the extents are the output's.
  std::vector<KOutput> extra_outputs(const json& j, const Path& p) {
    const json& list = array(j, p);
    if (list.size() > size_t(kMaxSlots))
      fail(p, std::to_string(list.size()) + " extra outputs (valid: at most " +
                  std::to_string(kMaxSlots) + ")");
    std::vector<KOutput> out;
    for (size_t k = 0; k < list.size(); ++k) {
      const Path item = p[k];
      need_object(list[k], item);
      check_keys(list[k], item, {"buffer", "value"});
      KOutput o;
      o.buffer = buffer(field(list[k], item, "buffer"), item / "buffer");
      o.value = int(integer(field(list[k], item, "value"), item / "value", 0,
                            std::numeric_limits<int>::max()));
      out.push_back(std::move(o));
    }
    return out;
  }

  KBlock block(const json& j, const Path& p, int depth) {
    if (depth == 1) block_root_ = &p;
    if (depth > kMaxBlockDepth)
      fail(*block_root_,
           "guard/reduce blocks nested deeper than " + std::to_string(kMaxBlockDepth) + " levels");
    need_object(j, p);
    check_keys(j, p, {"stmts", "result"});
    KBlock b;
    const Path stmts_path = p / "stmts";
    const json& stmts = array(field(j, p, "stmts"), stmts_path);
    for (size_t k = 0; k < stmts.size(); ++k) {
      b.stmts.push_back(stmt(stmts[k], stmts_path[k], depth));
      visible_.insert(b.stmts.back().id);
    }
    b.result = value_ref(field(j, p, "result"), p / "result", "before the end of the block");
    for (const KStmt& st : b.stmts) visible_.erase(st.id);
    return b;
  }

  std::vector<int> args(const json& obj, const Path& p, size_t count) {
    const Path ap = p / "args";
    const json& a = array(field(obj, p, "args"), ap);
    if (a.size() != count)
      fail(ap,
           "expected " + std::to_string(count) + " argument(s), got " + std::to_string(a.size()));
    std::vector<int> out;
    for (size_t k = 0; k < a.size(); ++k)
      out.push_back(value_ref(a[k], ap[k], "before this statement"));
    return out;
  }

  KStmt stmt(const json& j, const Path& p, int depth) {
    need_object(j, p);
    KStmt st;
    const std::string& kind = string(field(j, p, "kind"), p / "kind");
    int kind_index = -1;
    for (int k = 0; k < int(std::size(kKindNames)); ++k)
      if (kind == kKindNames[k]) kind_index = k;
    if (kind_index < 0)
      fail(p / "kind", "unknown statement kind " + quoted(kind) + "; valid: " + list(kKindNames));
    st.kind = KOp(kind_index);
    st.id = int(integer(field(j, p, "id"), p / "id", 0, std::numeric_limits<int>::max()));
    if (!all_ids_.insert(st.id).second)
      fail(p / "id", "v" + std::to_string(st.id) + " is defined twice in this kernel");
    st.dtype = dtype(field(j, p, "dtype"), p / "dtype");
    switch (st.kind) {
      case KOp::Load: {
        check_keys(j, p, {"kind", "id", "dtype", "buffer", "index"});
        const int n = int(inputs_->size());
        if (n == 0) fail(p / "buffer", "the kernel has no input buffers");
        st.buffer = int(integer(field(j, p, "buffer"), p / "buffer", 0, n - 1));
        const KBuffer& buf = (*inputs_)[size_t(st.buffer)];
        if (st.dtype != buf.dtype)
          fail(p / "dtype", std::string("a load has its buffer's dtype: expected ") +
                                dtype_name(buf.dtype) + ", got " + dtype_name(st.dtype));
        st.index = index(j, p, buf.dims.size(),
                         "one index per axis of input " + std::to_string(st.buffer));
        break;
      }
      case KOp::Scalar:
        check_keys(j, p, {"kind", "id", "dtype", "slot"});
        st.slot = scalar_slot(j, p);
        break;
      case KOp::Iota:
        check_keys(j, p, {"kind", "id", "dtype", "index"});
        st.index = index(j, p, 1, "exactly one index");
        break;
      case KOp::Unary: {
        check_keys(j, p, {"kind", "id", "dtype", "op", "args"});
        st.op =
            named_op<UnaryOp>(field(j, p, "op"), p / "op", kNumUnary, unary_op_name, "unary op");
        // Mirrors the emitter, which has integer forms of these only.
        const UnaryOp op = UnaryOp(st.op);
        if (!is_float(st.dtype) && !has_integer_form(op))
          fail(p / "dtype", std::string("unary ") + unary_op_name(op) +
                                " needs a float type (float16, "
                                "bfloat16, float32 or float64), got " +
                                dtype_name(st.dtype) +
                                " (neg, abs, relu, floor, logical_not and bitwise_not take any "
                                "dtype)");
        if (is_float(st.dtype) && op == UnaryOp::BitwiseNot)
          fail(p / "dtype", std::string("unary bitwise_not needs bool or an integer type, got ") +
                                dtype_name(st.dtype));
        st.args = args(j, p, 1);
        break;
      }
      case KOp::Binary:
        check_keys(j, p, {"kind", "id", "dtype", "op", "args"});
        st.op = named_op<BinaryOp>(field(j, p, "op"), p / "op", kNumBinary, binary_op_name,
                                   "binary op");
        if (is_bitwise(BinaryOp(st.op)) && is_float(st.dtype))
          fail(p / "dtype", std::string("binary ") + binary_op_name(BinaryOp(st.op)) +
                                " needs bool or an integer type, got " + dtype_name(st.dtype));
        st.args = args(j, p, 2);
        break;
      case KOp::Where:
        check_keys(j, p, {"kind", "id", "dtype", "args"});
        st.args = args(j, p, 3);
        break;
      case KOp::Cast:
        check_keys(j, p, {"kind", "id", "dtype", "args"});
        st.args = args(j, p, 1);
        break;
      case KOp::Guard:
        check_keys(j, p, {"kind", "id", "dtype", "cond", "slot", "body"});
        st.cond = expr(field(j, p, "cond"), p / "cond", 1);
        st.slot = scalar_slot(j, p);
        st.body = std::make_shared<KBlock>(block(field(j, p, "body"), p / "body", depth + 1));
        break;
      case KOp::Reduce: {
        check_keys(j, p, {"kind", "id", "dtype", "op", "loops", "body"});
        st.op = reduce_op(field(j, p, "op"), p / "op");
        const Path lp = p / "loops";
        st.loops = loops(field(j, p, "loops"), lp);
        bind(st.loops, lp, true);
        st.body = std::make_shared<KBlock>(block(field(j, p, "body"), p / "body", depth + 1));
        bind(st.loops, lp, false);
        break;
      }
    }
    return st;
  }

  int scalar_slot(const json& j, const Path& p) {
    if (num_scalars_ == 0) fail(p / "slot", "the kernel has no scalars (num_scalars is 0)");
    return int(integer(field(j, p, "slot"), p / "slot", 0, num_scalars_ - 1));
  }

  std::vector<IndexExprPtr> index(const json& j, const Path& p, size_t count,
                                  const std::string& rule) {
    const Path ip = p / "index";
    const json& a = array(field(j, p, "index"), ip);
    if (a.size() != count)
      fail(ip, "expected " + rule + " (" + std::to_string(count) + "), got " +
                   std::to_string(a.size()));
    std::vector<IndexExprPtr> out;
    for (size_t k = 0; k < a.size(); ++k) out.push_back(expr(a[k], ip[k], 1));
    return out;
  }

  // Where the expression / block being read starts: deep-nesting errors are reported there.
  const Path* expr_root_ = nullptr;
  const Path* block_root_ = nullptr;
  int num_params_ = 0;
  int num_scalars_ = 0;
  std::vector<char> bound_;  // bound_[k]: loop variable i<k> is in scope
  const std::vector<KBuffer>* inputs_ = nullptr;
  std::unordered_set<int> all_ids_;  // every value id defined so far
  std::unordered_set<int> visible_;  // ids an argument may name at this point
};

}  // namespace

json kernel_spec_to_json(const KernelIR& ir) {
  json j;
  j["version"] = kKernelSpecVersion;
  j["kind"] = ir.kind == KernelKind::Map ? "map" : "scatter";
  json inputs = json::array();
  for (const KBuffer& b : ir.inputs) inputs.push_back(buffer_to_json(b));
  j["inputs"] = std::move(inputs);
  j["output"] = buffer_to_json(ir.output);
  if (!ir.extra_outputs.empty()) {
    json extra = json::array();
    for (const KOutput& o : ir.extra_outputs)
      extra.push_back(json{{"buffer", buffer_to_json(o.buffer)}, {"value", o.value}});
    j["extra_outputs"] = std::move(extra);
  }
  j["loops"] = loops_to_json(ir.loops);
  j["body"] = block_to_json(ir.body);
  if (ir.kind == KernelKind::Scatter) {
    j["target"] = exprs_to_json(ir.target);
    j["target_valid"] = expr_to_json(*ir.target_valid);
    j["scatter_op"] = reduce_op_name(ReduceOp(ir.scatter_op));
  }
  j["num_params"] = ir.num_params;
  j["num_scalars"] = ir.num_scalars;
  j["num_vars"] = ir.num_vars;
  j["ops"] = ir.ops;
  j["ir"] = serialize_ir(ir);
  return j;
}

KernelIR kernel_spec_from_json(const json& spec) {
  try {
    KernelIR ir = Reader().read(spec);
    // The reader checks each field where it reads it; this checks the kernel whole, with the
    // invariants the pipeline's own passes are held to (codegen/verify_kernel_ir.h): a spec
    // from a foreign manifest reaches the emitters only if it could have come from lowering.
    if (const std::optional<std::string> problem = verify_kernel_ir(ir))
      throw Error("kernel spec: not a valid kernel: " + *problem);
    return ir;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // Only reachable through a bug in the checks above (or memory exhaustion); the contract
    // is that readers of foreign files see nothing but Error.
    throw Error(std::string("kernel spec: unreadable: ") + e.what());
  }
}

}  // namespace metajit
