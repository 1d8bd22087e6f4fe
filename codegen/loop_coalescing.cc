#include "codegen/loop_coalescing.h"

#include <memory>
#include <string>
#include <vector>

namespace metajit {
namespace {

bool reads(const IndexExprPtr& e, int var) {
  return e && ix_reads_var(*e, var);
}

// Whether every use of loop variables `a` (outer) and `b` (inner) in `block` is a load's last
// two indexes (a, b) of an array whose last extent is `extent_b`; `loads` collects those loads.
bool plain_trailing_uses(KBlock& block, int a, int b, const std::string& extent_b,
                         const KernelIR& ir, std::vector<KStmt*>& loads) {
  for (KStmt& st : block.stmts) {
    for (const KLoop& l : st.loops)
      if (reads(l.extent, a) || reads(l.extent, b)) return false;
    if (reads(st.cond, a) || reads(st.cond, b)) return false;
    const size_t n = st.index.size();
    bool used = false;
    for (const IndexExprPtr& e : st.index) used |= reads(e, a) || reads(e, b);
    if (used) {
      if (st.kind != KOp::Load || n < 2) return false;
      const IndexExpr& ia = *st.index[n - 2];
      const IndexExpr& ib = *st.index[n - 1];
      if (ia.kind != IxKind::Var || ia.value != a || ib.kind != IxKind::Var || ib.value != b)
        return false;
      for (size_t k = 0; k + 2 < n; ++k)
        if (reads(st.index[k], a) || reads(st.index[k], b)) return false;
      const KBuffer& buffer = ir.inputs.at(size_t(st.buffer));
      if (ix_to_string(*buffer.dims.back()) != extent_b) return false;
      loads.push_back(&st);
    }
    if (st.body && !plain_trailing_uses(*st.body, a, b, extent_b, ir, loads)) return false;
  }
  return true;
}

// A copy of `b` sharing no body with it: IR copies share bodies (shared_ptr), and the kernel's
// IR outside the schedule must not change.
std::shared_ptr<KBlock> deep_copy(const KBlock& b) {
  auto out = std::make_shared<KBlock>(b);
  for (KStmt& st : out->stmts)
    if (st.body) st.body = deep_copy(*st.body);
  return out;
}

bool coalesce_in(KBlock& block, const KernelIR& ir) {
  bool changed = false;
  for (KStmt& st : block.stmts) {
    if (st.body) changed |= coalesce_in(*st.body, ir);
    if (st.kind != KOp::Reduce || st.loops.size() < 2) continue;
    const KLoop outer = st.loops[st.loops.size() - 2];
    const KLoop inner = st.loops.back();
    if (reads(inner.extent, outer.var) || reads(outer.extent, inner.var)) continue;
    std::vector<KStmt*> loads;
    const std::string extent_b = ix_to_string(*inner.extent);
    if (!plain_trailing_uses(*st.body, outer.var, inner.var, extent_b, ir, loads)) continue;
    st.body = deep_copy(*st.body);
    loads.clear();
    plain_trailing_uses(*st.body, outer.var, inner.var, extent_b, ir, loads);
    // Row-major: element (a, b) of the last two axes is at a * extent_b + b, element (0, ab).
    for (KStmt* load : loads) {
      const size_t n = load->index.size();
      load->index[n - 2] = ix_const(0);
    }
    st.loops.pop_back();
    st.loops.back() = KLoop{inner.var, ix_binary(IxKind::Mul, outer.extent, inner.extent)};
    changed = true;
  }
  return changed;
}

}  // namespace

bool coalesce_reduction_loops(KernelIR& ir) {
  if (ir.kind != KernelKind::Map) return false;
  return coalesce_in(ir.body, ir);
}

}  // namespace metajit
