// Started by the cache tests as separate processes: evaluates N distinct kernels (argument 1,
// default 20) in one eval(), checks every value against the reference interpreter and prints
// "ok compiled=C disk_hits=D launched=L remote_hits=H remote_misses=M remote_rejected=R
// remote_errors=E remote_timeouts=T remote_uploads=U eval_ms=X" (X: the eval() that gets and
// runs the kernels, for bench/remote_cache.sh). Exit status 1 on a wrong value.
//
// Kernel k is k+1 nested applications of sin(v)*0.75 + 0.25 on its own input (so no two kernels
// share a subexpression and each has its own key); a few use other dtypes and a reduction.
#include <metajit/metajit.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "support/reference_compare.h"

using namespace metajit;

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 20;
  std::vector<Var> inputs, outputs;
  for (int k = 0; k < n; ++k) inputs.push_back(rand({37, 5}, uint64_t(100 + k)));
  eval(inputs);  // leaves: each kernel reads its own realized input
  for (int k = 0; k < n; ++k) {
    Var v = inputs[size_t(k)];
    for (int d = 0; d <= k; ++d) v = sin(v) * 0.75 + 0.25;
    if (k % 4 == 3) v = sum(v, {1});
    outputs.push_back(v);
  }
  std::vector<HostTensor> expected = interpret(outputs);
  const auto start = std::chrono::steady_clock::now();
  eval(outputs);
  const double eval_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const std::vector<std::string> wrong = metajit_test::compare_to_reference(outputs, expected);
  for (const std::string& w : wrong) std::fprintf(stderr, "%s\n", w.c_str());
  const bool bad = !wrong.empty();
  Stats s = stats();
  std::printf(
      "%s compiled=%llu disk_hits=%llu launched=%llu remote_hits=%llu remote_misses=%llu "
      "remote_rejected=%llu remote_errors=%llu remote_timeouts=%llu remote_uploads=%llu "
      "eval_ms=%.2f\n",
      bad ? "WRONG" : "ok", (unsigned long long)s.kernels_compiled, (unsigned long long)s.disk_hits,
      (unsigned long long)s.kernels_launched, (unsigned long long)s.remote_hits,
      (unsigned long long)s.remote_misses, (unsigned long long)s.remote_rejected,
      (unsigned long long)s.remote_errors, (unsigned long long)s.remote_timeouts,
      (unsigned long long)s.remote_uploads, eval_ms);
  std::fflush(stdout);  // uploads still queued are flushed at exit, after this line
  return bad ? 1 : 0;
}
