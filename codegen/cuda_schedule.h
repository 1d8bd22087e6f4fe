// The schedule pass of the CUDA backend (issue 28): which kernels the CUDA emitter writes for a
// fused group and which 16-byte paths they may take, decided before anything is printed and
// kept as data; the emitter (codegen/cuda_emitter.cc) prints it, METAJIT_LOG=debug logs it.
// The launcher still picks among the kernels from the launch's shapes (keys hold no shapes):
// these are the candidates and the conditions it tests.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/kernel_patterns.h"

namespace metajit {

// A buffer dim and a loop extent that are different expressions (dims are parameters of their
// own: keys never hold shapes) and must be equal at run time for a 16-byte path.
struct SameDim {
  IndexExprPtr dim, extent;
};

// A row reduction over one axis whose every read walks that axis contiguously: 16-byte loads
// where the launch's dims, row length (a multiple of 4) and alignment allow.
struct RowVec4 {
  struct Read {
    int buffer = -1;              // in order of first read
    std::optional<SameDim> same;  // its last dim against the axis' extent, where they differ
  };
  std::vector<Read> reads;
};

struct CudaSchedule {
  KernelIR ir;  // the scheduled copy: reduction invariants hoisted (map kernels)
  std::vector<int> levels, level_of_value;  // statement_levels / levels_by_value (map kernels)
  // Reductions outside every loop (a sum over everything): per-block partials, then one block.
  std::vector<size_t> globals;
  // Reductions inside the loops (top-level statement indices) and the deepest loop they sit in.
  std::vector<size_t> cooperative;
  int row_level = -1;
  // A sum of products whose operands each miss one output loop: tiles staged through shared
  // memory (no row or column kernel then).
  std::optional<Contraction> contraction;
  // The one cooperative reduction is over outer axes (a column sum): 32 columns per block.
  bool column = false;
  // One block per row, the row's reductions block reductions (cooperative, not a contraction),
  // and the reductions of that row kernel that may read 16 bytes at a time, by Reduce id.
  bool rows = false;
  std::map<int, RowVec4> row_vec4;
  // Element-wise kernels whose loads and stores all walk the flat index: four elements per
  // thread and access, where these dims match at run time (and the buffers are aligned).
  std::optional<std::vector<SameDim>> vec4;
  std::set<int> vec4_buffers;  // the buffers that path reads as vectors
};

CudaSchedule schedule_cuda_kernel(const KernelIR& ir);

// The kernels chosen and their conditions, then the scheduled IR: METAJIT_LOG=debug.
std::string dump_cuda_schedule(const CudaSchedule& s);

}  // namespace metajit
