// Training beyond one process (docs/api.md "Training beyond one process"): the MPI world a
// program runs in when `mpirun` (OpenMPI) starts it, and each rank's share of the samples.
//
// Link the CMake target metajit::distributed: metajit::metajit alone never loads MPI, and
// metajit.h does not include this header. A plain start (no launcher) is a world of one.
// Data-parallel training is Optimizer::set_data_parallel (train.h), after dist::init().
#pragma once
#include <cstdint>
#include <vector>

#include "ops.h"
#include "var.h"

#pragma GCC visibility push(default)
namespace metajit::dist {

// Joins the launcher's world (MPI_Init_thread) when started by mpirun, else a world of one
// without MPI. Idempotent; rank() and world_size() call it when needed. Under mpirun it also
// makes an uncaught exception abort the whole job with its message (MPI_Abort), so that the
// other ranks do not wait for a rank that is gone.
void init();
int rank();
int world_size();

// The collectives, lazy like any op: nothing moves until a value that needs them is evaluated.
// The kernels before a collective write its input; the runtime then runs the collective on that
// buffer (in place when nothing else reads it) and the kernels after it read the result. They
// are never compiled or part of a kernel key, and a jit function's replays run them again.
// Every rank must issue the same collectives in the same order: each checks that first, and a
// mismatch is an Error on every rank naming both sides. CPU buffers only for now.
//
// all_reduce: element-wise over the ranks by Add, Mean (integers truncate like `/`), Max or Min
// (Bool: Add and Max are "or", Min "and"); its gradient (Add, Mean) is the same all_reduce of the
// result's gradient. broadcast: every rank gets rank `root`'s value; its gradient is the sum of
// the ranks' gradients, on the root (zero elsewhere). all_gather: every rank's value concatenated
// on axis 0 in rank order (equal shapes on every rank); its gradient is this rank's rows of the
// sum of the ranks' gradients.
Var all_reduce(const Var& x, ReduceOp op = ReduceOp::Add);
Var broadcast(const Var& x, int root = 0);
Var all_gather(const Var& x);

// Waits until every rank has called it (checked like a collective: a rank that issues another
// collective instead is an Error on every rank; one that never comes ends the others after
// METAJIT_DIST_TIMEOUT seconds with an Error naming it).
void barrier();

// This rank's sample indices for `epoch` out of `n` (PyTorch's DistributedSampler): the indices
// 0..n-1, shuffled by (seed, epoch) when `shuffle` (the same order on every rank and machine),
// padded from the start to a multiple of world_size() (or, with drop_last, cut to one), and
// every world_size()-th of them starting at rank(). The ranks' shares are disjoint unless padded
// and together cover every index (drop_last: all but fewer than world_size() of them).
std::vector<int64_t> shard(int64_t n, uint64_t seed, int64_t epoch, bool shuffle = true,
                           bool drop_last = false);

}  // namespace metajit::dist
#pragma GCC visibility pop
