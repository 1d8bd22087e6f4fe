// Started by test_profiler: evaluates softmax, matmul and sum graphs a known number of times
// (realizing the inputs first, so only those kernels run) and prints "done launched=N". With
// METAJIT_PROFILE=1 the profile table follows on stderr at exit. With "--report" the program
// switches profiling on itself (set_profiling) and prints profile_report() on stdout.
#include <metajit/metajit.h>

#include <cstdio>
#include <cstring>
#include <iostream>

using namespace metajit;

int main(int argc, char** argv) {
  const bool report = argc > 1 && std::strcmp(argv[1], "--report") == 0;
  Var x = rand({64, 128}, 1), w = rand({128, 32}, 2);
  eval({x, w});
  if (report) {
    reset_stats();  // "launched" counts what was profiled
    set_profiling(true);
  }
  for (int i = 0; i < 10; ++i) eval({softmax(x * double(i + 1), 1)});
  for (int i = 0; i < 4; ++i) eval({matmul(x, w + double(i))});
  for (int i = 0; i < 20; ++i) eval({sum(x - double(i), {1})});
  std::printf("done launched=%llu\n", (unsigned long long)stats().kernels_launched);
  std::fflush(stdout);
  if (report) std::cout << profile_report();
  return 0;
}
