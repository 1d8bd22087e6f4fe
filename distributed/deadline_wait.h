// Waiting for MPI requests with a deadline (METAJIT_DIST_TIMEOUT): MPI's own waits block
// forever when a peer never comes, and metajit's collectives must end instead.
#pragma once
#include <mpi.h>

#include <chrono>
#include <vector>

namespace metajit::dist {

using Clock = std::chrono::steady_clock;

// Tests the requests until all have completed (true) or `deadline` has passed (false);
// `done[i]` says which completed. Polls, first tightly, then sleeping up to a millisecond, so
// that a waiting rank leaves the CPU to the others when a peer is slow. The caller holds
// mpi_mutex().
bool wait_all_until(std::vector<MPI_Request>& requests, Clock::time_point deadline,
                    std::vector<bool>& done);

// Cancels the point-to-point requests that have not completed and waits for the cancellation
// (which completes at once for a receive that matched nothing).
void cancel_pending(std::vector<MPI_Request>& requests, const std::vector<bool>& done);

}  // namespace metajit::dist
