#include "runtime/host_steps.h"

#include <metajit/error.h>

#include <algorithm>
#include <cstring>

#include "base/dtype.h"
#include "runtime/collective_queue.h"
#include "runtime/collective_runner.h"
#include "runtime/runtime_stats.h"

namespace metajit {
namespace {

std::string shape_text(const GNode& n) {
  return std::string(dtype_name(n.dtype)) + shape_str(n.shape);
}

// The host step of collective node `c`: it starts after the kernels that write its inputs (or
// first, for leaves and constants), in place when its one input is a kernel's value nothing else
// reads and nobody asked for.
ExecProgram::HostStep host_step(const Graph& g, const std::vector<int32_t>& slot,
                                const std::vector<int>& readers, const std::vector<bool>& is_output,
                                int c, const std::vector<uint32_t>& after_input) {
  const GNode& node = g.nodes[size_t(c)];
  const int x = node.inputs[0];
  const GNode& in = g.nodes[size_t(x)];
  ExecProgram::HostStep h;
  for (int v : node.inputs) {
    h.before_step = std::max(h.before_step, after_input[size_t(v)]);
    h.in_slots.push_back(slot[size_t(v)]);
    h.in_bytes.push_back(size_t(g.nodes[size_t(v)].numel()) * dtype_size(g.nodes[size_t(v)].dtype));
  }
  h.out_slot = slot[size_t(c)];
  h.out_bytes = size_t(node.numel()) * dtype_size(node.dtype);
  h.in_place = node.inputs.size() == 1 && node.collective != CollectiveKind::AllGather &&
               in.kind != OpKind::Leaf && in.kind != OpKind::Scalar &&
               in.kind != OpKind::Collective && !is_output[size_t(x)] && readers[size_t(x)] == 1;
  h.call.kind = node.collective;
  h.call.op = ReduceOp(node.op);
  h.call.root = node.root;
  h.call.dtype = node.dtype;
  const bool bucket = node.inputs.size() > 1;
  h.call.count = bucket ? node.numel() : in.numel();
  h.call.what = bucket ? shape_text(node) + " (" + std::to_string(node.inputs.size()) +
                             " values end to end)"
                       : shape_text(in);
  return h;
}

// Which host step frees each input: the last one that reads it, when no kernel reads it from
// that step's wait point on. A kernel that read it before then no longer frees it
// (`last_reader` -1).
void assign_host_frees(const Graph& g, const std::vector<int32_t>& slot,
                       const std::vector<bool>& is_output, std::vector<int>& last_reader,
                       std::vector<ExecProgram::HostStep>& steps) {
  std::vector<int> last_host(last_reader.size(), -1);
  for (size_t k = 0; k < steps.size(); ++k)
    if (!steps[k].in_place)
      for (int32_t s : steps[k].in_slots) last_host[size_t(s)] = int(k);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const int32_t s = slot[i];
    if (s < 0 || last_host[size_t(s)] < 0 || is_output[i] || g.nodes[i].kind == OpKind::Leaf)
      continue;
    ExecProgram::HostStep& h = steps[size_t(last_host[size_t(s)])];
    if (last_reader[size_t(s)] >= int(h.wait_before_step)) continue;  // a later kernel frees it
    last_reader[size_t(s)] = -1;
    h.frees.push_back(s);
  }
}

// Wait points: the first kernel that reads each result (the end when none does), then no
// later than any host step after it, since the collective thread completes them in order.
void assign_waits(const std::vector<LoweredKernel>& kernels, const std::vector<int32_t>& slot,
                  std::vector<ExecProgram::HostStep>& steps) {
  const uint32_t end = uint32_t(kernels.size());
  const int32_t num_slots = slot.empty() ? 0 : *std::max_element(slot.begin(), slot.end()) + 1;
  std::vector<uint32_t> first_read(size_t(std::max(num_slots, 0)), end);
  for (size_t k = kernels.size(); k-- > 0;)
    for (int in : kernels[k].input_nodes) first_read[size_t(slot[size_t(in)])] = uint32_t(k);
  uint32_t later = end;  // non-decreasing from first to last, as they complete
  for (size_t k = steps.size(); k-- > 0;) {
    ExecProgram::HostStep& h = steps[k];
    h.wait_before_step = std::max(h.before_step, std::min(first_read[size_t(h.out_slot)], later));
    later = h.wait_before_step;
  }
}

}  // namespace

std::vector<ExecProgram::HostStep> plan_host_steps(const Graph& g,
                                                   const std::vector<LoweredKernel>& kernels,
                                                   const std::vector<int32_t>& slot,
                                                   const std::vector<bool>& is_output,
                                                   Device device, std::vector<int>& last_reader) {
  std::vector<ExecProgram::HostStep> steps;
  const size_t n = g.nodes.size();
  std::vector<int> readers(n, 0);
  std::vector<uint32_t> after_input(n, 0);  // the kernel step after which a value exists
  for (size_t k = 0; k < kernels.size(); ++k) {
    for (int in : kernels[k].input_nodes) ++readers[size_t(in)];
    after_input[size_t(kernels[k].output_node)] = uint32_t(k + 1);
    for (int e : kernels[k].extra_output_nodes) after_input[size_t(e)] = uint32_t(k + 1);
  }
  for (size_t i = 0; i < n; ++i) {
    if (g.nodes[i].kind != OpKind::Collective) continue;
    for (int in : g.nodes[i].inputs) ++readers[size_t(in)];
  }
  for (size_t i = 0; i < n; ++i) {
    if (g.nodes[i].kind != OpKind::Collective) continue;
    if (device == Device::CUDA)
      throw CudaError("dist: collectives run on CPU buffers only; " + describe_op(g.nodes[i]) +
                      " of " + shape_text(g.nodes[size_t(g.nodes[i].inputs[0])]) +
                      " was to run on CUDA (not yet supported: use set_device(Device::CPU))");
    steps.push_back(host_step(g, slot, readers, is_output, int(i), after_input));
    after_input[i] = steps.back().before_step;  // a collective of a collective runs after it
  }
  std::stable_sort(steps.begin(), steps.end(),
                   [](const auto& a, const auto& b) { return a.before_step < b.before_step; });
  assign_waits(kernels, slot, steps);
  assign_host_frees(g, slot, is_output, last_reader, steps);
  return steps;
}

HostStepRunner::HostStepRunner(const ExecProgram& p, void** ptr, BufferPtr* owned)
    : p_(p), ptr_(ptr), owned_(owned), overlap_(collective_overlap()),
      running_(p.host_steps.size()) {}

HostStepRunner::~HostStepRunner() {
  // Unwinding: the collective thread may still write into (or read) the slots' buffers.
  for (size_t k = next_wait_; k < next_start_; ++k)
    if (running_[k].valid()) running_[k].wait();
}

void HostStepRunner::before_kernel(size_t step) {
  for (; next_start_ < p_.host_steps.size() && p_.host_steps[next_start_].before_step <= step;)
    start(next_start_++);
  for (; next_wait_ < next_start_ && p_.host_steps[next_wait_].wait_before_step <= step;)
    complete(next_wait_++);
}

void HostStepRunner::finish() {
  before_kernel(p_.steps.size());
}

void HostStepRunner::start(size_t k) {
  const ExecProgram::HostStep& h = p_.host_steps[k];
  const CollectiveRunner runner = collective_runner();
  if (!runner)
    throw InternalError("a collective is in the plan but no collective runner is installed");
  const size_t out = size_t(h.out_slot), first = size_t(h.in_slots[0]);
  if (h.in_place) {
    owned_[out] = std::move(owned_[first]);
    ptr_[out] = ptr_[first];
    ptr_[first] = nullptr;
  } else {
    owned_[out] = allocate_buffer(h.out_bytes);
    ptr_[out] = owned_[out]->data();
  }
  // The buffers as they are now: the slots change as kernels run beside the collective.
  std::vector<const void*> parts;
  for (int32_t s : h.in_slots) parts.push_back(ptr_[size_t(s)]);
  if (h.in_place) parts[0] = ptr_[out];
  auto run = [&h, runner, parts = std::move(parts), to = ptr_[out]] {
    if (parts.size() > 1) {  // a bucket: its values end to end, then reduced in place
      char* at = static_cast<char*>(to);
      for (size_t j = 0; j < parts.size(); ++j) {
        if (h.in_bytes[j] > 0) std::memcpy(at, parts[j], h.in_bytes[j]);
        at += h.in_bytes[j];
      }
      runner(h.call, to, to);
    } else {
      runner(h.call, parts[0], to);
    }
  };
  runtime_counters().collectives_run.fetch_add(1, std::memory_order_relaxed);
  if (overlap_)
    running_[k] = submit_collective(std::move(run));
  else
    run();
}

void HostStepRunner::complete(size_t k) {
  if (running_[k].valid()) running_[k].get();
  for (int32_t s : p_.host_steps[k].frees) {
    owned_[size_t(s)].reset();
    ptr_[size_t(s)] = nullptr;
  }
}

}  // namespace metajit
