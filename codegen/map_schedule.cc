#include "codegen/map_schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "codegen/kernel_patterns.h"

namespace metajit {
namespace {

// Structural text of value `id` within `b` with loop variable `var` written as "#":
// equal texts compute equal values. Values defined outside `b` appear by id. Empty when the
// value is not a plain expression (Guard, Reduce, scalar arguments: slots differ by use).
std::string canon(const KBlock& b, int id, int var, const std::set<int>& local,
                  std::map<int, std::string>& memo) {
  if (auto it = memo.find(id); it != memo.end()) return it->second;
  const KStmt* st = nullptr;
  for (const KStmt& x : b.stmts)
    if (x.id == id && local.count(id)) st = &x;
  if (!st) return "v" + std::to_string(id);  // computed outside the loop: the same value
  std::string out;
  std::vector<IndexExprPtr> sub(size_t(var) + 1);
  for (int k = 0; k <= var; ++k) sub[size_t(k)] = ix_var(k);
  sub[size_t(var)] = ix_param(1 << 20);  // a name no kernel uses
  switch (st->kind) {
    case KOp::Load:
    case KOp::Iota:
      out = std::string(st->kind == KOp::Load ? "load" : "iota") + std::to_string(st->buffer);
      for (const IndexExprPtr& e : st->index)
        out += "[" + ix_to_string(*ix_substitute(e, sub)) + "]";
      break;
    case KOp::Unary:
    case KOp::Binary:
    case KOp::Where:
    case KOp::Cast:
      out = std::to_string(int(st->kind)) + "." + std::to_string(st->op) + "(";
      for (int a : st->args) {
        std::string c = canon(b, a, var, local, memo);
        if (c.empty()) return memo[id] = "";
        out += c + ",";
      }
      out += ")";
      break;
    default:
      return memo[id] = "";
  }
  out += dtype_name(st->dtype);
  return memo[id] = out;
}

// The first value of the row Reduce `red` (a single loop, one level out) whose text is `want`.
std::optional<RowReuse> reuse_in(const KStmt& red, const std::string& want, DType dtype) {
  std::map<int, std::string> memo;
  std::set<int> body_ids;
  for (const KStmt& y : red.body->stmts) body_ids.insert(y.id);
  for (const KStmt& y : red.body->stmts) {
    if (y.dtype != dtype || canon(*red.body, y.id, red.loops[0].var, body_ids, memo) != want)
      continue;
    RowReuse rr;
    rr.reduce_id = red.id;
    rr.inner_value = y.id;
    rr.dtype = dtype;
    return rr;
  }
  return std::nullopt;
}

bool varying_extra(const IndexExpr& e, int var) {
  if (e.kind == IxKind::Extra && ix_reads_var(e, var)) return true;
  for (const IndexExprPtr& a : e.args)
    if (varying_extra(*a, var)) return true;
  for (const IndexExpr* c : {e.a.get(), e.b.get(), e.c.get()})
    if (c && varying_extra(*c, var)) return true;
  return false;
}

// Whether `st` loads at an address that an extra read varying with `var` computes: a gather
// along that loop. Forced SIMD made it gather instructions, which on an AMD EPYC took 3x the
// time of the scalar loop GCC writes unforced (gather dim 1 4096x1024, measured); where they
// pay, GCC's own cost model still vectorises.
bool gathers_along(const KStmt& st, int var) {
  if (st.kind == KOp::Load)
    for (const IndexExprPtr& e : st.index)
      if (varying_extra(*e, var)) return true;
  if (st.body)
    for (const KStmt& inner : st.body->stmts)
      if (gathers_along(inner, var)) return true;
  return false;
}

// No Reduce and no gather along the loop among the statements of loop `level`: it can run as
// one SIMD loop.
bool simd_friendly(const KernelIR& ir, const std::vector<int>& levels, int level) {
  const int var = ir.loops[size_t(level)].var;
  for (size_t s = 0; s < ir.body.stmts.size(); ++s) {
    if (levels[s] != level) continue;
    if (ir.body.stmts[s].kind == KOp::Reduce) return false;
    if (gathers_along(ir.body.stmts[s], var)) return false;
  }
  return true;
}

}  // namespace

std::optional<RowReuse> find_row_reuse(const KernelIR& ir, const std::vector<int>& levels) {
  const int k = int(ir.loops.size());
  if (k < 2) return std::nullopt;
  const KLoop& inner = ir.loops[size_t(k - 1)];
  std::map<int, std::string> outer_memo;
  std::set<int> inner_ids;
  for (size_t s = 0; s < ir.body.stmts.size(); ++s)
    if (levels[s] == k - 1) inner_ids.insert(ir.body.stmts[s].id);
  // The innermost loop's values, latest (the most work saved) first.
  for (size_t s = ir.body.stmts.size(); s-- > 0;) {
    const KStmt& x = ir.body.stmts[s];
    if (levels[s] != k - 1 || x.kind == KOp::Load) continue;
    const std::string want = canon(ir.body, x.id, inner.var, inner_ids, outer_memo);
    if (want.empty()) continue;
    for (size_t r = 0; r < ir.body.stmts.size(); ++r) {
      const KStmt& red = ir.body.stmts[r];
      if (red.kind != KOp::Reduce || levels[r] != k - 2 || red.loops.size() != 1) continue;
      if (std::optional<RowReuse> rr = reuse_in(red, want, x.dtype)) {
        rr->reduce_index = r;
        rr->outer_value = x.id;
        rr->inner_var = inner.var;
        rr->in_output = x.dtype == ir.output.dtype;
        return rr;
      }
    }
  }
  return std::nullopt;
}

MapNest schedule_map_nest(const KernelIR& ir, const std::vector<int>& levels,
                          const std::vector<int>& level_of_value, bool row_reuse, bool windows) {
  MapNest n;
  const int k = int(ir.loops.size());
  if (k == 0) return n;
  const int inner = ir.loops[size_t(k - 1)].var;
  for (size_t s = 0; s < ir.body.stmts.size(); ++s) {
    if (levels[s] != k - 1) continue;
    const KStmt& st = ir.body.stmts[s];
    const bool window = windows && is_window_reduction(st, level_of_value, inner, k - 1);
    if (window || is_column_reduction(st, level_of_value, inner, k - 1)) n.strips.push_back(s);
    if (window) n.window_strips.push_back(s);
  }
  // Loops 0..c-1 are collapsed into one parallel loop: only while nothing sits between them.
  int first_used = k - 1;
  for (size_t s = 0; s < ir.body.stmts.size(); ++s)
    if (levels[s] >= 0 && levels[s] < first_used) first_used = levels[s];
  const bool strips = !n.strips.empty();
  // With strips the innermost loop becomes a loop over strips, which can join the collapse.
  const int max_collapse = strips ? k : std::max(1, k - 1);
  n.collapse = std::min(max_collapse, first_used + 1);
  const bool inner_friendly = simd_friendly(ir, levels, k - 1);
  n.single_simd = k == 1 && !strips && inner_friendly;
  n.inner_simd = k > 1 && inner_friendly;
  if (!strips && k - 1 >= n.collapse && !row_reuse && inner_friendly) {
    std::vector<const KStmt*> inner;
    for (size_t s = 0; s < ir.body.stmts.size(); ++s)
      if (levels[s] == k - 1) inner.push_back(&ir.body.stmts[s]);
    n.chunks = find_division_chunks(inner, ir.loops[size_t(k - 1)].var);
  }
  return n;
}

std::string describe_map_nest(const KernelIR& ir, const MapNest& n) {
  std::string out = "collapse " + std::to_string(n.collapse);
  if (n.single_simd) out += ", parallel simd loop";
  if (n.inner_simd && n.strips.empty() && !n.chunks) out += ", innermost loop simd";
  if (!n.strips.empty()) {
    out += ", innermost loop in strips for";
    for (size_t s : n.strips)
      out += " v" + std::to_string(ir.body.stmts[s].id) +
             (std::count(n.window_strips.begin(), n.window_strips.end(), s) ? " (window)" : "");
  }
  if (n.half) {
    out += ", innermost loop in float16 strips of " + std::to_string(kHalfStrip) + " (" +
           std::to_string(n.half->loads.size()) + " reads widened";
    if (n.half->output || !n.half->extra_outputs.empty())
      out += ", " + std::to_string(int(n.half->output) + int(n.half->extra_outputs.size())) +
             " outputs narrowed";
    out += ")";
  }
  if (!n.simd_reductions) out += ", reductions without SIMD";
  if (n.chunks)
    out += ", innermost loop in division chunks of " + std::to_string(n.chunks->divisor) +
           " (phase " + std::to_string(n.chunks->phase) + ")";
  return out;
}

}  // namespace metajit
