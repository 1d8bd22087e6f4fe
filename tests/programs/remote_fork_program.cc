// Started by test_remote_fleet: the remote kernel cache across fork() (issue 15: "works after
// fork()"). Evaluates N kernels (argument 1, default 4), then fork()s: the child evaluates N
// other kernels and exits; the parent waits for it, then evaluates N more. Every value is
// checked against the reference interpreter. Prints one line per phase,
//   "<phase> ok|WRONG compiled=C disk_hits=D remote_hits=H remote_misses=M remote_errors=E"
// with phase parent-before, child, parent-after and the counts of that phase alone (the child
// starts with its parent's counters). Exit status: 0 when every phase was right, 1 for a wrong
// value in the parent, 2 when the child failed (its own status 1: a wrong value).
//
// Kernel k of family f is f*N+k+1 nested applications of cos(v)*0.5 + 0.125: no kernel of one
// family is a kernel of another (kernels are generic in shapes and constants, not in depth).
#include <metajit/metajit.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "support/reference_compare.h"

using namespace metajit;

namespace {

// Evaluates the n kernels of `family`, checks them and prints the phase's line. False when a
// value is wrong.
bool run_family(const char* phase, int family, int n) {
  const Stats before = stats();
  std::vector<Var> inputs, outputs;
  for (int k = 0; k < n; ++k) inputs.push_back(rand({29, 3}, uint64_t(1000 * (family + 1) + k)));
  eval(inputs);
  for (int k = 0; k < n; ++k) {
    Var v = inputs[size_t(k)];
    for (int d = 0; d <= family * n + k; ++d) v = cos(v) * 0.5 + 0.125;
    outputs.push_back(v);
  }
  const std::vector<std::string> wrong = metajit_test::reference_mismatches(outputs);
  for (const std::string& w : wrong) std::fprintf(stderr, "%s: %s\n", phase, w.c_str());
  const bool bad = !wrong.empty();
  const Stats after = stats();
  std::printf(
      "%s %s compiled=%llu disk_hits=%llu remote_hits=%llu remote_misses=%llu "
      "remote_errors=%llu\n",
      phase, bad ? "WRONG" : "ok",
      (unsigned long long)(after.kernels_compiled - before.kernels_compiled),
      (unsigned long long)(after.disk_hits - before.disk_hits),
      (unsigned long long)(after.remote_hits - before.remote_hits),
      (unsigned long long)(after.remote_misses - before.remote_misses),
      (unsigned long long)(after.remote_errors - before.remote_errors));
  std::fflush(stdout);  // before fork(): the child must not print the parent's buffer again
  return bad == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4;
  const bool before_ok = run_family("parent-before", 0, n);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("fork");
    return 3;
  }
  if (pid == 0) {
    // exit(), not _exit(): the child's queued uploads are flushed at exit like any process's.
    std::exit(run_family("child", 1, n) ? 0 : 1);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) {
    std::perror("waitpid");
    return 3;
  }
  const bool child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!child_ok)
    std::fprintf(stderr, "child: %s %d\n", WIFEXITED(status) ? "exit status" : "killed by signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  const bool after_ok = run_family("parent-after", 2, n);
  if (!child_ok) return 2;
  return before_ok && after_ok ? 0 : 1;
}
