// The collectives of a program (ExecProgram::HostStep, runtime/executor.h): where each starts
// and completes among the kernels, which buffers it frees, and running them as the kernels go
// (docs/design.md §11.1).
#pragma once
#include <cstdint>
#include <future>
#include <vector>

#include "codegen/graph.h"
#include "codegen/lowering.h"
#include "runtime/executor.h"

namespace metajit {

// The collectives of `g` as host steps, in the order they start: each after the kernels that
// write its inputs, complete before the first kernel that reads its result (and no later than
// any host step after it). `slot` maps nodes to the program's slots; `last_reader[s]` is the
// kernel step after which slot s is read no more: a host step takes over the free of an input
// that no kernel reads from its wait point on (and sets the entry to -1).
std::vector<ExecProgram::HostStep> plan_host_steps(const Graph& g,
                                                   const std::vector<LoweredKernel>& kernels,
                                                   const std::vector<int32_t>& slot,
                                                   const std::vector<bool>& is_output,
                                                   Device device, std::vector<int>& last_reader);

// Runs the host steps of one run of `p` on its slots (`ptr`, `owned`): before_kernel(step)
// before each kernel step, finish() after the last. Destroyed early (a kernel threw), it waits
// for what it started before the slots' buffers go.
class HostStepRunner {
 public:
  HostStepRunner(const ExecProgram& p, void** ptr, BufferPtr* owned);
  ~HostStepRunner();
  HostStepRunner(const HostStepRunner&) = delete;
  HostStepRunner& operator=(const HostStepRunner&) = delete;

  // Starts the host steps due before kernel `step`, then completes those due (rethrowing
  // their errors) and frees their inputs.
  void before_kernel(size_t step);
  void finish();
  // A host step started on the collective thread has not been waited for: a kernel launched
  // now runs beside it.
  bool outstanding() const { return overlap_ && next_wait_ < next_start_; }

 private:
  void start(size_t k);
  void complete(size_t k);

  const ExecProgram& p_;
  void** ptr_;
  BufferPtr* owned_;
  bool overlap_;
  size_t next_start_ = 0, next_wait_ = 0;
  std::vector<std::future<void>> running_;  // per host step, while it runs on the thread
};

}  // namespace metajit
