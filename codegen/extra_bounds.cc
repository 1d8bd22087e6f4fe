#include "codegen/extra_bounds.h"

#include <map>

namespace metajit {
namespace {

// Whether `e` reads no loop variable and no array: the same for every element of a launch.
bool launch_invariant(const IndexExpr& e) {
  if (e.kind == IxKind::Var || e.kind == IxKind::Extra) return false;
  for (const IndexExpr* c : {e.a.get(), e.b.get(), e.c.get()})
    if (c && !launch_invariant(*c)) return false;
  return true;
}

class Finder {
 public:
  explicit Finder(const KernelIR& ir) : ir_(ir) {
    for (const KLoop& l : ir.loops) bind(l);
  }

  void block(const KBlock& b) {
    for (const KStmt& st : b.stmts) {
      for (const KLoop& l : st.loops) bind(l);
      for (const IndexExprPtr& e : st.index) expr(e.get());
      expr(st.cond.get());
      if (st.body) block(*st.body);
    }
  }

  InBoundsVersion result() && {
    if (out_.unchecked_reads.empty()) return {};
    return std::move(out_);
  }

 private:
  // Only a loop whose extent is the same for the whole launch counts: the condition is tested
  // before any loop runs (a reduction's extent may read an outer loop's variable, kernel specs
  // allow it: docs/design.md "Kernel specs").
  void bind(const KLoop& l) {
    if (launch_invariant(*l.extent)) extent_[l.var] = l.extent;
  }

  // The loop variable `e` is, when it is one whose extent is known.
  const IndexExprPtr* loop_extent(const IndexExpr* e) const {
    if (!e || e->kind != IxKind::Var) return nullptr;
    auto it = extent_.find(int(e->value));
    return it == extent_.end() ? nullptr : &it->second;
  }

  void require(const IndexExprPtr& extent, const IndexExprPtr& limit) {
    const std::string key = ix_to_string(*extent) + " <= " + ix_to_string(*limit);
    if (seen_.insert(key).second) out_.conditions.emplace_back(extent, limit);
  }

  void expr(const IndexExpr* e) {
    if (!e) return;
    if (e->kind == IxKind::Extra) extra(*e);
    // i >= 0 holds for every loop variable; i < X holds for all i when extent <= X.
    if (e->kind == IxKind::Ge && loop_extent(e->a.get()) && e->b->kind == IxKind::Const &&
        e->b->value == 0)
      out_.true_tests.insert(ix_to_string(*e));
    if (e->kind == IxKind::Lt && launch_invariant(*e->b))
      if (const IndexExprPtr* extent = loop_extent(e->a.get())) {
        require(*extent, e->b);
        out_.true_tests.insert(ix_to_string(*e));
      }
    for (const IndexExprPtr& a : e->args) expr(a.get());
    for (const IndexExpr* c : {e->a.get(), e->b.get(), e->c.get()}) expr(c);
  }

  void extra(const IndexExpr& e) {
    const KBuffer& b = ir_.inputs.at(size_t(e.value));
    // A 0-d array's read has no test to drop (c_family_emitter.cc, extra_readers()).
    if (e.args.empty() || e.args.size() != b.dims.size()) return;
    for (const IndexExprPtr& a : e.args)
      if (!loop_extent(a.get())) return;
    for (size_t k = 0; k < e.args.size(); ++k) require(*loop_extent(e.args[k].get()), b.dims[k]);
    out_.unchecked_reads.insert(ix_to_string(e));
  }

  const KernelIR& ir_;
  std::map<int, IndexExprPtr> extent_;
  std::set<std::string> seen_;
  InBoundsVersion out_;
};

}  // namespace

InBoundsVersion extra_reads_in_bounds(const KernelIR& ir) {
  if (ir.kind != KernelKind::Map || ir.loops.empty()) return {};
  Finder f(ir);
  f.block(ir.body);
  return std::move(f).result();
}

}  // namespace metajit
