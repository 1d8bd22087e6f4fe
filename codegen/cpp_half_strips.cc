// The C++ emitter's float16 strips (MapNest::half, codegen/half_strips.h): the innermost loop
// strip by strip, each strip's float16 reads widened into float arrays before its SIMD loop and
// its float16 outputs narrowed from float arrays after it (codegen/cpp_narrow_prelude.h
// mj_widen_f16 / mj_narrow_f16).
#include <string>
#include <vector>

#include "codegen/cpp_emitter_internal.h"

namespace metajit {

// The innermost loop (of `ir`, at depth `d`, inside the parallel loop or as it) in strips of
// kHalfStrip: a canonical loop over the strips, so that it can be the parallel loop itself.
void CppEmitter::half_strip_inner(const KernelIR& ir, const HalfStrips& h, int d) {
  const int k = int(ir.loops.size());
  const KLoop& l = ir.loops.back();
  const std::string i = "i" + std::to_string(l.var), ext = ix(*l.extent);
  const std::string S = std::to_string(kHalfStrip);
  std::vector<IndexExprPtr> out_idx;
  for (const KLoop& o : ir.loops) out_idx.push_back(ix_var(o.var));
  line(d, "for (i64 mj_hb = 0; mj_hb < (" + ext + " + " + S + " - 1) / " + S + "; ++mj_hb) {");
  line(d + 1, "const i64 jb = mj_hb * " + S + ";");
  line(d + 1, "const i64 jn = (" + ext + " - jb) < " + S + " ? (" + ext + " - jb) : " + S + ";");
  // The strip's first element: the offsets below are the loads' and outputs' at i = jb.
  auto at_strip_start = [&](const std::string& call) {
    line(d + 1, "{");
    line(d + 2, "const i64 " + i + " = jb;");
    line(d + 2, call);
    line(d + 1, "}");
  };
  for (int id : h.loads) {
    const KStmt* st = nullptr;
    for (const KStmt& x : ir.body.stmts)
      if (x.id == id) st = &x;
    const std::string name = "in" + std::to_string(st->buffer), w = "mj_w" + std::to_string(id);
    line(d + 1, "float " + w + "[" + S + "];");
    at_strip_start("mj_widen_f16(" + name + " + (" + offset(name, st->index) + "), " + w +
                   ", jn);");
    widened_loads_[id] = w + "[t]";
  }
  if (h.output) line(d + 1, "float mj_n0[" + S + "];");
  for (size_t e : h.extra_outputs)
    line(d + 1, "float mj_n" + std::to_string(e + 1) + "[" + S + "];");
  line(d + 1, "#pragma omp simd");
  line(d + 1, "for (i64 t = 0; t < jn; ++t) {");
  line(d + 2, "const i64 " + i + " = jb + t;");
  simd_var_ = l.var;
  for (size_t s = 0; s < ir.body.stmts.size(); ++s)
    if (sched_.levels[s] == k - 1) stmt(ir.body.stmts[s], d + 2);
  simd_var_ = -1;
  line(d + 2, map_store(out_idx, ir.body.result, &h));
  line(d + 1, "}");
  const std::string at = offset("out", out_idx);
  if (h.output) at_strip_start("mj_narrow_f16(mj_n0, out + (" + at + "), jn);");
  for (size_t e : h.extra_outputs) {
    const std::string n = std::to_string(e + 1);
    at_strip_start("mj_narrow_f16(mj_n" + n + ", out" + n + " + (" + at + "), jn);");
  }
  line(d, "}");
  widened_loads_.clear();
}

}  // namespace metajit
