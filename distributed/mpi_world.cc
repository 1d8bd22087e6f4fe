// Joining the launcher's world, leaving it at exit, and ending the whole job when a rank dies
// of an uncaught exception (include/metajit/distributed.h).
#include "distributed/mpi_world.h"

#include <metajit/distributed.h>
#include <metajit/error.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include "base/config.h"
#include "runtime/collective_runner.h"

namespace metajit::dist {
namespace {

World the_world;
bool initialised_here = false;  // MPI_Init_thread was ours, so MPI_Finalize is too
std::atomic<bool> broken{false};
std::atomic<uint64_t> collectives{0};

// OpenMPI's launchers (mpirun, and PMIx-based direct launches) put these in each rank's
// environment; a plain start has neither.
bool started_by_launcher() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

// An uncaught exception on one rank ends every rank, with its message, rather than leaving the
// others waiting in their next collective until the timeout.
[[noreturn]] void abort_job_on_terminate() {
  std::string what = "an unknown exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
  } else {
    what = "std::terminate";
  }
  std::fprintf(stderr, "metajit: rank %d of %d: uncaught: %s; aborting the job\n", the_world.rank,
               the_world.size, what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

void leave_world() {
  if (broken.load()) {
    std::fprintf(stderr,
                 "metajit: rank %d of %d: a collective timed out; ending the job (MPI_Abort)\n",
                 the_world.rank, the_world.size);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (the_world.comm != MPI_COMM_NULL) MPI_Comm_free(&the_world.comm);
  if (initialised_here) MPI_Finalize();
}

// Ranks on one machine share its cores. Unless OMP_NUM_THREADS says otherwise, each rank's
// kernels get its share of the hardware threads (at least one), as torchrun sets
// OMP_NUM_THREADS=1: two ranks each running OpenMP teams as wide as the machine spin against
// each other (train_digits --distributed on 2 ranks of a 2-core machine: 16 ms a step against
// 53 us with one thread each).
void share_cores_with_local_ranks() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!local || std::getenv("OMP_NUM_THREADS")) return;
  const int ranks = std::atoi(local);
  if (ranks <= 1) return;
  const int threads = std::max(1, int(std::thread::hardware_concurrency()) / ranks);
  omp_set_num_threads(threads);
}

// Collectives overlap the kernels (runtime/collective_runner.h) when MPI may be called from the
// collective thread, one call at a time (every call of this layer holds mpi_mutex), and there is
// someone to talk to; METAJIT_DIST_OVERLAP=0 runs each where it is in the plan instead.
bool overlap_collectives(int thread_level, int ranks) {
  return config().dist_overlap && ranks > 1 && thread_level >= MPI_THREAD_SERIALIZED;
}

void join_world() {
  int already = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&already);
  if (!already) {
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided),
              "MPI_Init_thread");
    initialised_here = true;
  } else {
    MPI_Query_thread(&provided);
  }
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &the_world.comm), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(the_world.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(the_world.comm, &the_world.rank);
  MPI_Comm_size(the_world.comm, &the_world.size);
  the_world.mpi = true;
  share_cores_with_local_ranks();
  set_collective_overlap(overlap_collectives(provided, the_world.size));
  std::set_terminate(abort_job_on_terminate);
  std::atexit(leave_world);
}

}  // namespace

std::mutex& mpi_mutex() {
  static std::mutex m;
  return m;
}

void check_mpi(int code, const std::string& what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(what + ": MPI error " + std::to_string(code) + ": " +
              std::string(text, size_t(length)));
}

void init() {
  static std::once_flag once;
  std::call_once(once, [] {
    install_collective_runner();
    if (started_by_launcher()) join_world();
    set_collective_world({true, the_world.rank, the_world.size});
  });
}

const World& world() {
  init();
  return the_world;
}

int rank() {
  return world().rank;
}
int world_size() {
  return world().size;
}

uint64_t next_collective_number() {
  return ++collectives;
}

void mark_world_broken() {
  broken.store(true);
}

}  // namespace metajit::dist
