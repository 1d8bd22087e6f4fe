// The C++ emitter's flat strips (CpuSchedule::flat_nest, MapNest::flat): a window-reduction
// kernel's loops after the first walked as one strip whose variables come from tables filled
// once per launch, each window reduction accumulating the whole strip with its reduced loops
// outside and the strip inside (SIMD, the reads gathered with int indexes), then the outputs
// stored as one contiguous run. For rows too narrow for column strips (the digits CNN's 2x2
// pooling of 4- and 2-column rows), which ran scalar one output at a time.
#include <set>
#include <string>
#include <vector>

#include "codegen/cpp_emitter_internal.h"

namespace metajit {

namespace {

// The loads of `stmts`, guards' and reductions' bodies included.
void loads_in(const std::vector<KStmt>& stmts, std::vector<const KStmt*>& out) {
  for (const KStmt& st : stmts) {
    if (st.kind == KOp::Load) out.push_back(&st);
    if (st.body) loads_in(st.body->stmts, out);
  }
}

}  // namespace

// When the flat strip runs: the loops after the first hold at most kStrip outputs, and every
// read through the strip's variables stays within int (its indexes are in range in the version
// without bounds tests, so the part of its offset they make is below the stride of its first
// index, which reads none of them: CpuSchedule::flat_nest).
std::string CppEmitter::flat_strip_fits(const std::set<int>& lanes) const {
  const KernelIR& ir = sched_.ir;
  std::string outputs = "1";
  for (size_t l = 1; l < ir.loops.size(); ++l) outputs += " * " + ix(*ir.loops[l].extent);
  std::string fits = "(" + outputs + ") <= " + std::to_string(kStrip);
  std::vector<const KStmt*> loads;
  loads_in(ir.body.stmts, loads);
  std::set<std::string> strides;
  for (const KStmt* st : loads)
    for (size_t d = 1; d < st->index.size(); ++d)
      if (reads_any_var(*st->index[d], lanes)) {
        strides.insert("in" + std::to_string(st->buffer) + "_s" + std::to_string(d - 1));
        break;
      }
  for (const std::string& s : strides) fits += " && " + s + " <= 2147483647LL";
  return fits;
}

bool CppEmitter::reads_any_var(const IndexExpr& e, const std::set<int>& vars) {
  for (int v : vars)
    if (ix_reads_var(e, v)) return true;
  return false;
}

// The flat strip's variables for lane t of the strip, from the tables.
void CppEmitter::flat_lane_vars(const std::set<int>& lanes, int d) {
  for (int v : lanes)
    line(d, "const i64 i" + std::to_string(v) + " = mj_fl" + std::to_string(v) + "[t];");
}

// The nest: the tables, the first loop in parallel, the strip's window reductions
// (flat_window_strip), the outputs stored from the strip's start.
void CppEmitter::flat_nest(const MapNest& n, const std::vector<IndexExprPtr>& out_idx, int d) {
  const KernelIR& ir = sched_.ir;
  const std::vector<int>& levels = sched_.levels;
  const int k = int(ir.loops.size());
  std::set<int> lanes;
  for (int l = 1; l < k; ++l) lanes.insert(ir.loops[size_t(l)].var);
  simd_reductions_ = n.simd_reductions;
  const std::string K = std::to_string(kStrip);
  for (int v : lanes) line(d, "int mj_fl" + std::to_string(v) + "[" + K + "];");
  std::string outputs = "1";
  for (int l = 1; l < k; ++l) outputs += " * " + ix(*ir.loops[size_t(l)].extent);
  line(d, "const i64 mj_fn = " + outputs + ";");
  line(d, "{");
  for (int l = 1; l < k; ++l)
    line(d + 1, "i64 i" + std::to_string(ir.loops[size_t(l)].var) + " = 0;");
  line(d + 1, "for (i64 t = 0; t < mj_fn; ++t) {");
  std::string adv;
  for (int l = k - 1; l >= 1; --l) {
    const std::string i = "i" + std::to_string(ir.loops[size_t(l)].var);
    line(d + 2, "mj_fl" + std::to_string(ir.loops[size_t(l)].var) + "[t] = (int)" + i + ";");
    adv += l == 1 ? "++" + i + ";"
                  : "if (++" + i + " == " + ix(*ir.loops[size_t(l)].extent) + ") { " + i + " = 0; ";
  }
  for (int l = 2; l < k; ++l) adv += " }";
  line(d + 2, adv);
  line(d + 1, "}");
  line(d, "}");
  std::string w = work(ir.loops);
  for (const KStmt& st : ir.body.stmts)
    if (st.kind == KOp::Reduce) w += " * " + work(st.loops);
  const KLoop& first = ir.loops[0];
  const std::string i0 = "i" + std::to_string(first.var);
  line(d, "#pragma omp parallel for schedule(static) if(" + w + " > 32768)");
  line(d, "for (i64 " + i0 + " = 0; " + i0 + " < " + ix(*first.extent) + "; ++" + i0 + ") {");
  hoist_extra_reads(ir.body, {}, {first.var}, d + 1);
  hoist_guard_tests(ir.body, {first.var}, d + 1);
  for (size_t s = 0; s < ir.body.stmts.size(); ++s)
    if (levels[s] == 0) stmt(ir.body.stmts[s], d + 1);
  line(d + 1, "const i64 jn = mj_fn;");
  int_lanes_ = lanes;
  std::set<size_t> done(n.strips.begin(), n.strips.end());
  for (size_t s : n.strips) flat_window_strip(ir.body.stmts[s], lanes, d + 1);
  line(d + 1, "#pragma omp simd");
  line(d + 1, "for (i64 t = 0; t < jn; ++t) {");
  flat_lane_vars(lanes, d + 2);
  line(d + 2, "const i64 i" + std::to_string(kFlatColumnVar) + " = t;");
  strip_outputs(done, d + 2);
  // The outputs of one first-loop iteration are contiguous: its offset plus the strip's lane.
  std::vector<IndexExprPtr> at = {out_idx[0]};
  for (int l = 1; l < k; ++l) at.push_back(ix_const(0));
  at.back() = ix_var(kFlatColumnVar);
  line(d + 2, map_store(at, ir.body.result));
  line(d + 1, "}");
  int_lanes_.clear();
  line(d, "}");
  forget_hoisted_extras();
  guard_tests_.clear();
  simd_reductions_ = true;
}

// One window reduction `st` over the flat strip: its accumulators, every reduced loop outside
// and the strip's lanes inside.
void CppEmitter::flat_window_strip(const KStmt& st, const std::set<int>& lanes, int d) {
  const ReduceOp op = ReduceOp(st.op);
  const DType at = acc_dtype(op, st.dtype);
  const std::string acc = strip_accumulators(st, d);
  int dd = d;
  for (const KLoop& l : st.loops) {
    const std::string r = "i" + std::to_string(l.var);
    line(dd, "for (i64 " + r + " = 0; " + r + " < " + ix(*l.extent) + "; ++" + r + ") {");
    ++dd;
  }
  line(dd, "#pragma omp simd");
  line(dd, "for (i64 t = 0; t < jn; ++t) {");
  flat_lane_vars(lanes, dd + 1);
  block(*st.body, dd + 1);
  line(dd + 1, acc + "[t] = " + combine(op, at, acc + "[t]", v(st.body->result)) + ";");
  line(dd, "}");
  for (; dd > d; --dd) line(dd - 1, "}");
}

}  // namespace metajit
