// The runtime's side of the collectives (OpKind::Collective, docs/design.md §11.1): the executor
// runs them between kernels through a runner that the distributed layer installs
// (distributed/graph_collectives.cc) when it joins its world, so that the runtime itself never
// links MPI.
#pragma once
#include <metajit/dtype.h>
#include <metajit/ops.h>

#include <cstdint>
#include <string>

#include "meta_ops/node.h"

namespace metajit {

// One collective as the executor runs it: `count` elements of `dtype` in the input buffer.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::AllReduce;
  ReduceOp op = ReduceOp::Add;
  int32_t root = 0;
  DType dtype = DType::Float32;
  int64_t count = 0;
  std::string what;  // the value, for messages: "float32[4, 3]"
};

// Runs `call` from `in` into `out` (the same buffer when the result takes over its input's,
// else `out` is a fresh buffer of the result's size). Throws metajit::Error.
using CollectiveRunner = void (*)(const CollectiveCall& call, const void* in, void* out);

void set_collective_runner(CollectiveRunner runner);
// The runner installed, or nullptr.
CollectiveRunner collective_runner();

// Whether the executor runs collectives on its collective thread (runtime/collective_queue.h)
// while the kernels that do not need their results run, instead of between kernels on the
// calling thread. The distributed layer turns it on when it joins a world of more than one rank
// whose MPI accepts calls from another thread (MPI_THREAD_SERIALIZED: one at a time, under its
// mpi_mutex), unless METAJIT_DIST_OVERLAP=0.
void set_collective_overlap(bool on);
bool collective_overlap();

// This process's place in its world, as the distributed layer found it (dist::init): what the
// layers below it need to build collectives (Optimizer::set_data_parallel). `joined` is false
// until dist::init() has run.
struct CollectiveWorld {
  bool joined = false;
  int32_t rank = 0, size = 1;
};
void set_collective_world(CollectiveWorld world);
CollectiveWorld collective_world();

}  // namespace metajit
