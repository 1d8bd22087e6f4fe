// The executor: runs the kernels of one plan in dependency order, allocating each stored
// value from the caching allocator and freeing intermediates as soon as their last reader
// has run (docs/design.md §8).
//
// A plan is first flattened into an ExecProgram (slots for the stored values, one step per
// kernel with its launch arguments copied in, the frees after each step), which run_program
// executes. eval() keeps one per graph structure (program_cache.h) and jit() one per traced
// signature, each run again on every repetition. A program is immutable once built: any number of
// threads may run the same program at once, each call with its own buffers.
#pragma once
#include <cstdint>
#include <vector>

#include "codegen/fusion_planner.h"
#include "codegen/graph.h"
#include "codegen/lowering.h"
#include "runtime/collective_runner.h"
#include "runtime/kernel_library.h"

namespace metajit {

struct ExecProgram {
  struct Step {
    KernelFn fn = nullptr;
    uint32_t inputs_begin = 0, inputs_end = 0;  // range of input_slots: the kernel's inputs
    uint32_t frees_begin = 0, frees_end = 0;    // range of free_slots: released after the step
    uint32_t params = 0, scalars = 0;           // offsets into params / scalars
    int32_t out_slot = -1;
    size_t out_bytes = 0;
    uint32_t extras_begin = 0, extras_end = 0;  // range of extra_outputs: more values written
    bool launch = true;  // false when the output is empty (numel 0): allocated, never launched
    uint64_t bytes_moved = 0;  // inputs' and output's sizes, for the profiler
  };
  struct StoredScalar {  // a requested 0-d constant, written on the host
    int32_t slot = -1;
    DType dtype = DType::Float32;
    double value = 0;
  };
  struct ExtraOutput {  // a further value a multi-output kernel writes (codegen/output_merging.h)
    int32_t slot = -1;
    size_t bytes = 0;
  };
  // A collective (OpKind::Collective) the runtime runs between kernels, through the runner the
  // distributed layer installs (runtime/collective_runner.h).
  // Started before kernel step `before_step` (at the end when == size), and complete before
  // step `wait_before_step`: the first kernel that reads its result, or a later host step's
  // wait point (they complete in order). In between, with collective_overlap(), it runs on the
  // collective thread (runtime/collective_queue.h) while the kernels run; without, at once.
  struct HostStep {
    uint32_t before_step = 0;
    uint32_t wait_before_step = 0;
    // Its input, or the values of a bucket (meta_ops/collective_nodes.h all_reduce_flat), which
    // are copied end to end into the result's buffer and reduced there.
    std::vector<int32_t> in_slots;
    std::vector<size_t> in_bytes;
    int32_t out_slot = -1;
    // The result takes over its input's buffer (no copy): the input is computed by a kernel for
    // this collective alone and is not requested.
    bool in_place = false;
    size_t out_bytes = 0;
    // Inputs that no kernel reads from its wait point on: back to the allocator then.
    std::vector<int32_t> frees;
    CollectiveCall call;
  };
  struct Output {
    int32_t slot = -1;  // the value's slot
    int32_t leaf = -1;  // >= 0: the output is Graph::leaves[leaf] itself (nothing computed)
  };

  Device device = Device::CPU;      // where the kernels run and every slot's buffer lives
  uint32_t num_slots = 0;           // stored values: leaves read, stored scalars, kernel outputs
  uint32_t max_args = 1;            // the most buffers one kernel takes (inputs and outputs)
  std::vector<int32_t> leaf_slots;  // per Graph::leaves entry: its slot, -1 when nothing reads it
  std::vector<StoredScalar> stored_scalars;
  std::vector<Step> steps;           // in dependency order
  std::vector<int32_t> input_slots;  // per step, its kernel's input buffers in slot order
  std::vector<int32_t> free_slots;
  std::vector<ExtraOutput> extra_outputs;     // per step, after its output, in the kernel's order
  std::vector<long long> params;              // every step's shape parameters, concatenated
  std::vector<double> scalars;                // every step's scalar arguments, concatenated
  std::vector<Output> outputs;                // one per Graph::outputs entry
  std::vector<HostStep> host_steps;           // by before_step, then in graph order
  std::vector<KernelHandle> handles;          // per step: key, origin, compile time (profiler)
  std::vector<std::vector<std::string>> ops;  // per step: the fused ops (profiler)
};

// Flattens `kernels[k]` (lowered from plan.groups[k]) with `handles[k]` into a program that
// runs on `device`.
ExecProgram make_program(const Graph& g, const FusionPlan& plan,
                         const std::vector<LoweredKernel>& kernels,
                         const std::vector<KernelHandle>& handles, Device device);

// Runs `p`. `leaf_data[i]` is the data of Graph::leaves[i] on p.device (the caller keeps it
// alive for the call; entries nothing reads may be null). On CUDA the kernels are launched in
// order on the default stream and waited for at the end; a kernel that fails to launch or
// faults is a CudaError naming its key and ops (or, for a fault found at the end, every kernel
// of the program: CUDA_LAUNCH_BLOCKING=1 pins it to one). Writes the buffer of each output into
// `outputs[k]`, except outputs that are leaves (Output::leaf >= 0), which are left untouched.
// Shared state it touches: the allocator (its own mutex), the stats counters (atomics), the
// profiler when it is on, and on CUDA one process-wide launch mutex held around each launch (a
// kernel's module-level device scratch must not interleave; cuda_launch_mutex in executor.cc).
void run_program(const ExecProgram& p, void* const* leaf_data, BufferPtr* outputs);

// run_program with `leaves` (moved to p.device first): the Graph::leaves of the graph `p` was
// made from, or of one with the same fingerprint (program_cache.h). One buffer per p.outputs.
std::vector<BufferPtr> run_program_on(const ExecProgram& p, const std::vector<NodePtr>& leaves);

}  // namespace metajit
