// eval / plan / explain: the public entry points, on top of the pipeline driver, the kernel
// library and the executor (to_dot: api/dot_graph.cc; METAJIT_DUMP_DOT: api/dot_dump.cc).
#include <metajit/error.h>
#include <metajit/eval.h>

#include <mutex>

#include "api/dot_dump.h"
#include "api/dot_graph.h"
#include "api/jit_trace.h"
#include "api/kept_values.h"
#include "api/program_cache.h"
#include "base/log.h"
#include "codegen/pipeline.h"
#include "runtime/executor.h"
#include "runtime/kernel_library.h"

namespace metajit {
namespace {

// The current device, checked: CUDA requested where it cannot run is an error that says why.
Device usable_device(const char* what) {
  const Device d = device();
  if (d == Device::CUDA && !cuda_available())
    throw CudaError(std::string(what) +
                    ": the current device is CUDA (set_device or "
                    "METAJIT_DEVICE=cuda) but CUDA cannot be used here: " +
                    cuda_unavailable_reason() + "; use the CPU with set_device(Device::CPU)");
  return d;
}

// Stores what the evaluation of `nodes` (the requested ones, then `kept`) computed: requested
// values drop their graph; kept ones (api/kept_values.h) keep what grad() needs.
void realize_all(const std::vector<NodePtr>& nodes, size_t requested,
                 std::vector<BufferPtr>& results) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i < requested)
      realize(*nodes[i], std::move(results[i]));
    else
      keep_value(*nodes[i], std::move(results[i]));
  }
}

}  // namespace

void eval(const std::vector<Var>& vars) {
  std::lock_guard<std::recursive_mutex> lock(graph_mutex());
  size_t requested = 0;
  std::vector<NodePtr> nodes = nodes_to_compute(vars, "eval", true, requested);
  if (nodes.empty()) return;
  if (jit_trace_depth() > 0) detail::check_not_traced_argument(nodes, "eval");
  const Device dev = usable_device("eval");
  // A structure seen before runs its remembered program (program_cache.h). With debug logging
  // every evaluation goes the whole way, so that the log shows each pass and lookup.
  const bool remember = !log_enabled(LogLevel::Debug);
  // Buffers reused by this thread's evaluations (no allocation on the fast path); the leaves
  // are dropped before returning, so that no buffer is kept alive by them.
  thread_local std::string fingerprint;
  thread_local std::vector<NodePtr> leaves, program_leaves;
  struct DropLeaves {
    ~DropLeaves() {
      leaves.clear();
      program_leaves.clear();
    }
  } drop_leaves;
  if (remember) {
    evaluation_fingerprint(nodes, dev, fingerprint, leaves);
    if (std::shared_ptr<const CachedProgram> cached = find_program(fingerprint)) {
      // The kept program has no plan to draw: a dump plans again (to_dot).
      if (dumping_dot()) dump_dot([&] { return to_dot(vars); });
      count_memory_hits(cached->program.handles.size());
      for (int32_t i : cached->leaf_of) program_leaves.push_back(leaves[size_t(i)]);
      std::vector<BufferPtr> results = run_program_on(cached->program, program_leaves);
      realize_all(nodes, requested, results);
      return;
    }
  }
  PipelinePlan p = build_pipeline(nodes);
  if (dumping_dot()) dump_dot([&] { return plan_to_dot(p, vars, nodes, dev); });
  std::vector<const KernelIR*> irs;
  for (const LoweredKernel& k : p.kernels) irs.push_back(&k.ir);
  std::vector<KernelHandle> handles = obtain_kernels(irs, dev);
  auto cached = std::make_shared<CachedProgram>();
  cached->program = make_program(p.graph, p.fusion, p.kernels, handles, dev);
  std::vector<BufferPtr> results = run_program_on(cached->program, p.graph.leaves);
  if (remember) {
    // Where each of the program's leaves is among the fingerprint's.
    bool found_all = true;
    for (const NodePtr& leaf : p.graph.leaves) {
      size_t j = 0;
      while (j < leaves.size() && leaves[j] != leaf) ++j;
      found_all = found_all && j < leaves.size();
      cached->leaf_of.push_back(int32_t(j));
    }
    if (found_all) remember_program(fingerprint, std::move(cached));
  }
  realize_all(nodes, requested, results);
}

std::vector<KernelInfo> plan(const std::vector<Var>& vars) {
  return plan(vars, device());
}

std::vector<KernelInfo> plan(const std::vector<Var>& vars, Device target) {
  std::lock_guard<std::recursive_mutex> lock(graph_mutex());
  size_t requested = 0;
  std::vector<NodePtr> nodes = nodes_to_compute(vars, "plan", false, requested);
  std::vector<KernelInfo> out;
  if (nodes.empty()) return out;
  PipelinePlan p = build_pipeline(nodes);
  for (const LoweredKernel& k : p.kernels)
    out.push_back({key_of(k.ir, target), k.ir.ops, kernel_source(k.ir, target)});
  return out;
}

std::string explain(const std::vector<Var>& vars) {
  std::lock_guard<std::recursive_mutex> lock(graph_mutex());
  size_t requested = 0;
  std::vector<NodePtr> nodes = nodes_to_compute(vars, "explain", false, requested);
  if (nodes.empty()) return "nothing to compute: every Var is already evaluated\n";
  PipelinePlan p = build_pipeline(nodes);
  std::string s = std::to_string(p.kernels.size()) + " kernel(s) for " +
                  std::to_string(p.graph.nodes.size()) + " graph node(s)\n" +
                  dump_plan(p.graph, p.fusion);
  if (nodes.size() > requested) {
    s += "also stored, needed again after this evaluation (README \"Lazy evaluation\"):";
    for (size_t i = requested; i < nodes.size(); ++i)
      s += " %" + std::to_string(p.graph.outputs[i]);
    s += "\n";
  }
  // The target once (it is the same for every kernel of a device; issue 26: it was printed
  // with its tile on every kernel), each kernel's schedule under it: data from the backend's
  // schedule pass (codegen/cpu_schedule.h), no source generated.
  std::string target;
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    const KernelScheduleLine line = kernel_schedule(p.kernels[k].ir, device());
    if (!line.target.empty() && line.target != target)
      s += "target: " + (target = line.target) + "\n";
    s += "kernel " + std::to_string(k) + " key " + key_of(p.kernels[k].ir, device()) + "\n";
    if (!line.schedule.empty()) s += "  schedule: " + line.schedule + "\n";
  }
  return s;
}

}  // namespace metajit
