// `make bench-dist` (bench/dist_bench.sh starts it under mpirun): metajit's all-reduce against
// raw MPI_Allreduce on buffers of the same size, in one run. Rows, per size (1, 16 and 64 MB of
// float32):
//   MPI_Allreduce        in place on a plain buffer (the floor)
//   buffer all_reduce    distributed/buffer_collectives.h in place: the signature check, then
//                        MPI_Allreduce once every rank has arrived (what a collective node runs)
//   Var all_reduce       eval of dist::all_reduce(x) on a leaf x: the above from x into a new
//                        buffer (a leaf is never reduced in place), the plan from the program cache
// Each time is the median over --reps rounds that run the three in turn, each started by an
// MPI_Barrier, as rank 0 measured it; ratio = MPI's time / metajit's (1.0: as fast as MPI).
#include <metajit/distributed.h>
#include <metajit/metajit.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "distributed/buffer_collectives.h"

using namespace metajit;

namespace {

// The median time of each of `runs` over `reps` rounds, each round running them in turn (each
// started by an MPI_Barrier), so that a slow stretch of the shared machine falls on every row
// alike rather than on whichever ran then.
std::vector<double> median_seconds(int reps, const std::vector<std::function<void()>>& runs) {
  for (const auto& run : runs) run();  // warm: buffers, plans, kernels
  std::vector<std::vector<double>> t(runs.size());
  for (int r = 0; r < reps; ++r)
    for (size_t k = 0; k < runs.size(); ++k) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto t0 = std::chrono::steady_clock::now();
      runs[k]();
      t[k].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  std::vector<double> medians;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    medians.push_back(v[v.size() / 2]);
  }
  return medians;
}

}  // namespace

int main(int argc, char** argv) {
  dist::init();
  const int reps = argc > 1 ? std::max(3, std::atoi(argv[1])) : 20;
  if (dist::rank() == 0)
    std::printf("allreduce (float32, sum) on %d ranks, median of %d; ratio = MPI / metajit\n",
                dist::world_size(), reps);
  for (int64_t mb : {1, 16, 64}) {
    const int64_t n = mb * (1 << 20) / 4;
    std::vector<float> raw(size_t(n), 1.0f), mine(size_t(n), 1.0f);
    const Var x = full({n}, 1.0);
    eval({x});
    const std::vector<double> t = median_seconds(
        reps,
        {[&] { MPI_Allreduce(MPI_IN_PLACE, raw.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
         [&] {
           dist::all_reduce_buffer(mine.data(), n, DType::Float32, ReduceOp::Add, "float32[n]");
         },
         [&] { eval({dist::all_reduce(x)}); }});
    const double t_mpi = t[0], t_buffer = t[1], t_var = t[2];
    if (dist::rank() == 0) {
      std::printf("%3lld MB  MPI_Allreduce %8.3f ms\n", (long long)mb, t_mpi * 1e3);
      std::printf("%3lld MB  buffer all_reduce %8.3f ms  ratio %.2f\n", (long long)mb,
                  t_buffer * 1e3, t_mpi / t_buffer);
      std::printf("%3lld MB  Var all_reduce (leaf, out of place) %8.3f ms  ratio %.2f\n", (long long)mb,
                  t_var * 1e3, t_mpi / t_var);
    }
  }
  return 0;
}
