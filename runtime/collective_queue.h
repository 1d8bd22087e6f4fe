// The collective thread: one thread per process that runs the collectives the executor starts
// while kernels go on (runtime/executor.h HostStep), one after another in the order they were
// submitted. One thread, not one per collective: every rank must run its collectives in the
// same order (docs/design.md §11.1), and the order of submission is the plan's.
#pragma once
#include <functional>
#include <future>

namespace metajit {

// Queues `work` behind everything submitted before it; the future is ready when it has run,
// and its get() rethrows what `work` threw. The thread is started on first use and lives as
// long as the process (it waits on a condition variable when idle).
std::future<void> submit_collective(std::function<void()> work);

}  // namespace metajit
