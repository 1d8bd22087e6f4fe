// A program of the separate consumer project that links the installed metajit::distributed
// (tests/install_consumer.sh runs it under mpirun on 2 ranks, and alone as a world of one):
// every rank contributes rank + 1, so the sum over the ranks is n (n + 1) / 2.
#include <metajit/distributed.h>
#include <metajit/metajit.h>

#include <cstdio>

int main() {
  using namespace metajit;
  dist::init();
  const int n = dist::world_size();
  Var mine = full({3}, double(dist::rank() + 1), DType::Float32);
  const float total = dist::all_reduce(mine).to_vector<float>()[2];
  const float expected = float(n * (n + 1) / 2);
  std::printf("consumer_distributed: rank %d of %d, all_reduce sum %g (expected %g)\n",
              dist::rank(), n, total, expected);
  return total == expected ? 0 : 1;
}
