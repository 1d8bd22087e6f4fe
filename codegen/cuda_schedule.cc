#include "codegen/cuda_schedule.h"

#include <algorithm>

#include "codegen/loop_invariants.h"

namespace metajit {
namespace {

bool is_word(DType t) {
  return t == DType::Float32 || t == DType::Int32;
}

// A dim and a loop extent (a parameter or a constant, lowering.cc) that are not the same
// expression must be equal at run time: `same` gets that check.
void same_dim(const IndexExprPtr& dim, const IndexExprPtr& extent, std::vector<SameDim>& same) {
  if (ix_to_string(*dim) != ix_to_string(*extent)) same.push_back({dim, extent});
}

// Whether buffer `b` read at `index` (empty: the output's own index) is visited in the order of
// the flat loop index: the loop variables in order, over dims equal to the loops' extents, so
// that its offset is the flat index itself. Where a dim is not the extent's own parameter,
// `same` gets the condition the launcher checks.
bool walks_the_loops(const KernelIR& ir, const std::vector<IndexExprPtr>& index, const KBuffer& b,
                     std::vector<SameDim>& same) {
  const size_t n = ir.loops.size();
  if (n == 0 || b.dims.size() != n || (!index.empty() && index.size() != n)) return false;
  for (size_t k = 0; k < n; ++k) {
    if (!index.empty() && (index[k]->kind != IxKind::Var || index[k]->value != ir.loops[k].var))
      return false;
    same_dim(b.dims[k], ir.loops[k].extent, same);
  }
  return true;
}

// An element-wise kernel whose every per-element load and its store walk the same contiguous
// run of 4-byte values can move 16 bytes per access (float4/int4). One value per access does
// not keep enough bytes in flight: on an H200 a SELU over 2^28 floats ran at 0.74 of a device
// copy that way and at 1.00 with 16-byte accesses; unrolling the scalar loop changed nothing.
// Nothing when the kernel is not such; else the dims only the launch can check.
std::optional<std::vector<SameDim>> vec4_same_dims(const KernelIR& ir,
                                                   const std::vector<int>& levels) {
  std::vector<SameDim> same;
  if (!is_word(ir.output.dtype) || !walks_the_loops(ir, {}, ir.output, same)) return {};
  for (const KOutput& o : ir.extra_outputs)
    if (!is_word(o.buffer.dtype)) return {};
  for (size_t s = 0; s < ir.body.stmts.size(); ++s) {
    const KStmt& st = ir.body.stmts[s];
    switch (st.kind) {
      case KOp::Load: {
        if (levels[s] < 0) break;  // read once per thread, in the prologue
        const KBuffer& in = ir.inputs[size_t(st.buffer)];
        if (!is_word(in.dtype) || !walks_the_loops(ir, st.index, in, same)) return {};
        break;
      }
      case KOp::Scalar:
      case KOp::Iota:
      case KOp::Unary:
      case KOp::Binary:
      case KOp::Where:
      case KOp::Cast:
        break;
      default:
        return {};
    }
  }
  return same;
}

// A row reduction over one axis whose every read walks that axis contiguously (the axis is its
// last index, over a last dim equal to the axis' extent) can read 16 bytes at a time, as
// element-wise kernels do: one 4-byte load per thread and step kept a row sum of 16384^2
// floats at 0.56 of a device copy on an H200, where 16-byte loads reached 1.04 in a
// hand-written probe.
std::optional<RowVec4> row_vec4(const KernelIR& ir, const KStmt& st) {
  if (st.loops.size() != 1 || !st.body) return std::nullopt;
  const int r = st.loops[0].var;
  RowVec4 out;
  std::map<int, std::string> index_of;  // buffer -> its index, which must be one
  for (const KStmt& b : st.body->stmts) {
    if (b.kind == KOp::Reduce || b.kind == KOp::Guard) return std::nullopt;
    if (b.kind != KOp::Load) continue;
    const KBuffer& in = ir.inputs[size_t(b.buffer)];
    if (!is_word(in.dtype) || b.index.empty() || b.index.size() != in.dims.size())
      return std::nullopt;
    const IndexExpr& last = *b.index.back();
    if (last.kind != IxKind::Var || last.value != r) return std::nullopt;
    std::string key;
    for (size_t k = 0; k + 1 < b.index.size(); ++k) {
      if (ix_reads_var(*b.index[k], r)) return std::nullopt;
      key += ix_to_string(*b.index[k]) + ";";
    }
    auto [it, fresh] = index_of.emplace(b.buffer, key);
    if (!fresh && it->second != key) return std::nullopt;
    if (!fresh) continue;
    std::vector<SameDim> same;
    same_dim(in.dims.back(), st.loops[0].extent, same);
    out.reads.push_back({b.buffer, same.empty() ? std::nullopt : std::optional(same[0])});
  }
  if (out.reads.empty()) return std::nullopt;
  return out;
}

void map_schedule(CudaSchedule& s) {
  hoist_reduce_invariants(s.ir);
  s.levels = statement_levels(s.ir);
  s.level_of_value = levels_by_value(s.ir, s.levels);
  const KernelIR& ir = s.ir;
  const int k = int(ir.loops.size());
  for (size_t i = 0; i < ir.body.stmts.size(); ++i) {
    if (ir.body.stmts[i].kind != KOp::Reduce) continue;
    if (s.levels[i] < 0) {
      s.globals.push_back(i);
    } else {
      s.cooperative.push_back(i);
      s.row_level = std::max(s.row_level, s.levels[i]);
    }
  }
  s.vec4 = vec4_same_dims(ir, s.levels);
  if (s.vec4)
    for (size_t i = 0; i < ir.body.stmts.size(); ++i)
      if (ir.body.stmts[i].kind == KOp::Load && s.levels[i] >= 0)
        s.vec4_buffers.insert(ir.body.stmts[i].buffer);
  s.contraction = find_contraction(ir, s.levels, s.level_of_value);
  const bool mm = s.contraction.has_value();
  s.column = !mm && s.cooperative.size() == 1 && s.row_level == k - 1 &&
             is_column_reduction(ir.body.stmts[s.cooperative[0]], s.level_of_value,
                                 ir.loops[size_t(k - 1)].var, k - 1);
  s.rows = !s.cooperative.empty() && !mm;
  if (s.rows)
    for (size_t i : s.cooperative)
      if (std::optional<RowVec4> v = row_vec4(ir, ir.body.stmts[i]))
        s.row_vec4[ir.body.stmts[i].id] = std::move(*v);
}

// "p3 == p4, p5 == p6": the dims a 16-byte path needs equal.
std::string same_dims_text(const std::vector<SameDim>& same) {
  std::string out;
  for (const SameDim& d : same)
    out += (out.empty() ? "" : ", ") + ix_to_string(*d.dim) + " == " + ix_to_string(*d.extent);
  return out;
}

}  // namespace

CudaSchedule schedule_cuda_kernel(const KernelIR& ir) {
  CudaSchedule s;
  s.ir = ir;
  if (ir.kind == KernelKind::Map) map_schedule(s);
  return s;
}

std::string dump_cuda_schedule(const CudaSchedule& s) {
  const KernelIR& ir = s.ir;
  std::string out = "CUDA schedule: ";
  if (ir.kind != KernelKind::Map) return out + "fill, then an atomic scatter\n" + serialize_ir(ir);
  out += "one thread per element (32- and 64-bit indices)";
  if (s.vec4)
    out += "; 16-byte element-wise accesses (aligned buffers" +
           (s.vec4->empty() ? "" : ", " + same_dims_text(*s.vec4)) + ")";
  for (size_t i : s.globals) out += "; v" + std::to_string(ir.body.stmts[i].id) + " over all";
  if (s.contraction) out += "; shared-memory tiles 128x128 or 64x64";
  if (s.column) out += "; 32 columns per block";
  if (s.rows) out += "; a block per row (loops 0.." + std::to_string(s.row_level) + ")";
  for (const auto& [id, v] : s.row_vec4) {
    out += "; v" + std::to_string(id) + " reads 16 bytes of";
    for (const RowVec4::Read& r : v.reads)
      out +=
          " in" + std::to_string(r.buffer) + (r.same ? " (" + same_dims_text({*r.same}) + ")" : "");
  }
  out += "\n";
  for (size_t k = 0; k < s.levels.size(); ++k) {
    const int lv = s.levels[k];
    out += "  v" + std::to_string(ir.body.stmts[k].id) + ": " +
           (lv < 0 ? std::string("once per launch")
                   : "in loop i" + std::to_string(ir.loops[size_t(lv)].var)) +
           "\n";
  }
  return out + serialize_ir(ir);
}

}  // namespace metajit
