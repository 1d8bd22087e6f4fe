// The C++ emitter's two direct tiles (codegen/direct_columns.h), which read a convolution's B
// from a table filled once per launch instead of panels packed per block.
//
// ContractionSchedule::direct (a convolution, its input's gradient): the table G holds, per
// outer iteration and step of the reduction loops other than the two taps (and per phase
// tap % stride of a strided one), B's values over the (OH+KH-1) x (OW+KW-1) positions a window
// reaches (OH + ceil(KH/stride) - 1 rows of a phase): B evaluated with the taps at one end of
// their range and the output row and column running over the table. Step k of the reduction
// then reads row mj_goff[k] of it, one offset a step for every column: the columns are the
// output rows widened to mj_gw = OW+KW-1, so that a panel's columns are contiguous in G, and
// the epilogue drops the KW-1 extra ones per row.
//
// ContractionSchedule::direct_steps (a weight gradient, one product per tap): B's panels packed
// once over the reduction widened by the taps; tap (kh, kw) reads step k at row mj_goff[k] +
// its shift (direct_steps_table, direct_steps_shift), every tap inside each reduction block of
// a work item where A reads no tap (direct_steps_tile).
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "base/check.h"
#include "codegen/cpp_emitter_internal.h"

namespace metajit {
namespace {

// The reduction loops of `r` other than the two taps, in order.
std::vector<const KLoop*> other_steps(const KStmt& r, const DirectColumns& dc) {
  std::vector<const KLoop*> out;
  for (const KLoop& l : r.loops)
    if (l.var != dc.row_tap && l.var != dc.col_tap) out.push_back(&l);
  return out;
}

const KLoop& loop_of(const KStmt& r, int var) {
  for (const KLoop& l : r.loops)
    if (l.var == var) return l;
  METAJIT_UNREACHABLE("direct columns: no reduction loop i" + std::to_string(var));
}

// The flat index of loops `ls` (outermost first) as text: "0" for none.
std::string flat_index(const std::vector<const KLoop*>& ls,
                       const std::function<std::string(const KLoop&)>& extent) {
  std::string s;
  for (const KLoop* l : ls) {
    const std::string i = "i" + std::to_string(l->var);
    s = s.empty() ? i : "(" + s + ") * (" + extent(*l) + ") + " + i;
  }
  return s.empty() ? "0" : s;
}

}  // namespace

// G's offset of the current outer iteration's first plane (in a block of the parallel loop).
std::string CppEmitter::direct_plane(const ContractionParts& p) {
  const std::string outer = flat_index(p.outer, [&](const KLoop& l) { return ix(*l.extent); });
  return outer == "0" ? "0" : "(" + outer + ") * mj_gsteps * mj_gplane";
}

// The direct tile where the launch allows it: the table, the offsets, then the blocked schedule
// of the wide tile reading them (contraction_tile with ContractionParts::direct); mj_blocked
// when it ran. Not where the widened rows would waste more than an eighth of the columns
// (kernels of 3 columns on rows under 14), for a 1x1 kernel (G would be a copy of the input,
// and the packed panels are as good), or where G would pass 1 GiB.
void CppEmitter::direct_tile(const ContractionParts& p) {
  const DirectColumns& dc = *p.cs.direct;
  const ContractionTile& t = p.cs.wide;
  const KStmt& r = p.r;
  METAJIT_CHECK(p.merged && p.merged->outer_extents.size() == 1,
                "direct columns need one merged row loop");
  std::string outer_work = "1LL";
  for (const KLoop* l : p.outer) outer_work += " * (" + ix(*l->extent) + ")";
  std::string steps = "1LL";
  for (const KLoop* l : other_steps(r, dc)) steps += " * (" + ix(*l->extent) + ")";
  line(1, "{");
  line(2, "const i64 mj_eji = " + p.eji + ", mj_eo = " + p.merged->outer_extents[0] + ";");
  line(2, "const i64 mj_th = " + ix(*loop_of(r, dc.row_tap).extent) +
              ", mj_tw = " + ix(*loop_of(r, dc.col_tap).extent) + ";");
  // Strides: a plane per phase (tap % stride), each tap a row (tap / stride) further down.
  line(2, "const i64 mj_sh = " + std::to_string(dc.row_stride) +
              ", mj_sw = " + std::to_string(dc.col_stride) + ";");
  line(2,
       "const i64 mj_ph = mj_th < mj_sh ? mj_th : mj_sh, mj_pw = mj_tw < mj_sw ? mj_tw : mj_sw;");
  line(2,
       "const i64 mj_gh = mj_eo + (mj_th + mj_sh - 1) / mj_sh - 1, mj_gw = mj_eji + (mj_tw + "
       "mj_sw - 1) / mj_sw - 1, mj_gplane = mj_gh * mj_gw;");
  line(2, "const i64 mj_gsteps = " + steps + " * mj_ph * mj_pw, mj_gplanes = " + outer_work +
              " * mj_gsteps;");
  line(2, "const i64 mj_gk = " + work(r.loops) + ";");
  line(2, "float* mj_g = 0;");
  // Reads run past a plane's end by up to KW-1 + NR - 1 floats (the widened last row, the
  // panel's padding): the slack after the last one, zeroed; the offsets after it.
  line(2, "i64 mj_gn = 0, mj_gpad = 0;");
  line(2,
       "if (mj_gk > 0 && mj_eo > 0 && mj_eji > 0 && mj_th > 0 && mj_tw > 0 && (mj_th > 1 || "
       "mj_tw > 1) && (mj_gw - mj_eji) * " +
           std::to_string(kDirectMaxWaste) +
           " <= mj_gw && mj_gplanes <= (1LL << 28) / mj_gplane && mj_gk <= (1LL << 28)) {");
  line(3, "mj_gn = mj_gplanes * mj_gplane;");
  line(3, "mj_gpad = (mj_gn + mj_gw + " + std::to_string(t.nr) + " + 1) / 2 * 2;");
  line(3, "mj_g = mj_take(1, sizeof(float) * (mj_gpad + 2 * mj_gk));");
  line(2, "}");
  line(2, "if (mj_g) {");
  line(3, "for (i64 mj_t = mj_gn; mj_t < mj_gpad; ++mj_t) mj_g[mj_t] = 0;");
  line(3, "i64* const mj_goff = (i64*)(void*)(mj_g + mj_gpad);");
  direct_table(p, 3);
  direct_offsets(p, 3);
  ContractionParts q = p;
  q.direct = true;
  q.pack_functions = false;
  indent_ += 2;
  contraction_tile(q, t, "mj_micro_direct");
  indent_ -= 2;
  line(2, "}");
  line(2, "mj_give(1, mj_g);");
  line(1, "}");
}

// Fills G: each plane (an outer iteration and a step of the other reduction loops, in
// parallel) is B over the window positions, the taps at the end of their range from which the
// row and column variables reach every position (0, or KH-1 where B reads row - tap).
void CppEmitter::direct_table(const ContractionParts& p, int d) {
  const DirectColumns& dc = *p.cs.direct;
  const Contraction& c = p.cs.match;
  std::vector<const KLoop*> planes = p.outer;
  for (const KLoop* l : other_steps(p.r, dc)) planes.push_back(l);
  line(d, "#pragma omp parallel for schedule(static) if(mj_gn > 32768)");
  line(d, "for (i64 mj_gq = 0; mj_gq < mj_gplanes; ++mj_gq) {");
  line(d + 1, "i64 mj_rem = mj_gq;");
  line(d + 1, "const i64 mj_phc = mj_rem % mj_pw; mj_rem /= mj_pw;");
  line(d + 1, "const i64 mj_phr = mj_rem % mj_ph; mj_rem /= mj_ph;");
  for (size_t k = planes.size(); k-- > 0;) {
    const std::string i = "i" + std::to_string(planes[k]->var);
    if (k == 0) {
      line(d + 1, "const i64 " + i + " = mj_rem;");
    } else {
      const std::string e = ix(*planes[k]->extent);
      line(d + 1, "const i64 " + i + " = mj_rem % (" + e + "); mj_rem /= (" + e + ");");
    }
    line(d + 1, "(void)" + i + ";");
  }
  line(d + 1, "(void)mj_rem;");
  line(d + 1, "const i64 i" + std::to_string(dc.row_tap) + " = " +
                  (dc.row_flipped ? "mj_th - 1" : "mj_phr") + ";");
  line(d + 1, "const i64 i" + std::to_string(dc.col_tap) + " = " +
                  (dc.col_flipped ? "mj_tw - 1" : "mj_phc") + ";");
  // Positions no tap of the phase reaches are 0, never B: B may read outside its input there.
  line(d + 1, "const i64 mj_uend = mj_eo + (mj_th - 1 - mj_phr) / mj_sh;");
  line(d + 1, "const i64 mj_vend = mj_eji + (mj_tw - 1 - mj_phc) / mj_sw;");
  line(d + 1, "float* const mj_gp = mj_g + mj_gq * mj_gplane;");
  line(d + 1, "for (i64 mj_u = 0; mj_u < mj_gh; ++mj_u) {");
  line(d + 2, "const i64 i" + std::to_string(dc.row_var) + " = mj_u;");
  line(d + 2, "const i64 mj_vn = mj_u < mj_uend ? mj_vend : 0;");
  line(d + 2, "#pragma omp simd");
  line(d + 2, "for (i64 mj_v = 0; mj_v < mj_vn; ++mj_v) {");
  line(d + 3, "const i64 i" + std::to_string(dc.col_var) + " = mj_v;");
  for (size_t s : c.b_stmts) stmt(p.r.body->stmts[s], d + 3);
  line(d + 3, "mj_gp[mj_u * mj_gw + mj_v] = " + v(c.b) + ";");
  line(d + 2, "}");
  line(d + 2, "for (i64 mj_v = mj_vn; mj_v < mj_gw; ++mj_v) mj_gp[mj_u * mj_gw + mj_v] = 0;");
  line(d + 1, "}");
  line(d, "}");
}

// mj_goff[k]: where reduction step k's row of B starts in G, relative to the outer iteration's
// first plane and the panel's first column: its plane, then the taps' row and column (counted
// from the other end where B reads row - tap).
void CppEmitter::direct_offsets(const ContractionParts& p, int d) {
  const DirectColumns& dc = *p.cs.direct;
  const std::vector<const KLoop*> others = other_steps(p.r, dc);
  const std::string plane = flat_index(others, [&](const KLoop& l) { return ix(*l.extent); });
  const std::string kh = "i" + std::to_string(dc.row_tap), kw = "i" + std::to_string(dc.col_tap);
  // The loop variables walked as an odometer, no division a step (every extent is > 0 here:
  // mj_gk > 0).
  line(d, "{");
  line(d + 1, "i64 mj_rem = 0;");
  odometer_vars(p.r, p.r.loops.size(), d + 1);
  line(d + 1, "(void)mj_rem;");
  line(d, "for (i64 mj_kk = 0; mj_kk < mj_gk; ++mj_kk) {");
  // The phase and the row within it (the plane's other end where B reads row - tap).
  const std::string rh = dc.row_flipped ? "0" : kh + " % mj_sh",
                    qh = dc.row_flipped ? "mj_th - 1 - " + kh : kh + " / mj_sh",
                    rw = dc.col_flipped ? "0" : kw + " % mj_sw",
                    qw = dc.col_flipped ? "mj_tw - 1 - " + kw : kw + " / mj_sw";
  line(d + 1, "mj_goff[mj_kk] = (((" + plane + ") * mj_ph + " + rh + ") * mj_pw + " + rw +
                  ") * mj_gplane + (" + qh + ") * mj_gw + (" + qw + ");");
  line(d + 1, odometer_advance(p.r));
  line(d, "}");
  line(d, "}");
}

namespace {

// The reduction loops of `r` with each paired step loop widened by its outer loop's extent - 1
// (ContractionSchedule::direct_steps).
std::vector<KLoop> widened_steps(const KStmt& r, const KernelIR& ir, const DirectSteps& ds) {
  std::vector<KLoop> loops = r.loops;
  for (const TapPair& p : ds.pairs) {
    const auto outer = std::find_if(ir.loops.begin(), ir.loops.end(),
                                    [&](const KLoop& l) { return l.var == p.outer_var; });
    const auto step = std::find_if(loops.begin(), loops.end(),
                                   [&](const KLoop& l) { return l.var == p.step_var; });
    METAJIT_CHECK(outer != ir.loops.end() && step != loops.end(), "direct steps: loops");
    step->extent =
        ix_binary(IxKind::Add, step->extent, ix_binary(IxKind::Sub, outer->extent, ix_const(1)));
  }
  return loops;
}

const TapPair* pair_of_step(const DirectSteps& ds, int var) {
  for (const TapPair& p : ds.pairs)
    if (p.step_var == var) return &p;
  return nullptr;
}

}  // namespace

// B's panels packed once over the widened reduction (pack_operand_once with the paired outer
// loops at the end of their range from which the steps reach every position), and each real
// step's row in them, mj_goff (slot 3). Also for one outer iteration (a 1x1 kernel's weight
// gradient): the table is then B packed once, which the packed tile packs per row block.
void CppEmitter::direct_steps_table(const ContractionParts& p, const ContractionTile& t) {
  const DirectSteps& ds = *p.cs.direct_steps;
  const Contraction& c = p.cs.match;
  KStmt wide = p.r;
  wide.loops = widened_steps(p.r, p.ir, ds);
  line(1, "i64* mj_goff = 0;");
  line(1, "const i64 mj_gk = " + work(wide.loops) + ";");
  line(1, "{");
  line(2, "const i64 mj_k = mj_gk;");
  for (const TapPair& tp : ds.pairs) {
    const KLoop* o = nullptr;
    for (const KLoop* l : p.outer)
      if (l->var == tp.outer_var) o = l;
    METAJIT_CHECK(o, "direct steps: the outer loop");
    line(2, "const i64 i" + std::to_string(tp.outer_var) + " = " +
                (tp.flipped ? "(" + ix(*o->extent) + ") - 1" : std::string("0")) + ";");
  }
  ++indent_;
  pack_operand_once(wide, p.b_pre, c.b_stmts, c.b, p.jv, t.nr, 1, nullptr, "1", "");
  --indent_;
  line(1, "}");
  line(1, "if (mj_bpre) mj_goff = (i64*)(void*)mj_take(3, sizeof(i64) * (mj_k > 0 ? mj_k : 1));");
  // The real steps walked as an odometer, no division a step (mj_k > 0: every extent > 0).
  line(1, "if (mj_goff && mj_k > 0) {");
  line(2, "i64 mj_rem = 0;");
  odometer_vars(p.r, p.r.loops.size(), 2);
  line(2, "(void)mj_rem;");
  line(2, "for (i64 mj_kk = 0; mj_kk < mj_k; ++mj_kk) {");
  std::vector<const KLoop*> steps;
  for (const KLoop& l : wide.loops) steps.push_back(&l);
  const std::string flat = flat_index(steps, [&](const KLoop& l) { return ix(*l.extent); });
  line(3, "mj_goff[mj_kk] = (" + flat + ") * " + std::to_string(t.nr) + ";");
  line(3, odometer_advance(p.r));
  line(2, "}");
  line(1, "}");
}

// The steps tile (ContractionSchedule::direct_steps where A reads no outer loop): a work item
// is a block of rows, one panel of columns and a part of the reduction, and runs every outer
// iteration (a weight gradient's nine taps) inside each reduction block, so that the block's A
// panel and the taps' overlapping rows of B stay in L2 between taps. With the taps outside, as
// work items of their own, each streamed its rows of B from memory again. Where the blocks are
// fewer than the threads, the reduction is cut into parts; each part's sums go to a buffer of
// their own, added in order afterwards (direct_steps_epilogue), so the result does not depend
// on which thread ran which part (64 output channels on AVX-512: one row block, one column
// panel, two parts, where rows split in blocks of 6 and 5 tiles left one thread a tile
// behind). 8x64x56x56 by 64x3x3's weight gradient, the kernel alone: the taps inside 8.7 ->
// 7.9 ms, with the parts 6.9 (AVX-512); 14.1 -> 13.0 on AVX2. mj_blocked when it ran.
void CppEmitter::direct_steps_tile(const ContractionParts& p) {
  const ContractionTile& t = p.cs.wide;
  const Contraction& c = p.cs.match;
  const std::string MR = std::to_string(t.mr), NR = std::to_string(t.nr);
  line(1, "{");
  ++indent_;
  line(1, "const i64 mj_k = " + work(p.r.loops) + ";");
  line(1, "const i64 mj_ei = " + p.ei + ", mj_ej = " + p.eji + ";");
  reduction_blocks(t);
  std::string taps = "1LL";
  for (const KLoop* l : p.outer) taps += " * (" + ix(*l->extent) + ")";
  line(1, "const i64 mj_taps = " + taps + ", mj_nb = mj_ejp / " + NR + ", mj_nc = " + NR + ";");
  // Parts of the reduction: enough blocks for every thread, whole reduction blocks each.
  line(1, "const i64 mj_mb0 = (mj_eip + " + std::to_string(t.mc) + " - 1) / " +
              std::to_string(t.mc) + ", mj_nt = omp_get_max_threads();");
  line(1,
       "const i64 mj_kp = mj_mb0 * mj_nb >= mj_nt || mj_mb0 * mj_nb <= 0 ? 1 : (mj_nt + mj_mb0 * "
       "mj_nb - 1) / (mj_mb0 * mj_nb) < mj_nkb ? (mj_nt + mj_mb0 * mj_nb - 1) / (mj_mb0 * mj_nb) "
       ": mj_nkb;");
  line(1, "const i64 mj_mb = mj_row_blocks(mj_mb0, mj_nb * mj_kp, mj_eip / " + MR + ");");
  line(1, "const i64 mj_mc = mj_mb > 0 ? ((mj_eip / " + MR + " + mj_mb - 1) / mj_mb) * " + MR +
              " : 0;");
  row_block_tiles(t);
  line(1, "float* mj_apre = 0;");
  pack_operand_once(p.r, p.a_pre, c.a_stmts, c.a, p.iv, t.mr, 0, nullptr, "1", "");
  line(1, "float* mj_bpre = 0;");
  direct_steps_table(p, t);
  // Per work item and outer iteration, the sums of its block: mj_tc floats.
  line(1, "const i64 mj_tc = mj_mc * mj_nc;");
  line(1,
       "float* const mj_sums = !mj_apre || !mj_bpre || !mj_goff ? 0 : mj_take(2, sizeof(float) * "
       "(mj_mb * mj_nb * mj_kp * mj_taps * mj_tc > 0 ? mj_mb * mj_nb * mj_kp * mj_taps * mj_tc : "
       "1));");
  line(1, "if (mj_sums) {");
  line(2, "mj_blocked = true;");
  direct_steps_sums(p, t);
  direct_steps_epilogue(p);
  line(2, "mj_give(2, mj_sums);");
  line(1, "}");
  line(1, "mj_give(0, mj_apre);");
  line(1, "mj_give(1, mj_bpre);");
  line(1, "mj_give(3, (float*)(void*)mj_goff);");
  --indent_;
  line(1, "}");
}

// The work items of the steps tile: each reduction block's A panel, then every outer
// iteration's micro-kernels over it, into the item's own sums.
void CppEmitter::direct_steps_sums(const ContractionParts& p, const ContractionTile& t) {
  const std::string MR = std::to_string(t.mr), NR = std::to_string(t.nr);
  line(2, "#pragma omp parallel for collapse(3) schedule(static) if(" + work(p.ir.loops) +
              " * mj_k > 32768)");
  line(2, "for (i64 mj_bi = 0; mj_bi < mj_mb; ++mj_bi) {");
  line(3, "for (i64 mj_bj = 0; mj_bj < mj_nb; ++mj_bj) {");
  line(4, "for (i64 mj_q = 0; mj_q < mj_kp; ++mj_q) {");
  int d = 5;
  block_bounds(t, d);
  line(d, "(void)mj_jnp;");
  line(d, "const i64 mj_k0 = mj_q * mj_nkb / mj_kp * mj_kc;");
  line(d,
       "const i64 mj_k1 = (mj_q + 1) * mj_nkb / mj_kp * mj_kc < mj_k ? (mj_q + 1) * mj_nkb / "
       "mj_kp * mj_kc : mj_k;");
  line(d,
       "float* const mj_part = mj_sums + ((mj_bi * mj_nb + mj_bj) * mj_kp + mj_q) * mj_taps * "
       "mj_tc;");
  line(d, "for (i64 mj_pc = mj_k0; mj_pc < mj_k1; mj_pc += mj_kc) {");
  line(d + 1, "const i64 mj_kn = (mj_k1 - mj_pc) < mj_kc ? (mj_k1 - mj_pc) : mj_kc;");
  line(d + 1, "const float* const mj_a = mj_apre + (mj_i0 / " + MR + ") * mj_k * " + MR +
                  " + mj_pc * " + MR + ";");
  int e = d + 1;
  for (const KLoop* l : p.outer) {
    const std::string i = "i" + std::to_string(l->var);
    line(e++, "for (i64 " + i + " = 0; " + i + " < " + ix(*l->extent) + "; ++" + i + ") {");
  }
  const std::string outer = flat_index(p.outer, [&](const KLoop& l) { return ix(*l.extent); });
  line(e, "const float* const mj_gb = mj_bpre + (mj_j0 / " + NR + ") * mj_gk * " + NR + " + (" +
              direct_steps_shift(p) + ") * " + NR + ";");
  line(e, "float* const mj_cb = mj_part + (" + outer + ") * mj_tc;");
  line(e, "for (i64 mj_ir = 0; mj_ir < mj_inp; mj_ir += " + MR + ")");
  line(e + 1,
       "mj_micro_direct(mj_a + (mj_ir / " + MR + ") * mj_k * " + MR +
           ", mj_gb, mj_goff + mj_pc, mj_kn, mj_cb + mj_ir * mj_nc, mj_nc, mj_pc == mj_k0);");
  for (; e > d + 1; --e) line(e - 1, "}");
  line(d, "}");
  for (; d > 2; --d) line(d - 1, "}");
}

// After the work items: per outer iteration and block, the reduction's parts added in order
// into the first one, then the epilogue over it.
void CppEmitter::direct_steps_epilogue(const ContractionParts& p) {
  const ContractionTile& t = p.cs.wide;
  int d = parallel_blocks(p, work(p.ir.loops));
  block_bounds(t, d);
  line(d, "(void)mj_jnp;");
  const std::string outer = flat_index(p.outer, [&](const KLoop& l) { return ix(*l.extent); });
  line(d, "float* const mj_cb = mj_sums + (mj_bi * mj_nb + mj_bj) * mj_kp * mj_taps * mj_tc + (" +
              outer + ") * mj_tc;");
  line(d, "for (i64 mj_q = 1; mj_q < mj_kp && mj_k > 0; ++mj_q) {");
  line(d + 1, "const float* const mj_part = mj_cb + mj_q * mj_taps * mj_tc;");
  line(d + 1, "#pragma omp simd");
  line(d + 1, "for (i64 mj_t = 0; mj_t < mj_inp * mj_nc; ++mj_t) mj_cb[mj_t] += mj_part[mj_t];");
  line(d, "}");
  contraction_epilogue(p, d);
  for (; d > 2; --d) line(d - 1, "}");
}

// The outer iteration's shift in the widened reduction, in rows: each paired outer loop's
// position (from the other end where B reads step - outer) at its step loop's stride.
std::string CppEmitter::direct_steps_shift(const ContractionParts& p) {
  const DirectSteps& ds = *p.cs.direct_steps;
  const std::vector<KLoop> wide = widened_steps(p.r, p.ir, ds);
  std::string flat;
  for (const KLoop& l : wide) {
    const TapPair* tp = pair_of_step(ds, l.var);
    std::string at = "0";
    if (tp) {
      const std::string o = "i" + std::to_string(tp->outer_var);
      std::string extent;
      for (const KLoop* ol : p.outer)
        if (ol->var == tp->outer_var) extent = ix(*ol->extent);
      at = tp->flipped ? "(" + extent + ") - 1 - " + o : o;
    }
    flat = flat.empty() ? at : "(" + flat + ") * (" + ix(*l.extent) + ") + " + at;
  }
  return flat;
}

}  // namespace metajit
