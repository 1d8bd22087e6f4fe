// The kernel profiler (README "Profiling"): per-kernel launch counts, run time, bytes moved and
// compile time, reported by profile_report() (runtime/api.h) and, with METAJIT_PROFILE=1, printed
// to stderr at exit.
//
// Cost when off: the executor calls profiling_enabled() once per launch, one relaxed atomic load.
// Cost when on: two clock reads and one table update (a mutex and a hash lookup by the kernel's
// key; no string is built or copied except when a kernel is seen for the first time).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "base/buffer.h"
#include "codegen/lowering.h"
#include "runtime/kernel_library.h"

namespace metajit {

namespace profiler_detail {
// -1: not decided yet (METAJIT_PROFILE is read at the first launch), 0: off, 1: on.
extern std::atomic<int> state;
bool decide_from_config();
}  // namespace profiler_detail

// Whether launches are being recorded: METAJIT_PROFILE=1, or set_profiling(true).
inline bool profiling_enabled() {
  int s = profiler_detail::state.load(std::memory_order_relaxed);
  return s > 0 || (s < 0 && profiler_detail::decide_from_config());
}

inline uint64_t profile_clock_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

// Records one launch of `handle` (whose fused ops are `ops`) that started at `start_ns`
// (profile_clock_ns()) and has just returned, having moved `bytes` (its input buffers' and its
// output buffer's sizes).
void profile_launch(const KernelHandle& handle, const std::vector<std::string>& ops, uint64_t bytes,
                    uint64_t start_ns);

// "broadcast_to×2 mul reduce.add relu": the fused ops, each name once with its count, in order
// of first appearance, without the unary./binary. prefixes and reduce axes.
std::string abbreviate_ops(const std::vector<std::string>& ops);

}  // namespace metajit
