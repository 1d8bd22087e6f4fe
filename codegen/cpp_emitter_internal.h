// The C++ emitter's class, shared by the files that print its constructs (codegen/cpp_emitter.h
// is the interface: emit_cpp). It prints the schedule the pass chose (codegen/cpu_schedule.h):
//   cpp_emitter.cc        the kernel's frame and single statements
//   cpp_reductions.cc     Reduce statements
//   cpp_map_kernel.cc     map kernels' loop nests
//   cpp_chunked_loops.cc  an innermost loop in division chunks or guard sub-ranges
//   cpp_half_strips.cc    an innermost loop in float16 strips
//   cpp_contraction.cc    the blocked contraction
//   cpp_packing.cc        a contraction's operands packed into panels
//   cpp_scatter.cc        scatter kernels
// Only those files include it.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "codegen/c_family_emitter.h"
#include "codegen/cpu_schedule.h"
#include "codegen/cpu_target.h"
#include "codegen/division_chunks.h"
#include "codegen/guard_intervals.h"
#include "codegen/kernel_ir.h"
#include "codegen/kernel_patterns.h"
#include "codegen/map_schedule.h"

namespace metajit {

class CppEmitter : public CFamilyEmitter {
 public:
  CppEmitter(const KernelIR& ir, const CpuTarget& target)
      : CFamilyEmitter(ir, Dialect::Cpp), target_(target), tile_(target.contraction_tile()) {}
  // The kernel's whole source.
  std::string run();

 private:
  // cpp_emitter.cc: the kernel's frame (its arguments, strides and scalar locals), single
  // statements, shared index-expression helpers.
  void collect_scalars(const KBlock& b);
  void frame_locals(bool outputs);
  void stmt(const KStmt& st, int depth) override;
  static const KStmt* speculative_load(const KStmt& st);
  static void speculative_buffers(const KBlock& b, std::set<int>& out);
  std::string work(const std::vector<KLoop>& loops);
  std::string map_store(const std::vector<IndexExprPtr>& idx, int result,
                        const HalfStrips* half = nullptr, bool one_at_a_time = false) const;
  static void collect_vars(const IndexExpr& e, std::set<int>& out);
  static IndexExprPtr conjunction(const std::vector<IndexExprPtr>& terms);
  static void split_conjuncts(const IndexExprPtr& cond, const std::set<int>& vars,
                              std::vector<IndexExprPtr>& fixed, std::vector<IndexExprPtr>& varying);

  // cpp_reductions.cc: Reduce statements: OpenMP (SIMD) reductions, an innermost loop in guard
  // sub-ranges.
  static std::string reduction_clause(ReduceOp op, DType t, const std::string& acc);
  void reduce_stmt(const KStmt& st, int depth) override { reduce_stmt(st, depth, false); }
  void reduce_stmt(const KStmt& st, int depth, bool parallel);
  // The guards' values in one sub-range of open_sub_ranges.
  struct SubRange {
    std::map<int, IndexExprPtr> conds;          // guard id -> its test there
    std::map<int, std::string> value;           // guard id -> the local holding its value
    bool all_constant = true;                   // no test left that reads the loop variable
    std::map<int, IndexExprPtr> element_tests;  // guard id -> its test of each element
  };
  bool custom_innermost_reduce(const KStmt& st, const std::string& simd, int d) override;
  bool partitioned_reduce(const KStmt& st, const std::string& simd, int d);
  void sub_range_reduce(const KStmt& st, const std::vector<GuardInterval>& gs, const SubRange& r,
                        const std::string& simd, const std::string& a, const std::string& b,
                        const std::string& to, int d);
  static bool stmts_read_var(const std::vector<KStmt>& stmts, int var);
  // Vector width from which a passed sub-range of partitioned_reduce is rounded up to whole
  // vectors: a row's tail of up to 15 elements runs scalar (libmvec's scalar exp per element),
  // which cost more than testing the guard in one more vector. The GPT's causal logsumexp
  // [16, 4, 64, 64], alone on 2 threads: AVX-512 197 us unpartitioned, 214 partitioned, 170
  // rounded; AVX2 237, 147, 163 (scratch copies of the kernel).
  static constexpr int kRoundedSubRangeFloats = 16;
  // Loop variable numbers for partitioned_reduce's sub-range locals (beside kChunkVar's).
  static constexpr int kReduceSplitVar = (1 << 20) + (1 << 18);
  int reduce_split_var_ = kReduceSplitVar;
  void reduce_body_extra(const KStmt& st, int d) override;
  SubRange open_sub_ranges(const std::vector<GuardInterval>& gs, int var, const std::string& from,
                           const std::string& to, const std::string& a, const std::string& b,
                           int& next, int d);

  // cpp_map_kernel.cc: map kernels' loop nests (codegen/map_schedule.h): collapsed parallel loops,
  // row reuse, column reductions in strips.
  void map_kernel();
  void map_nest(const std::vector<IndexExprPtr>& out_idx, const std::string& store, int depth);
  void generic_map(const MapNest& n, const std::string& store, int base);
  void hoist_guard_tests(const KBlock& b, const std::set<int>& outer, int depth);
  // cpp_flat_strips.cc: a window-reduction kernel's loops after the first as one strip
  // through tables (CpuSchedule::flat_nest).
  std::string flat_strip_fits(const std::set<int>& lanes) const;
  static bool reads_any_var(const IndexExpr& e, const std::set<int>& vars);
  void flat_lane_vars(const std::set<int>& lanes, int d);
  void flat_nest(const MapNest& n, const std::vector<IndexExprPtr>& out_idx, int d);
  void flat_window_strip(const KStmt& st, const std::set<int>& lanes, int d);
  void strip_outputs(const std::set<size_t>& done, int d);
  std::string strip_accumulators(const KStmt& st, int d);
  // cpp_half_strips.cc: the innermost loop in float16 strips (MapNest::half).
  void half_strip_inner(const KernelIR& ir, const HalfStrips& h, int d);
  // Float16 loads widened for the strip being printed: load id -> the float array's element.
  std::map<int, std::string> widened_loads_;
  // Guard id -> its hoisted test's local and the rest of its test (null: nothing left).
  std::map<int, std::pair<std::string, IndexExprPtr>> guard_tests_;
  // Widest strip: 2048 floats (8 KiB) per row keeps the reads streaming; narrower strips
  // only to give every thread one (measured on a 4096x4096 column sum: 256 -> 4.2 GB/s,
  // 1024 -> 18 GB/s on a Xeon; 1024 -> 2048: 3.8 -> 3.6 ms on an EPYC).
  static constexpr int kStrip = 2048;
  static constexpr int kRowUnroll = 4;  // column_strip's combine is written for four
  void strip_mined_inner(const KernelIR& ir, const MapNest& n, int d, const std::string& store);
  void column_strip(const KStmt& st, const KLoop& inner, int d, bool window);
  void window_strip_step(const KStmt& st, const std::string& i, const std::string& acc,
                         const std::vector<IndexExprPtr>& tests,
                         const std::vector<KStmt>& unguarded, int d);

  // cpp_chunked_loops.cc: an innermost loop in division chunks or guard sub-ranges, and guard
  // fission.
  void division_chunked_inner(const KernelIR& ir, const std::vector<const KStmt*>& inner,
                              const DivisionChunks& dc, int d, const std::string& store);
  // Loop variable numbers for the chunks' quotients and remainders (beside kHoistedVar's).
  static constexpr int kChunkVar = (1 << 20) + (1 << 16);
  void partitioned_by_guards(const std::vector<KStmt>& stmts, const std::vector<GuardInterval>& gs,
                             const std::string& from, const std::string& to, int var, int first_var,
                             int d, const std::string& store);
  void hoist_row_tests(std::vector<GuardInterval>& gs, int& next, int d);
  template <class Pred>
  static void split_conjuncts_by(const IndexExprPtr& cond, const Pred& pred,
                                 std::vector<IndexExprPtr>& yes, std::vector<IndexExprPtr>& no);
  void simd_loop(const std::vector<KStmt>& stmts, const std::string& i, const std::string& from,
                 const std::string& to, int d, const std::string& store);
  static bool fissionable(const std::vector<KStmt>& stmts);
  void guard_fission(const std::vector<KStmt>& stmts, const std::map<int, std::string>& value,
                     const std::string& i, int d, const std::string& store);
  static constexpr int kFissionStrip = 64;
  void strip_loop(const std::vector<KStmt>& stmts, int result, const std::string& t,
                  const std::string& i, int d, bool simd);

  // cpp_contraction.cc: the blocked contraction: micro-kernels, cache blocks, the epilogue.
  // Output loops walked as one column dimension of a contraction
  // (ContractionSchedule::merged_outer_vars, codegen/cpu_schedule.h) and their extents.
  struct MergedColumns {
    std::vector<int> outer_vars;  // outermost first; the column loop j is inside the last
    std::vector<std::string> outer_extents;
    bool flat = false;  // ContractionSchedule::flat_columns
  };
  void merged_outer_vars(const MergedColumns& m, int d);
  std::string micro_kernel(const ContractionTile& t, const std::string& name, bool vector_types,
                           bool direct = false) const;
  std::string vector_type(int W) const;
  static std::string transpose_helper(int W);

  static std::string interleave_helper(int W, int rows);
  // One contraction being printed: its schedule and what its parts share.
  struct ContractionParts {
    const KernelIR& ir;
    const std::vector<int>& levels;
    const ContractionSchedule& cs;
    const KStmt& r;                     // the Reduce
    const std::string& store;           // the output element's store
    std::string iv{}, jv{};             // the row and column loop variables
    std::string ei{}, eji{};            // their extents (eji: the column loop's own)
    std::vector<const KLoop*> outer{};  // output loops outside the blocks (merged ones left out)
    std::optional<MergedColumns> merged{};
    std::vector<KStmt> a_pre{}, b_pre{};  // the operands' prologues
    // Each operand packed by one function (pack_function) that the packing once per launch
    // and the packing per block both call: where no reduction runs before the loops (level
    // -1), which a function would compute again, and the columns are not merged.
    bool pack_functions = false;
    // The tile being printed reads B from the window table (ContractionSchedule::direct,
    // cpp_direct_columns.cc): mj_g, mj_goff, the widened rows mj_gw.
    bool direct = false;
    // The tile being printed reads B from its panels packed once over the widened reduction
    // (ContractionSchedule::direct_steps): mj_bpre, mj_goff, mj_gk.
    bool direct_steps = false;
    const MergedColumns* merged_columns() const { return merged ? &*merged : nullptr; }
  };
  // cpp_step_groups.cc: panels of several reduction steps a word (ContractionSchedule::
  // steps_per_word): bfloat16 pairs and byte quads, their micro-kernels and grouping.
  static std::string micro_kernel_bf16(const ContractionTile& t, const std::string& name);
  static std::string micro_kernel_int(const ContractionTile& t, const std::string& name,
                                      bool quads);
  std::string group_call(const ContractionParts& p, int side, int pw, const std::string& at,
                         const std::string& steps) const;
  void group_once(const ContractionParts& p, int side, int pw);
  void group_block(const ContractionParts& p, int side, int pw, int d);
  void quad_column_sums(const ContractionParts& p, const ContractionTile& t, int d);
  static std::string group_div(const ContractionParts& p);
  static bool shifted_a(const ContractionParts& p);
  void contraction_kernel(const KernelIR& ir, const std::vector<int>& levels,
                          const ContractionSchedule& cs, const std::string& store);
  void two_tile_choice(const ContractionParts& p);
  void wide_tile(const ContractionParts& p);
  // cpp_direct_columns.cc: the direct tile (ContractionSchedule::direct).
  void direct_tile(const ContractionParts& p);
  void direct_table(const ContractionParts& p, int d);
  void direct_offsets(const ContractionParts& p, int d);
  std::string direct_plane(const ContractionParts& p);
  void direct_steps_tile(const ContractionParts& p);
  void direct_steps_sums(const ContractionParts& p, const ContractionTile& t);
  void direct_steps_epilogue(const ContractionParts& p);
  void direct_steps_table(const ContractionParts& p, const ContractionTile& t);
  std::string direct_steps_shift(const ContractionParts& p);
  void contraction_tile(const ContractionParts& p, const ContractionTile& t,
                        const std::string& micro);
  void contraction_pack_once(const ContractionParts& p, const ContractionTile& t);
  void contraction_block(const ContractionParts& p, const ContractionTile& t,
                         const std::string& micro, int d);
  void contraction_epilogue(const ContractionParts& p, int d);
  int parallel_blocks(const ContractionParts& p, const std::string& work);
  void reduction_blocks(const ContractionTile& t, int group = 1);
  void row_block_tiles(const ContractionTile& t);
  void block_bounds(const ContractionTile& t, int d);
  std::string pack_function(const ContractionParts& p, int side, int pw);
  std::string pack_call(const ContractionParts& p, int side, int pw, bool once);
  std::set<std::string> pack_functions_;  // the packing functions printed into helpers_

  // cpp_packing.cc: a contraction's operands packed into panels.
  void odometer_vars(const KStmt& r, size_t upto, int d);
  std::string odometer_advance(const KStmt& r);
  void interval_from_ends(const std::string& pass, const std::string& var, const std::string& base,
                          int d);
  template <class Body>
  void reduction_walk(const KStmt& r, const std::string& start, const std::string& count, int d,
                      const Body& body);
  void pack_operand(const KStmt& r, const std::vector<KStmt>& prologue,
                    const std::vector<size_t>& stmts, int value, const std::string& var, int pw,
                    const std::string& dst, const std::string& ps, const std::string& x0,
                    const std::string& n, const std::string& npad, const std::string& k0,
                    const std::string& kn, int d, const MergedColumns* merged = nullptr);
  // An operand's statements for one reduction step, its prologue (Contraction::a_outer) first:
  // once per packed element. Guards (reindex's bounds and overflow conditions) test mostly
  // values that are the same for every row of the panel: those tests run once per reduction
  // step (emitted here) and `body` tests only what depends on the row (conv2d: 2 of 8
  // comparisons). `full_body` has each guard reduced to its hoisted part, for rows that pass
  // the row-dependent tests, `span_tests`; `spannable` when each is an affine comparison of the
  // row (then a panel's first and last rows decide for all of it).
  struct GuardedBodies {
    std::vector<KStmt> body, full_body;
    std::vector<IndexExprPtr> span_tests;
    bool spannable = true;
  };
  GuardedBodies hoist_guard_tests(const KStmt& r, const std::vector<KStmt>& prologue,
                                  const std::vector<size_t>& stmts, int own,
                                  const std::set<int>& vary, int d);
  void hoist_guard_test(KStmt& st, KStmt& full, GuardedBodies& b, int own,
                        const std::set<int>& vary, int& hoisted, int d);
  // The row-dependent conjuncts of an operand's guards: those that read no reduction variable
  // (the same at every step) and those that do.
  struct RowTests {
    std::vector<IndexExprPtr> rows, steps;
  };
  static bool all_affine(const std::vector<IndexExprPtr>& tests, int own);
  static RowTests row_tests(const KStmt& r, const std::vector<size_t>& stmts, int own);
  void pack_merged_columns(const KStmt& r, const std::vector<KStmt>& prologue,
                           const std::vector<size_t>& stmts, int value, const std::string& var,
                           int pw, const std::string& dst, const std::string& ps,
                           const std::string& x0, const std::string& n, const std::string& npad,
                           const std::string& k0, const std::string& kn, int d,
                           const MergedColumns& merged);
  void pack_merged_pieces(const KStmt& r, const std::vector<KStmt>& prologue,
                          const std::vector<size_t>& stmts, int value, const std::string& var,
                          int pw, const std::string& dst, const std::string& ps,
                          const std::string& n, const std::string& npad, const std::string& k0,
                          const std::string& kn, int d, const MergedColumns& merged);
  void merged_piece_in_bounds(const GuardedBodies& b, int value, const std::string& var,
                              const std::string& n, int d);
  // Merged columns packed a panel at a time (ContractionSchedule::flat_columns): the column
  // variables from tables filled once per packing, the loads at their offset for column 0
  // plus the flat column, i<kFlatColumnVar>; up to kFlatColumns columns a packing, for rows
  // of at most one vector of the target (flat_columns_test): rows of 16 packed 9% faster so
  // on AVX-512 and 30% slower on AVX2 (conv2d 3x3 on 8x32x16x16, make bench), rows of 56
  // 15% slower on AVX-512, rows of 4 and 8 2-3x faster on both.
  static constexpr int kFlatColumnVar = (1 << 20) - 1;  // below kHoistedVar's
  static constexpr int kFlatColumns = 512;
  std::string flat_columns_test(const std::vector<KStmt>& stmts, const MergedColumns& merged,
                                int own);
  static std::vector<KStmt> flat_loads(const std::vector<KStmt>& stmts, const MergedColumns& merged,
                                       int own);
  void pack_merged_flat(const KStmt& r, const std::vector<KStmt>& prologue,
                        const std::vector<size_t>& stmts, int value, const std::string& var, int pw,
                        const std::string& dst, const std::string& ps, const std::string& x0,
                        const std::string& n, const std::string& npad, const std::string& k0,
                        const std::string& kn, int d, const MergedColumns& merged);
  void span_check(const std::string& flag, const std::vector<IndexExprPtr>& tests,
                  const std::string& var, const std::vector<std::string>& rows, int d);
  void pack_panels(const std::vector<KStmt>& body, const std::vector<KStmt>& full_body,
                   const std::vector<IndexExprPtr>& span_tests, int value, const std::string& var,
                   int pw, const std::string& dst, const std::string& ps, const std::string& x0,
                   const std::string& n, const std::string& npad, int d);
  void pack_rows_through_buffer(const std::vector<KStmt>& body, int value, const std::string& var,
                                int pw, const std::string& dst, const std::string& ps,
                                const std::string& x0, const std::string& n,
                                const std::string& npad, int d);
  static bool packs_along_reduction(const KStmt& r, const std::vector<KStmt>& prologue,
                                    const std::vector<size_t>& stmts, int own);
  void packed_element(const std::string& inside, const std::string& var, const std::string& row,
                      const std::vector<KStmt>& body, int value, const std::string& target, int d);
  static void flatten(const std::vector<KStmt>& stmts, std::vector<const KStmt*>& out);
  static bool packs_through_buffer(const KStmt& r, const std::vector<KStmt>& prologue,
                                   const std::vector<size_t>& stmts, int own,
                                   const RowTests& tests);
  static bool reads_along_rows(const std::vector<KStmt>& stmts, int own);
  void pack_along_reduction(const KStmt& r, const std::vector<KStmt>& prologue,
                            const std::vector<size_t>& stmts, int value, const std::string& var,
                            int pw, const std::string& dst, const std::string& ps,
                            const std::string& x0, const std::string& n, const std::string& npad,
                            const std::string& k0, const std::string& kn, int d);
  void guarded_step_loop(const std::vector<KStmt>& body, const std::vector<KStmt>& unguarded,
                         const std::vector<IndexExprPtr>& tests, int value, const std::string& red,
                         const std::string& k0, const std::string& from, const std::string& count,
                         const std::string& store, int d, bool interval = false);
  // Steps of the reduction packed per transposing tile: a B panel read along the reduction
  // (k^T in q.k^T, a head split's v^T) has its pw columns pw floats apart in the panel, and
  // g++ stored them one scalar at a time (55% of the attention product dP = dO.V^T's time,
  // perf annotate on AMD EPYC); so did an A panel of mr rows with a prologue (a LayerNorm),
  // and one of plain copies (interleaved_panel) still two scalar moves per element. Instead a
  // group of rows (W columns of B, or A's mr rows) goes row by row into a tile, in vectors with
  // its prologue, and W steps at a time of the tile go into the panel in registers:
  // mj_transpose (W x W) or mj_interleave (mr rows). Chunks of kTransposeSteps steps keep the
  // tile in L1.
  static constexpr int kTransposeSteps = 128;
  template <class Emit>
  void innermost_runs(const KStmt& r, const std::string& first, const std::string& count, int d,
                      const Emit& emit);
  void transposed_panel(const KStmt& r, const std::vector<KStmt>& body,
                        const std::vector<KStmt>& unguarded, const std::vector<IndexExprPtr>& tests,
                        int value, const std::string& var, int pw, const std::string& x0,
                        const std::string& n, const std::string& k0, const std::string& kn,
                        const std::string& red, int d);
  // Panels at most this many rows (A's mr) are packed all rows in one loop along the steps.
  static constexpr int kInterleavedPanelRows = 8;
  static bool only_copies(const std::vector<KStmt>& stmts);
  void interleaved_panel(const std::vector<KStmt>& body, const std::vector<IndexExprPtr>& tests,
                         int value, const std::string& var, int pw, const std::string& x0,
                         const std::string& n, const std::string& k0, const std::string& kn,
                         const std::string& red, int d);
  static std::vector<IndexExprPtr> step_span_tests(const std::vector<KStmt>& body, int red,
                                                   std::vector<KStmt>& unguarded);
  // Loop variable numbers for values hoisted out of packing loops: no kernel has this many loops.
  static constexpr int kHoistedVar = 1 << 20;
  // Rows packed per vector loop (rounded up to whole panels): four 16-float vectors.
  static constexpr int kPackRows = 64;
  static bool is_affine_comparison(const IndexExpr& e, int var);
  void pack_operand_once(const KStmt& r, const std::vector<KStmt>& pre,
                         const std::vector<size_t>& stmts, int value, const std::string& var,
                         int pw, int side, const MergedColumns* merged, const std::string& reused,
                         const std::string& call);

  // cpp_scatter.cc: scatter kernels (reindex_reduce).
  void scatter_kernel();
  std::vector<IndexExprPtr> valid_;  // scatter_kernel: the target test's per-lane conjuncts

  // State of the kernel being printed.
  CpuSchedule sched_;  // the schedule printed (schedule_cpu_kernel)
  // Whether the nest being printed runs its reductions under `omp simd` (MapNest).
  bool simd_reductions_ = true;
  // Set while printing the nest that reads a reused row back; the row's address when it is
  // the output row (empty: the thread's scratch row).
  const RowReuse* row_reuse_ = nullptr;
  std::string row_in_output_;
  CpuTarget target_;
  ContractionTile tile_;
  std::string helpers_;   // functions placed before metajit_kernel (the micro-kernel)
  std::string schedule_;  // the schedule chosen, when it is not the plain one (a comment)
};

}  // namespace metajit
