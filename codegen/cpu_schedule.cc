#include "codegen/cpu_schedule.h"

#include <algorithm>
#include <set>

#include "codegen/loop_coalescing.h"
#include "codegen/loop_invariants.h"

namespace metajit {
namespace {

// The loop variables the statements computing an operand read (`vars`: value_variables(ir)).
std::set<int> operand_vars(const std::vector<std::set<int>>& vars, const KStmt& r,
                           const std::vector<size_t>& stmts) {
  std::set<int> out;
  for (size_t s : stmts) {
    const std::set<int>& v = vars[size_t(r.body->stmts[s].id)];
    out.insert(v.begin(), v.end());
  }
  return out;
}

// Whether an operand reading the loop variables `vars` reads no output loop but `own` (its row
// or column variable, and `more` for merged columns) and the reduction's: then it is the same
// for every iteration of the outer loops (conv2d's weights, a matmul without batch) and is
// packed once per launch.
bool invariant_operand(const std::set<int>& vars, const KStmt& r, int own,
                       const std::vector<int>& more) {
  std::set<int> allowed(more.begin(), more.end());
  allowed.insert(own);
  for (const KLoop& l : r.loops) allowed.insert(l.var);
  for (int x : vars)
    if (!allowed.count(x)) return false;
  return true;
}

// Whether the loads of `stmts` (guards' bodies included) that read any of `cols` are affine
// in each, without extras; `found` counts them.
bool affine_column_loads(const std::vector<KStmt>& stmts, const std::vector<int>& cols,
                         int& found) {
  for (const KStmt& st : stmts) {
    if (st.body && !affine_column_loads(st.body->stmts, cols, found)) return false;
    if (st.kind != KOp::Load) continue;
    const bool reads = std::any_of(cols.begin(), cols.end(), [&](int v) {
      return std::any_of(st.index.begin(), st.index.end(),
                         [&](const IndexExprPtr& e) { return ix_reads_var(*e, v); });
    });
    if (!reads) continue;
    ++found;
    for (const IndexExprPtr& e : st.index) {
      if (ix_reads_extras(*e)) return false;
      for (int v : cols)
        if (!ix_affine_in(*e, v)) return false;
    }
  }
  return true;
}

// Whether the loads of `stmts` (guards' and reductions' bodies included) that read any of
// `lanes` read them only through arithmetic printed alike in int (ix_plain_arithmetic), not in
// their first index.
bool int_lane_loads(const std::vector<KStmt>& stmts, const std::set<int>& lanes) {
  for (const KStmt& st : stmts) {
    if (st.body && !int_lane_loads(st.body->stmts, lanes)) return false;
    if (st.kind != KOp::Load) continue;
    for (size_t d = 0; d < st.index.size(); ++d) {
      const bool reads = std::any_of(lanes.begin(), lanes.end(),
                                     [&](int v) { return ix_reads_var(*st.index[d], v); });
      if (reads && (d == 0 || !ix_plain_arithmetic(*st.index[d]))) return false;
    }
  }
  return true;
}

// CpuSchedule::flat_nest's conditions on a window-reduction kernel (its nest and narrow_nest
// scheduled).
bool flattens(const CpuSchedule& s) {
  const int k = int(s.ir.loops.size());
  if (k < 2 || s.nest.strips != s.nest.window_strips) return false;
  for (int lv : s.levels)
    if (lv > 0 && lv < k - 1) return false;
  std::set<int> lanes;
  for (int l = 1; l < k; ++l) lanes.insert(s.ir.loops[size_t(l)].var);
  return int_lane_loads(s.ir.body.stmts, lanes);
}

// ContractionSchedule::flat_columns.
bool flat_columns(const KernelIR& ir, const Contraction& c, const std::vector<int>& merged) {
  if (merged.empty()) return false;
  std::vector<int> cols = merged;
  cols.push_back(c.j_var);
  const KStmt& r = ir.body.stmts[c.reduce_index];
  std::vector<KStmt> stmts;
  for (size_t s : c.b_outer) stmts.push_back(ir.body.stmts[s]);
  for (size_t s : c.b_stmts) stmts.push_back(r.body->stmts[s]);
  int found = 0;
  return affine_column_loads(stmts, cols, found) && found > 0;
}

// Both factors of the contraction's product are bfloat16 values (loads of bfloat16 buffers or
// bfloat16 ops on them: their rounding to bfloat16 where packed is the rounding of their type,
// docs/design.md §3).
bool bfloat16_operands(const KStmt& r, const Contraction& c) {
  int found = 0;
  for (const KStmt& st : r.body->stmts)
    if ((st.id == c.a || st.id == c.b) && st.dtype == DType::BFloat16) ++found;
  return found == 2;
}

ContractionSchedule schedule_contraction(const KernelIR& ir, const Contraction& c,
                                         const CpuTarget& target) {
  ContractionSchedule cs;
  cs.match = c;
  cs.wide = target.contraction_tile();
  cs.narrow = target.narrow_contraction_tile();
  const KStmt& r = ir.body.stmts[c.reduce_index];
  const std::vector<std::set<int>> vars = value_variables(ir);
  const std::set<int> va = operand_vars(vars, r, c.a_stmts), vb = operand_vars(vars, r, c.b_stmts);
  // Output loops just outside j that only b reads join the columns (conv2d: the output row,
  // with j the output column: 8 x 56 x 56 outputs are 64 rows by 3136 columns, not 448 blocks
  // of 64 by 56, 56 padded to the tile's 64; conv2d's weight gradient: input channel, kernel
  // row and column are 576 columns, not 192 blocks of 3).
  size_t pj = 0;
  while (ir.loops[pj].var != c.j_var) ++pj;
  for (size_t p = pj; p-- > 0;) {
    const int o = ir.loops[p].var;
    if (o == c.i_var || !vb.count(o) || va.count(o)) break;
    cs.merged_outer_vars.insert(cs.merged_outer_vars.begin(), o);
  }
  cs.flat_columns = flat_columns(ir, c, cs.merged_outer_vars);
  cs.direct = find_direct_columns(ir, c, cs.merged_outer_vars);
  if (cs.merged_outer_vars.empty()) {
    std::vector<int> outer;
    for (const KLoop& l : ir.loops)
      if (l.var != c.i_var && l.var != c.j_var) outer.push_back(l.var);
    cs.direct_steps = find_direct_steps(ir, c, outer);
  }
  cs.bf16_pairs = target.bf16_dot && bfloat16_operands(r, c);
  // Int32 sums of 8-bit products (find_contraction allowed them: a vector target): byte quads
  // where vpdpbusd can multiply them (unsigned A by signed B), int16 pairs otherwise.
  const bool bytes = c.a_bytes != DType::Float32;
  cs.int8_quads = bytes && target.int8_dot && c.b_bytes == DType::Int8;
  cs.int16_pairs = bytes && !cs.int8_quads;
  if (cs.steps_per_word() > 1) {
    // More reduction steps per block: a micro-kernel call still runs the float32 tile's kc
    // steps (as pairs or quads), so its C tile is loaded and stored as often per step as
    // float32's, and the blocks are packed in fewer rounds. bfloat16 1024^3 went from 1.67x
    // float32's GFLOP/s to 1.8-1.9x this way (the 6x64 B micro-panel 32 KiB of words, Zen 4).
    cs.wide.kc *= cs.steps_per_word();
    cs.narrow.kc *= cs.steps_per_word();
    cs.direct.reset();
    cs.direct_steps.reset();
  }
  cs.a_once = invariant_operand(va, r, c.i_var, {});
  cs.b_once = invariant_operand(vb, r, c.j_var, cs.merged_outer_vars);
  return cs;
}

bool contains_reduce(const KBlock& b) {
  for (const KStmt& st : b.stmts)
    if (st.kind == KOp::Reduce || (st.body && contains_reduce(*st.body))) return true;
  return false;
}

ScatterSchedule schedule_scatter(const KernelIR& ir) {
  ScatterSchedule s;
  for (size_t k = ir.loops.size(); k-- > 0 && s.split_loop < 0;) {
    const int var = ir.loops[k].var;
    int own = 0, others = 0;
    for (const IndexExprPtr& t : ir.target) {
      if (t->kind == IxKind::Var && t->value == var)
        ++own;
      else if (ix_reads_var(*t, var))
        ++others;
    }
    if (own == 1 && others == 0) s.split_loop = int(k);
  }
  s.simd = s.split_loop >= 0 && !contains_reduce(ir.body);
  return s;
}

std::string tile_name(const ContractionTile& t) {
  return std::to_string(t.mr) + "x" + std::to_string(t.nr) + " micro-kernel, blocks kc " +
         std::to_string(t.kc) + " mc " + std::to_string(t.mc) + " nc " + std::to_string(t.nc);
}

}  // namespace

CpuSchedule schedule_cpu_kernel(const KernelIR& ir, const CpuTarget& target) {
  CpuSchedule s;
  s.ir = ir;
  if (ir.kind != KernelKind::Map) {
    s.scatter = schedule_scatter(ir);
    return s;
  }
  hoist_reduce_invariants(s.ir);
  s.levels = statement_levels(s.ir);
  s.level_of_value = levels_by_value(s.ir, s.levels);
  if (s.ir.loops.empty()) return s;
  s.nest = schedule_map_nest(s.ir, s.levels, s.level_of_value, false);
  // Int32 sums of 8-bit products are contractions on the vector targets (byte quads or int16
  // pairs); the portable target keeps their plain loop nest.
  std::optional<Contraction> c =
      find_contraction(s.ir, s.levels, s.level_of_value, target.isa != CpuIsa::Portable);
  if (c) {
    s.contraction = schedule_contraction(s.ir, *c, target);
    bool reduce_first = false;
    for (size_t k = 0; k < s.levels.size(); ++k)
      reduce_first = reduce_first || (s.levels[k] < 0 && s.ir.body.stmts[k].kind == KOp::Reduce);
    s.contraction->pack_functions = s.contraction->merged_outer_vars.empty() && !reduce_first;
    // Its nest runs only where scratch memory is refused (malloc failed): plain reductions,
    // whose loops compile in one version. With SIMD ones a matmul kernel took 0.03 s more to
    // compile (0.53 against 0.50 s with g++ 12, AVX-512).
    s.nest.simd_reductions = false;
    return s;
  }
  if (coalesce_reduction_loops(s.ir)) {
    s.levels = statement_levels(s.ir);
    s.level_of_value = levels_by_value(s.ir, s.levels);
    s.nest = schedule_map_nest(s.ir, s.levels, s.level_of_value, false);
  }
  s.in_bounds = extra_reads_in_bounds(s.ir);
  s.row_reuse = find_row_reuse(s.ir, s.levels);
  if (s.row_reuse) {
    s.reuse_nest = schedule_map_nest(s.ir, s.levels, s.level_of_value, true);
    return s;
  }
  // Float16 strips in a plain SIMD innermost loop on the vector targets (F16C's conversions).
  if (target.isa != CpuIsa::Portable && s.nest.strips.empty() && !s.nest.chunks &&
      (s.nest.single_simd || s.nest.inner_simd))
    s.nest.half = find_half_strips(s.ir, s.levels);
  MapNest plain = schedule_map_nest(s.ir, s.levels, s.level_of_value, false, false);
  if (plain.strips != s.nest.strips) {
    s.narrow_nest = std::move(plain);
    if (!s.in_bounds.empty() && flattens(s)) {
      MapNest flat = s.nest;
      flat.flat = true;
      flat.collapse = 1;
      s.flat_nest = flat;
    }
  }
  return s;
}

std::string describe_schedule(const CpuSchedule& s, const CpuTarget& target) {
  if (!s.in_bounds.empty())
    return "loop nest; extra reads and reindex guards without bounds tests where every "
           "index's range over the loops fits (tested once per launch)";
  if (!s.contraction) return {};
  const ContractionSchedule& c = *s.contraction;
  const bool two_tiles = !(c.narrow == c.wide);
  const size_t merged = c.merged_outer_vars.size();
  return std::string("contraction, packed A and B panels, ") + target.name() + " " +
         tile_name(c.wide) +
         (two_tiles ? " (below " + std::to_string(kWideTileMinColumns) + " columns, unless " +
                          std::to_string(c.wide.nr) + "-wide panels are at most a quarter " +
                          "padding, " + tile_name(c.narrow) + ")"
                    : "") +
         (c.a_once ? "; A packed once per launch" : "") +
         (c.b_once ? "; B packed once per launch" : "") +
         (c.bf16_pairs ? "; bfloat16 pairs multiplied by vdpbf16ps" : "") +
         (c.int8_quads ? "; byte quads multiplied by vpdpbusd into Int32 sums" : "") +
         (c.int16_pairs ? "; int16 pairs multiplied by vpmaddwd into Int32 sums" : "") +
         (c.direct ? "; B read from a table of its input's windows where the rows allow" : "") +
         (c.direct_steps ? "; B packed once for every tap over the widened reduction" : "") +
         (merged == 0   ? ""
          : merged == 1 ? "; columns span two output loops"
                        : "; columns span " + std::to_string(merged + 1) + " output loops");
}

std::string dump_schedule(const CpuSchedule& s, const CpuTarget& target) {
  std::string out = "schedule (" + std::string(target.name()) + "): ";
  const std::string line = describe_schedule(s, target);
  out += line.empty() ? (s.ir.kind == KernelKind::Map ? "loop nest" : "scatter") : line;
  out += "\n";
  if (s.ir.kind != KernelKind::Map)
    out += s.scatter.split_loop < 0
               ? "  accumulated in order on one thread\n"
               : "  split between threads along i" +
                     std::to_string(s.ir.loops[size_t(s.scatter.split_loop)].var) +
                     (s.scatter.simd ? ", its lanes SIMD\n" : "\n");
  if (s.contraction) {
    const ContractionSchedule& c = *s.contraction;
    out +=
        "  rows i" + std::to_string(c.match.i_var) + ", columns i" + std::to_string(c.match.j_var);
    for (int v : c.merged_outer_vars) out += " with i" + std::to_string(v);
    out += ", reduction v" + std::to_string(s.ir.body.stmts[c.match.reduce_index].id) +
           (c.pack_functions ? "; operands packed by shared functions" : "") +
           (c.flat_columns ? "; short merged rows packed by column tables where contiguous" : "") +
           "\n";
    if (c.direct)
      out += "  direct: rows i" + std::to_string(c.direct->row_var) +
             (c.direct->row_flipped ? " - i" : " + i") + std::to_string(c.direct->row_tap) +
             ", columns i" + std::to_string(c.direct->col_var) +
             (c.direct->col_flipped ? " - i" : " + i") + std::to_string(c.direct->col_tap) + "\n";
    if (c.direct_steps) {
      out += "  direct steps:";
      for (const TapPair& p : c.direct_steps->pairs)
        out += " i" + std::to_string(p.step_var) + (p.flipped ? " - i" : " + i") +
               std::to_string(p.outer_var);
      out += "\n";
    }
  }
  if (!s.in_bounds.empty()) {
    out += "  unchecked when";
    for (const auto& [extent, limit] : s.in_bounds.conditions)
      out += " " + ix_to_string(*extent) + " <= " + ix_to_string(*limit);
    out += ":";
    for (const std::string& r : s.in_bounds.unchecked_reads) out += " " + r;
    if (s.in_bounds.true_guards)
      out += " " + std::to_string(s.in_bounds.true_guards) + " guard(s) always true";
    out += "\n";
  }
  if (s.ir.kind == KernelKind::Map && !s.ir.loops.empty())
    out += std::string(s.contraction ? "  without scratch memory, loop nest: " : "  loop nest: ") +
           describe_map_nest(s.ir, s.nest) + "\n";
  if (s.narrow_nest)
    out +=
        "  below " + std::to_string(kMinWindowStripColumns) +
        " columns (window reductions not strip-mined): " + describe_map_nest(s.ir, *s.narrow_nest) +
        "\n";
  if (s.flat_nest)
    out += "  there, without bounds tests and up to a strip of outputs per i" +
           std::to_string(s.ir.loops[0].var) + ": the loops after it as one strip through tables\n";
  if (s.row_reuse) {
    const RowReuse& r = *s.row_reuse;
    out += "  row reuse: v" + std::to_string(r.outer_value) + " read back from the row v" +
           std::to_string(r.reduce_id) + " wrote (its v" + std::to_string(r.inner_value) + "), " +
           (r.in_output ? "in the output row" : "in a scratch row per thread") +
           "; nest then: " + describe_map_nest(s.ir, s.reuse_nest) + "\n";
  }
  for (size_t k = 0; k < s.levels.size(); ++k) {
    const int lv = s.levels[k];
    out += "  v" + std::to_string(s.ir.body.stmts[k].id) + ": " +
           (lv < 0 ? std::string("once per launch")
                   : "in loop i" + std::to_string(s.ir.loops[size_t(lv)].var)) +
           "\n";
  }
  return out + serialize_ir(s.ir);
}

}  // namespace metajit
