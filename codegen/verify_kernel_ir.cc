#include "codegen/verify_kernel_ir.h"

#include <iterator>
#include <set>
#include <vector>

namespace metajit {
namespace {

class Verifier {
 public:
  explicit Verifier(const KernelIR& ir) : ir_(ir) {}

  std::optional<std::string> run() {
    for (size_t k = 0; k < ir_.inputs.size(); ++k)
      check_dims(ir_.inputs[k], "input " + std::to_string(k));
    check_dims(ir_.output, "the output");
    std::set<int> vars;
    bind(ir_.loops, vars, "the kernel's loops");
    if (ir_.kind == KernelKind::Map && ir_.loops.size() != ir_.output.dims.size())
      fail("a map has " + std::to_string(ir_.loops.size()) + " loops for an output of rank " +
           std::to_string(ir_.output.dims.size()));
    std::set<int> values;
    block(ir_.body, values, vars, "the body");
    extra_outputs();
    if (ir_.kind == KernelKind::Scatter) {
      if (ir_.target.size() != ir_.output.dims.size())
        fail("a scatter targets " + std::to_string(ir_.target.size()) +
             " axes of an output of rank " + std::to_string(ir_.output.dims.size()));
      for (const IndexExprPtr& t : ir_.target) expr(t, vars, "the scatter target");
      expr(ir_.target_valid, vars, "the scatter's validity test");
    }
    return problem_;
  }

 private:
  // Each further output of a map: the output's extents and a top-level value of its dtype.
  void extra_outputs() {
    if (!ir_.extra_outputs.empty() && ir_.kind != KernelKind::Map)
      return fail("a scatter kernel has extra outputs; only a map writes several");
    for (size_t k = 0; k < ir_.extra_outputs.size(); ++k) {
      const KOutput& o = ir_.extra_outputs[k];
      const std::string name = "extra output " + std::to_string(k + 1);
      check_dims(o.buffer, name);
      bool same = o.buffer.dims.size() == ir_.output.dims.size();
      for (size_t a = 0; same && a < o.buffer.dims.size(); ++a)
        same = o.buffer.dims[a] && ir_.output.dims[a] &&
               ix_to_string(*o.buffer.dims[a]) == ix_to_string(*ir_.output.dims[a]);
      if (!same) fail(name + " does not have the output's extents");
      const KStmt* def = nullptr;
      for (const KStmt& st : ir_.body.stmts)
        if (st.id == o.value) def = &st;
      if (!def)
        fail(name + " stores v" + std::to_string(o.value) +
             ", which is not a top-level statement of the body");
      else if (def->dtype != o.buffer.dtype)
        fail(name + " is " + dtype_name(o.buffer.dtype) + " but stores v" +
             std::to_string(o.value) + " of " + dtype_name(def->dtype));
    }
  }

  void fail(const std::string& what) {
    if (!problem_) problem_ = what;
  }

  void check_dims(const KBuffer& b, const std::string& name) {
    for (const IndexExprPtr& d : b.dims) expr(d, {}, "an extent of " + name);
  }

  // Binds the loops' variables (each once in the kernel) into `vars`.
  void bind(const std::vector<KLoop>& loops, std::set<int>& vars, const std::string& where) {
    for (const KLoop& l : loops) {
      expr(l.extent, vars, "a loop extent of " + where);
      if (l.var < 0 || l.var >= ir_.num_vars)
        fail(where + " bind i" + std::to_string(l.var) + ", not one of the kernel's " +
             std::to_string(ir_.num_vars) + " variables");
      if (!bound_.insert(l.var).second)
        fail(where + " bind i" + std::to_string(l.var) + ", which another loop binds");
      vars.insert(l.var);
    }
  }

  void expr(const IndexExprPtr& e, const std::set<int>& vars, const std::string& where) {
    if (!e) return fail(where + ": a missing index expression");
    switch (e->kind) {
      case IxKind::Const:
        return;
      case IxKind::Var:
        if (!vars.count(int(e->value)))
          fail(where + " reads i" + std::to_string(e->value) + " outside the loops binding it");
        return;
      case IxKind::Param:
        if (e->value < 0 || e->value >= ir_.num_params)
          fail(where + " reads parameter " + std::to_string(e->value) + " of " +
               std::to_string(ir_.num_params));
        return;
      case IxKind::Extent:
        return fail(where + " still holds an extent leaf (lowering replaces them)");
      case IxKind::Extra:
        if (e->value < 0 || size_t(e->value) >= ir_.inputs.size() ||
            ir_.inputs[size_t(e->value)].dims.size() != e->args.size())
          fail(where + " reads input " + std::to_string(e->value) + " with " +
               std::to_string(e->args.size()) + " indexes, not one per axis of an input");
        for (const IndexExprPtr& a : e->args) expr(a, vars, where);
        return;
      case IxKind::Neg:
      case IxKind::Not:
        return expr(e->a, vars, where);
      case IxKind::Select:
        expr(e->c, vars, where);
        [[fallthrough]];
      default:
        expr(e->a, vars, where);
        expr(e->b, vars, where);
    }
  }

  void block(const KBlock& b, std::set<int> values, std::set<int> vars, const std::string& where) {
    for (const KStmt& st : b.stmts) {
      const std::string at = "v" + std::to_string(st.id) + " in " + where;
      statement(st, values, vars, at);
      if (!defined_.insert(st.id).second) fail(at + " is defined twice");
      values.insert(st.id);
    }
    if (!values.count(b.result))
      fail(where + " yields v" + std::to_string(b.result) + ", which it does not define");
  }

  void statement(const KStmt& st, const std::set<int>& values, const std::set<int>& vars,
                 const std::string& at) {
    static constexpr size_t kArity[] = {0, 0, 0, 1, 2, 3, 1, 0, 0};  // by KOp
    static_assert(std::size(kArity) == size_t(KOp::Reduce) + 1, "one arity per KOp");
    if (st.args.size() != kArity[size_t(st.kind)])
      fail(at + " has " + std::to_string(st.args.size()) + " operands, not " +
           std::to_string(kArity[size_t(st.kind)]));
    for (int a : st.args)
      if (!values.count(a)) fail(at + " reads v" + std::to_string(a) + " before it is defined");
    const bool slot = st.kind == KOp::Scalar || st.kind == KOp::Guard;
    if (slot && (st.slot < 0 || st.slot >= ir_.num_scalars))
      fail(at + " reads scalar " + std::to_string(st.slot) + " of " +
           std::to_string(ir_.num_scalars));
    if (st.kind == KOp::Load) {
      if (st.buffer < 0 || size_t(st.buffer) >= ir_.inputs.size())
        return fail(at + " loads from input " + std::to_string(st.buffer) + " of " +
                    std::to_string(ir_.inputs.size()));
      if (st.index.size() != ir_.inputs[size_t(st.buffer)].dims.size())
        fail(at + " indexes input " + std::to_string(st.buffer) + " with " +
             std::to_string(st.index.size()) + " expressions for its " +
             std::to_string(ir_.inputs[size_t(st.buffer)].dims.size()) + " axes");
    }
    if (st.kind == KOp::Iota && st.index.size() != 1) fail(at + " is an iota without one index");
    for (const IndexExprPtr& e : st.index) expr(e, vars, at);
    if (st.kind == KOp::Guard) {
      expr(st.cond, vars, at);
      if (!st.body) return fail(at + " is a guard without a body");
      block(*st.body, values, vars, at);
    }
    if (st.kind == KOp::Reduce) {
      if (!st.body) return fail(at + " is a reduction without a body");
      std::set<int> inner = vars;
      bind(st.loops, inner, at);
      block(*st.body, values, inner, at);
    }
  }

  const KernelIR& ir_;
  std::set<int> bound_, defined_;
  std::optional<std::string> problem_;
};

}  // namespace

std::optional<std::string> verify_kernel_ir(const KernelIR& ir) {
  return Verifier(ir).run();
}

}  // namespace metajit
