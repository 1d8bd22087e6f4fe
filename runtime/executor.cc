#include "runtime/executor.h"

#include <metajit/error.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "base/dtype.h"
#include "runtime/cuda_runtime.h"
#include "runtime/host_steps.h"
#include "runtime/profiler.h"
#include "runtime/residency.h"
#include "runtime/runtime_stats.h"
#include "runtime/small_buffer.h"

namespace metajit {
namespace {

// A stored 0-d scalar (only when it is itself requested) is written on the host.
BufferPtr scalar_buffer(DType dtype, double v) {
  BufferPtr b = allocate_buffer(dtype_size(dtype));
  store_dtype_value(v, dtype, b->data());
  return b;
}

// A CUDA failure while steps [first, last) of `p` ran: which kernels, and how to pin it down.
std::string cuda_failure(const ExecProgram& p, size_t first, size_t last, const std::string& e) {
  auto describe = [&p](size_t k) {
    std::string ops;
    for (size_t j = 0; j < p.ops[k].size() && j < 4; ++j) ops += (j ? ", " : "") + p.ops[k][j];
    if (p.ops[k].size() > 4) ops += ", ...";
    return "kernel " + p.handles[k].key + " (" + ops + ")";
  };
  if (last == first + 1) return "CUDA: " + describe(first) + " failed: " + e;
  std::string out = "CUDA: a kernel failed while these ran: ";
  for (size_t k = first; k < last; ++k) out += (k > first ? "; " : "") + describe(k);
  return out + ": " + e + " (run with CUDA_LAUNCH_BLOCKING=1 to stop at the failing kernel)";
}

std::mutex& cuda_launch_mutex() {
  static std::mutex mu;
  return mu;
}

// Scratch slots of one run; plans of up to this many stored values need no malloc for them.
constexpr size_t kInlineSlots = 16;

}  // namespace

ExecProgram make_program(const Graph& g, const FusionPlan& plan,
                         const std::vector<LoweredKernel>& kernels,
                         const std::vector<KernelHandle>& handles, Device device) {
  ExecProgram p;
  p.device = device;
  const size_t n = g.nodes.size();
  std::vector<int32_t> slot(n, -1);
  std::vector<bool> is_output(n, false);
  for (int o : g.outputs) is_output[o] = true;
  p.leaf_slots.assign(g.leaves.size(), -1);
  for (size_t i = 0; i < n; ++i) {
    const GNode& node = g.nodes[i];
    if (node.kind == OpKind::Leaf) {
      slot[i] = int32_t(p.num_slots++);
      p.leaf_slots[node.leaf] = slot[i];
    } else if (node.kind == OpKind::Scalar && plan.stored[i]) {
      slot[i] = int32_t(p.num_slots++);
      p.stored_scalars.push_back({slot[i], node.dtype, node.scalar});
    }
  }
  for (const LoweredKernel& lk : kernels) {
    slot[lk.output_node] = int32_t(p.num_slots++);
    for (int e : lk.extra_output_nodes) slot[e] = int32_t(p.num_slots++);
  }
  for (size_t i = 0; i < n; ++i)
    if (g.nodes[i].kind == OpKind::Collective) slot[i] = int32_t(p.num_slots++);
  // The step after which each slot is read no more.
  std::vector<int> last_reader(p.num_slots, -1);
  for (size_t k = 0; k < kernels.size(); ++k)
    for (int in : kernels[k].input_nodes) last_reader[slot[in]] = int(k);
  p.host_steps = plan_host_steps(g, kernels, slot, is_output, device, last_reader);

  for (size_t k = 0; k < kernels.size(); ++k) {
    const LoweredKernel& lk = kernels[k];
    const GNode& out = g.nodes[lk.output_node];
    ExecProgram::Step s;
    s.fn = handles[k].fn;
    s.inputs_begin = uint32_t(p.input_slots.size());
    for (int in : lk.input_nodes) p.input_slots.push_back(slot[in]);
    s.inputs_end = uint32_t(p.input_slots.size());
    s.params = uint32_t(p.params.size());
    for (int64_t v : lk.args.params) p.params.push_back(static_cast<long long>(v));
    s.scalars = uint32_t(p.scalars.size());
    p.scalars.insert(p.scalars.end(), lk.args.scalars.begin(), lk.args.scalars.end());
    s.out_slot = slot[lk.output_node];
    s.out_bytes = size_t(out.numel()) * dtype_size(out.dtype);
    s.launch = out.numel() > 0;
    s.bytes_moved = s.out_bytes;
    s.extras_begin = uint32_t(p.extra_outputs.size());
    for (int e : lk.extra_output_nodes) {
      const size_t bytes = size_t(g.nodes[e].numel()) * dtype_size(g.nodes[e].dtype);
      p.extra_outputs.push_back({slot[e], bytes});
      s.bytes_moved += bytes;
    }
    s.extras_end = uint32_t(p.extra_outputs.size());
    for (int in : lk.input_nodes)
      s.bytes_moved += uint64_t(g.nodes[in].numel()) * dtype_size(g.nodes[in].dtype);
    p.handles.push_back(handles[k]);
    p.ops.push_back(lk.ir.ops);
    s.frees_begin = uint32_t(p.free_slots.size());
    for (int in : lk.input_nodes) {
      const int32_t sl = slot[in];
      const bool freeable = !is_output[in] && g.nodes[in].kind != OpKind::Leaf;
      if (freeable && last_reader[sl] == int(k) &&
          std::find(p.free_slots.begin() + s.frees_begin, p.free_slots.end(), sl) ==
              p.free_slots.end())
        p.free_slots.push_back(sl);  // last reader done: back to the allocator
    }
    s.frees_end = uint32_t(p.free_slots.size());
    p.max_args =
        std::max(p.max_args, s.inputs_end - s.inputs_begin + 1 + s.extras_end - s.extras_begin);
    p.steps.push_back(s);
  }
  for (int o : g.outputs)
    p.outputs.push_back({slot[o], g.nodes[o].kind == OpKind::Leaf ? g.nodes[o].leaf : -1});
  return p;
}

void run_program(const ExecProgram& p, void* const* leaf_data, BufferPtr* outputs) {
  SmallBuffer<void*, kInlineSlots> ptr(p.num_slots);
  SmallBuffer<BufferPtr, kInlineSlots> owned(p.num_slots);
  SmallBuffer<void*, kInlineSlots> args(p.max_args);
  CudaRuntime* rt = nullptr;
  if (p.device == Device::CUDA && !(rt = cuda_runtime()))
    throw CudaError("running kernels on CUDA: CUDA cannot be used here: " + cuda_runtime_problem());
  for (size_t i = 0; i < p.leaf_slots.size(); ++i)
    if (p.leaf_slots[i] >= 0) ptr[size_t(p.leaf_slots[i])] = leaf_data[i];
  for (const ExecProgram::StoredScalar& s : p.stored_scalars) {
    owned[size_t(s.slot)] = scalar_buffer(s.dtype, s.value);
    if (rt) owned[size_t(s.slot)] = copy_buffer(*owned[size_t(s.slot)], Device::CUDA);
    ptr[size_t(s.slot)] = owned[size_t(s.slot)]->data();
  }
  uint64_t launched = 0, beside_collectives = 0;
  const bool profiled = profiling_enabled();  // one relaxed load when off
  HostStepRunner host(p, ptr.data(), owned.data());  // after `owned`: gone before it
  for (size_t step = 0; step < p.steps.size(); ++step) {
    host.before_kernel(step);
    const ExecProgram::Step& s = p.steps[step];
    BufferPtr result = allocate_buffer(s.out_bytes, p.device);
    void* out = result->data();
    for (uint32_t j = s.extras_begin; j < s.extras_end; ++j) {
      const ExecProgram::ExtraOutput& e = p.extra_outputs[j];
      owned[size_t(e.slot)] = allocate_buffer(e.bytes, p.device);
      ptr[size_t(e.slot)] = owned[size_t(e.slot)]->data();
    }
    if (s.launch) {
      size_t k = 0;
      for (uint32_t j = s.inputs_begin; j < s.inputs_end; ++j)
        args[k++] = ptr[size_t(p.input_slots[j])];
      args[k] = out;
      for (uint32_t j = s.extras_begin; j < s.extras_end; ++j)
        args[++k] = ptr[size_t(p.extra_outputs[j].slot)];
      const uint64_t start_ns = profiled ? profile_clock_ns() : 0;
      if (rt) {
        // A launcher may issue several launches that share the module's __device__ scratch
        // (partials): one launcher at a time keeps each sequence contiguous on the stream.
        std::lock_guard<std::mutex> lock(cuda_launch_mutex());
        s.fn(args.data(), p.params.data() + s.params, p.scalars.data() + s.scalars);
      } else {
        s.fn(args.data(), p.params.data() + s.params, p.scalars.data() + s.scalars);
      }
      if (rt) {
        // Launch errors now; with profiling, the kernel's own time rather than its launch's.
        std::string e = rt->launch_error();
        if (e.empty() && profiled) e = rt->synchronize();
        if (!e.empty()) throw CudaError(cuda_failure(p, step, step + 1, e));
      }
      if (profiled) profile_launch(p.handles[step], p.ops[step], s.bytes_moved, start_ns);
      ++launched;
      beside_collectives += host.outstanding();
    }
    ptr[size_t(s.out_slot)] = out;
    owned[size_t(s.out_slot)] = std::move(result);
    for (uint32_t j = s.frees_begin; j < s.frees_end; ++j) {
      owned[size_t(p.free_slots[j])].reset();
      ptr[size_t(p.free_slots[j])] = nullptr;
    }
  }
  host.finish();
  if (rt && launched) {
    // Freed intermediates went back to the allocator while kernels may still run; that is safe
    // because every later kernel is on the same (default) stream. A fault shows up here.
    if (std::string e = rt->synchronize(); !e.empty())
      throw CudaError(cuda_failure(p, 0, p.steps.size(), e));
    runtime_counters().cuda_kernels_launched.fetch_add(launched, std::memory_order_relaxed);
  }
  if (launched) runtime_counters().kernels_launched.fetch_add(launched, std::memory_order_relaxed);
  if (beside_collectives)
    runtime_counters().kernels_during_collectives.fetch_add(beside_collectives,
                                                            std::memory_order_relaxed);
  for (size_t k = 0; k < p.outputs.size(); ++k)
    if (p.outputs[k].leaf < 0) outputs[k] = owned[size_t(p.outputs[k].slot)];
}

std::vector<BufferPtr> run_program_on(const ExecProgram& p, const std::vector<NodePtr>& leaves) {
  const Device device = p.device;
  SmallBuffer<void*, 16> leaf_data(leaves.size());
  SmallBuffer<BufferPtr, 16> leaf_buffers(leaves.size());  // alive for the run
  for (size_t i = 0; i < leaves.size(); ++i) {
    leaf_data[i] = nullptr;
    if (p.leaf_slots[i] < 0) continue;
    leaf_buffers[i] = buffer_on(*leaves[i], device);
    leaf_data[i] = leaf_buffers[i]->data();
  }
  std::vector<BufferPtr> outputs(p.outputs.size());
  run_program(p, leaf_data.data(), outputs.data());
  for (size_t k = 0; k < p.outputs.size(); ++k)
    if (p.outputs[k].leaf >= 0) outputs[k] = leaves[size_t(p.outputs[k].leaf)]->data;
  return outputs;
}

}  // namespace metajit
