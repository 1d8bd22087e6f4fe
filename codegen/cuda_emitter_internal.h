// The CUDA emitter's class, shared by the files that print its constructs (codegen/cuda_emitter.h
// is the interface: emit_cuda). It prints the schedule the pass chose (codegen/cuda_schedule.h):
//   cuda_emitter.cc       the module's frame: arguments, index decomposition, the launcher's start
//   cuda_map_kernels.cc   a map kernel's candidates and the launcher that picks one
//   cuda_reductions.cc    reductions over everything, per row and over columns
//   cuda_contraction.cc   the shared-memory tiled contraction
//   cuda_scatter.cc       scatter kernels
// Only those files include it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "codegen/c_family_emitter.h"
#include "codegen/cuda_emitter.h"
#include "codegen/cuda_schedule.h"
#include "codegen/kernel_ir.h"
#include "codegen/kernel_patterns.h"

namespace metajit {

class CudaEmitter : public CFamilyEmitter {
 public:
  CudaEmitter(const KernelIR& ir, CudaTarget target)
      : CFamilyEmitter(ir, Dialect::Cuda),
        target_(target),
        schedule_(schedule_cuda_kernel(ir)),
        sched_(schedule_.ir),
        levels_(schedule_.levels) {}
  // The module's whole source.
  std::string run();

 private:
  static constexpr int kThreads = 256;
  static constexpr int kPartials = 1024;  // per-block partials of a reduction over everything
  static constexpr int64_t kColScratch = 1 << 18;  // partial column sums of tall column reductions

  // cuda_emitter.cc: the frame every kernel shares.
  void args_struct();
  void kernel_open(const std::string& name, const std::string& extra = "");
  void decompose(const std::vector<const KLoop*>& loops, const std::string& flat, int d,
                 const std::string& type = "i64");
  std::string product(const std::vector<const KLoop*>& loops) const;
  static std::vector<const KLoop*> loop_ptrs(const std::vector<KLoop>& loops, size_t begin,
                                             size_t end);
  std::string store() const;
  // A buffer element's C type: CUDA's __half / __nv_bfloat16 for the half types, else ctype.
  // Their values are read and written through loaded() and stored(), CUDA's explicit
  // conversions (codegen/cuda_narrow_prelude.h), never the types' operators.
  static std::string element_ctype(DType t);
  static std::string loaded(DType t, const std::string& element);
  static std::string stored(DType t, const std::string& value);
  // The name of extra output `k` (codegen/output_merging.h): out1, out2, ...
  static std::string extra_out(size_t k) { return "out" + std::to_string(k + 1); }
  void prologue(size_t upto, int d);
  std::string same_dims(const std::vector<SameDim>& same) const;
  void stmt(const KStmt& st, int depth) override;
  void kernel_body_open();
  void launcher_open();

  // cuda_map_kernels.cc: a map kernel's candidates and the launcher.
  void map_kernels();
  void vec4_kernel();
  void generic_kernel();
  void launcher();
  void launch_contraction(const Contraction& c);
  void launch_columns();
  void launch_rows();
  void launch_vec4();

  // cuda_reductions.cc: reductions over everything, per row, over columns.
  void reduce_functor(const KStmt& st);
  void strided_reduce(const KStmt& st, const std::string& acc, const std::string& first,
                      const std::string& step, int d);
  void global_reduce_kernels(size_t s);
  void row_kernel(int row_level);
  void row_reduce_vec4(const KStmt& st, const std::string& acc, const RowVec4& vec4, int d);
  void column_kernels(size_t r);

  // cuda_contraction.cc: the tiled contraction.
  void contraction_kernels(const Contraction& c);
  void stage_operand(const std::string& count, const std::string& split, const std::string& inside,
                     const std::string& var, const std::string& var_value,
                     const std::vector<const KLoop*>& red, const KBlock& body,
                     const std::vector<size_t>& outer, const std::vector<size_t>& stmts, int value,
                     const std::string& target);

  // cuda_scatter.cc: scatters by atomics.
  void atomic_combine();
  void subword_atomic_combine(ReduceOp op, DType t);
  void scatter_kernels();

  // State of the kernel being printed.
  CudaTarget target_;
  const CudaSchedule schedule_;  // what the schedule pass decided (codegen/cuda_schedule.h)
  const KernelIR& sched_;        // its scheduled IR: invariants hoisted out of reductions
  const std::vector<int>& levels_;
  std::map<int, std::string> lane_loads_;  // buffer -> its lane inside vec4_kernel()
  int uid_ = 0;
};

}  // namespace metajit
