// Started by tests/test_remote_faults.cc as a separate process: evaluates kernels in batches so
// that the test can break the remote cache's server (kill, stop, restart) between them.
//
//   remote_batches_program K B SYNC
//
// Batch b evaluates K kernels of its own (kernel j of batch b is b*K+j+1 nested applications of
// sin(v)*0.75 + 0.25 on its own input, so no two kernels of the run share a key), checks every
// value against the reference interpreter and prints
//   "batch b ok compiled=C disk_hits=D remote_hits=H remote_misses=M remote_rejected=R
//    remote_errors=E remote_timeouts=T remote_uploads=U"          (stats() so far, one line)
// ("WRONG" instead of "ok" on a wrong value), then waits for the file SYNC/go<b+1> before going
// on; after the last batch too, so the test decides when the program exits. The program sets
// SIGPIPE to its default disposition (a write to a closed socket kills it) and finally prints
// "done sigpipe=default" when it still is, unblocked, or "done sigpipe=changed" when the library
// changed it. Exit status 0; 1 after a wrong value; 3 when a go file does not come in 120 s.
#include <metajit/metajit.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "support/reference_compare.h"

using namespace metajit;

namespace {

// Evaluates batch `b` and checks it; the number of wrong kernels.
int run_batch(int b, int k_per_batch) {
  std::vector<Var> inputs, outputs;
  for (int j = 0; j < k_per_batch; ++j)
    inputs.push_back(rand({37, 5}, uint64_t(1000 + 100 * b + j)));
  eval(inputs);  // leaves: each kernel reads its own realized input
  for (int j = 0; j < k_per_batch; ++j) {
    Var v = inputs[size_t(j)];
    for (int d = 0; d <= b * k_per_batch + j; ++d) v = sin(v) * 0.75 + 0.25;
    outputs.push_back(v);
  }
  const std::vector<std::string> wrong = metajit_test::reference_mismatches(outputs);
  for (const std::string& w : wrong) std::fprintf(stderr, "batch %d: %s\n", b, w.c_str());
  return int(wrong.size());
}

bool wait_for_file(const std::filesystem::path& file) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!std::filesystem::exists(file)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: remote_batches_program K B SYNC\n");
    return 2;
  }
  const int k_per_batch = std::atoi(argv[1]), batches = std::atoi(argv[2]);
  const std::filesystem::path sync = argv[3];
  ::signal(SIGPIPE, SIG_DFL);
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  ::pthread_sigmask(SIG_UNBLOCK, &pipe, nullptr);

  int bad = 0;
  for (int b = 0; b < batches; ++b) {
    bad += run_batch(b, k_per_batch);
    Stats s = stats();
    std::printf(
        "batch %d %s compiled=%llu disk_hits=%llu remote_hits=%llu remote_misses=%llu "
        "remote_rejected=%llu remote_errors=%llu remote_timeouts=%llu remote_uploads=%llu\n",
        b, bad ? "WRONG" : "ok", (unsigned long long)s.kernels_compiled,
        (unsigned long long)s.disk_hits, (unsigned long long)s.remote_hits,
        (unsigned long long)s.remote_misses, (unsigned long long)s.remote_rejected,
        (unsigned long long)s.remote_errors, (unsigned long long)s.remote_timeouts,
        (unsigned long long)s.remote_uploads);
    std::fflush(stdout);
    if (!wait_for_file(sync / ("go" + std::to_string(b + 1)))) {
      std::fprintf(stderr, "no %s/go%d within 120 s\n", sync.c_str(), b + 1);
      return 3;
    }
  }
  struct sigaction now {};
  ::sigaction(SIGPIPE, nullptr, &now);
  sigset_t mask;
  ::pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  const bool untouched = now.sa_handler == SIG_DFL && !sigismember(&mask, SIGPIPE);
  std::printf("done sigpipe=%s\n", untouched ? "default" : "changed");
  std::fflush(stdout);
  return bad ? 1 : 0;
}
