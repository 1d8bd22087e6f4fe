#include "distributed/deadline_wait.h"

#include <thread>

namespace metajit::dist {

bool wait_all_until(std::vector<MPI_Request>& requests, Clock::time_point deadline,
                    std::vector<bool>& done) {
  done.assign(requests.size(), false);
  size_t left = requests.size();
  auto pause = std::chrono::microseconds(0);
  for (int polls = 0;; ++polls) {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (done[i]) continue;
      int flag = 0;
      MPI_Test(&requests[i], &flag, MPI_STATUS_IGNORE);
      if (flag) done[i] = true, --left;
    }
    if (left == 0) return true;
    if (Clock::now() >= deadline) return false;
    // A thousand tight polls (a collective between ranks of one machine takes microseconds),
    // then sleeps doubling up to 1 ms.
    if (polls > 1000) {
      pause = std::min(std::chrono::microseconds(1000),
                       std::max(std::chrono::microseconds(20), pause * 2));
      std::this_thread::sleep_for(pause);
    }
  }
}

void cancel_pending(std::vector<MPI_Request>& requests, const std::vector<bool>& done) {
  for (size_t i = 0; i < requests.size(); ++i) {
    if (done[i] || requests[i] == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&requests[i]);
    MPI_Request_free(&requests[i]);
  }
}

}  // namespace metajit::dist
