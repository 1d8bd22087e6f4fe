// The process's random stream (manual_seed; rand/randn without a seed; dropout): Philox4x32-10
// (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the
// generator of PyTorch's CUDA and of cuRAND), a counter-based generator: element i of a draw is
// one Philox block of the counter (offset + i) under the key (the seed), computed inside the
// kernels from integer element-wise ops. Seed and offset reach the kernels as the four Int64
// values of a [4] array (seed low and high 32-bit words, offset low and high), an input like any
// other, so they are never part of a kernel key or of the structure a program is cached by.
//
// Eagerly, each draw takes its counters from the stream when the graph is built. While a jit
// function is traced (api/jit_function.cc), draws read a placeholder of the trace instead and
// count what they use (RandomTrace); each call of the traced plan then takes that many counters
// from the stream, so every replay draws new numbers, reproducibly from the seed.
#pragma once
#include <metajit/ops.h>

#include <array>
#include <cstdint>

namespace metajit {

// The words of the source array: seed low, seed high, offset low, offset high (each 0..2^32-1).
using RandomWords = std::array<int64_t, 4>;

// Takes `count` counters from the stream; returns the words of their source (the seed and the
// first counter's offset). Thread-safe.
RandomWords take_random_counters(uint64_t count);

// What a jit trace lends its draws: its placeholder of the source array, and how many counters
// the trace's draws used so far (each draw adds its offset within the trace to the source's).
struct RandomTrace {
  Var source;  // Int64 [4]
  uint64_t used = 0;
};
// The trace this thread's draws read (nullptr outside traces); set by the outermost jit trace.
RandomTrace* random_trace();
void set_random_trace(RandomTrace* t);

// Philox4x32-10 of the counter words c (each an Int64 Var of values 0..2^32-1, broadcasting)
// under the key words k0, k1: the four output words. For tests against known answers.
std::array<Var, 4> philox4x32(const std::array<Var, 4>& c, const Var& k0, const Var& k1);

}  // namespace metajit
