#include "codegen/half_strips.h"

namespace metajit {
namespace {

// `e` is `var` plus terms that do not read it (`var`, `var + x`, `x + var`).
bool steps_by_one(const IndexExpr& e, int var) {
  if (e.kind == IxKind::Var) return int(e.value) == var;
  // A shifted read (a padded window's i - 1) steps by one too: it was read as a gather.
  if (e.kind == IxKind::Sub) return steps_by_one(*e.a, var) && !ix_reads_var(*e.b, var);
  if (e.kind != IxKind::Add) return false;
  return (steps_by_one(*e.a, var) && !ix_reads_var(*e.b, var)) ||
         (steps_by_one(*e.b, var) && !ix_reads_var(*e.a, var));
}

}  // namespace

bool contiguous_along(const KStmt& load, int var) {
  if (load.index.empty()) return false;
  for (size_t d = 0; d + 1 < load.index.size(); ++d)
    if (ix_reads_var(*load.index[d], var)) return false;
  return steps_by_one(*load.index.back(), var);
}

std::optional<HalfStrips> find_half_strips(const KernelIR& ir, const std::vector<int>& levels) {
  const int k = int(ir.loops.size());
  if (k == 0 || ir.kind != KernelKind::Map) return std::nullopt;
  const int var = ir.loops.back().var;
  HalfStrips h;
  for (size_t s = 0; s < ir.body.stmts.size(); ++s) {
    const KStmt& st = ir.body.stmts[s];
    if (levels[s] == k - 1 && st.kind == KOp::Load &&
        ir.inputs[size_t(st.buffer)].dtype == DType::Float16 && contiguous_along(st, var))
      h.loads.push_back(st.id);
  }
  h.output = ir.output.dtype == DType::Float16;
  for (size_t e = 0; e < ir.extra_outputs.size(); ++e)
    if (ir.extra_outputs[e].buffer.dtype == DType::Float16) h.extra_outputs.push_back(e);
  if (h.loads.empty() && !h.output && h.extra_outputs.empty()) return std::nullopt;
  return h;
}

}  // namespace metajit
