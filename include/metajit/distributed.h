// Training beyond one process (docs/api.md "Training beyond one process"): the MPI world a
// program runs in when `mpirun` (OpenMPI) starts it, and each rank's share of the samples.
//
// Link the CMake target metajit::distributed: metajit::metajit alone never loads MPI, and
// metajit.h does not include this header. A plain start (no launcher) is a world of one.
//
// Built so far (issue 30, in progress): the world, barrier() and shard(); the collectives on
// host buffers that all_reduce / broadcast / all_gather on Vars will run
// (distributed/buffer_collectives.h), each checked across ranks first and bounded by
// METAJIT_DIST_TIMEOUT. The Var collectives as lazy graph nodes and
// Optimizer::set_data_parallel are not built yet.
#pragma once
#include <cstdint>
#include <vector>

#pragma GCC visibility push(default)
namespace metajit::dist {

// Joins the launcher's world (MPI_Init_thread) when started by mpirun, else a world of one
// without MPI. Idempotent; rank() and world_size() call it when needed. Under mpirun it also
// makes an uncaught exception abort the whole job with its message (MPI_Abort), so that the
// other ranks do not wait for a rank that is gone.
void init();
int rank();
int world_size();

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
