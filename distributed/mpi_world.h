// The MPI world of this process (include/metajit/distributed.h): started by mpirun, or a world
// of one without MPI. Internal to the distributed layer: only it includes <mpi.h>.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <mutex>
#include <string>

namespace metajit::dist {

struct World {
  bool mpi = false;  // started by a launcher: MPI is initialised and `comm` holds every rank
  int rank = 0, size = 1;
  // metajit's own duplicate of MPI_COMM_WORLD (errors returned, not fatal), so that its
  // messages never meet a program's own MPI traffic.
  MPI_Comm comm = MPI_COMM_NULL;
};

// The world, joined by init() on first use.
const World& world();

// Held around every MPI call of the layer: MPI is initialised MPI_THREAD_SERIALIZED.
std::mutex& mpi_mutex();

// The sequence number of this rank's next collective (1, 2, ...): what the signature check
// compares, and what a timeout names as "the step".
uint64_t next_collective_number();

// A collective gave up waiting (METAJIT_DIST_TIMEOUT): requests may still be pending with a
// rank that is gone or stuck, so MPI_Finalize could wait forever. The process then ends the
// whole job with MPI_Abort when it exits, instead of finalising.
void mark_world_broken();

// Makes the executor run collective nodes through distributed/buffer_collectives.h
// (distributed/graph_collectives.cc); init() calls it, in a world of one too.
void install_collective_runner();

// Throws Error("`what`: MPI error ...") when `code` is not MPI_SUCCESS.
void check_mpi(int code, const std::string& what);

}  // namespace metajit::dist
