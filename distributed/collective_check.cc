#include "distributed/collective_check.h"

#include <metajit/error.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "base/config.h"
#include "distributed/mpi_world.h"

namespace metajit::dist {
namespace {

constexpr int kSignatureTag = 7101, kVerdictTag = 7102;

// Rank 0's answer: empty when every rank issued the same collective, else the Error's message.
struct Verdict {
  int32_t timed_out = 0;
  char text[508] = {};
};

bool same(const CollectiveSignature& a, const CollectiveSignature& b) {
  return a.number == b.number && a.kind == b.kind && a.dtype == b.dtype && a.op == b.op &&
         a.root == b.root && a.count == b.count;
}

std::string describe(const CollectiveSignature& s, int rank) {
  return "rank " + std::to_string(rank) + " issued " + std::string(s.text) +
         " as its collective #" + std::to_string(s.number);
}

std::string who(const CollectiveSignature& s) {
  return std::string(s.text) + " (collective #" + std::to_string(s.number) + ")";
}

// Rank 0: every other rank's signature, compared with its own; the verdict sent to each rank
// that arrived.
Verdict gather_and_judge(const CollectiveSignature& mine, MPI_Comm comm, int size) {
  std::vector<CollectiveSignature> theirs(static_cast<size_t>(size));
  std::vector<MPI_Request> recv(static_cast<size_t>(size - 1));
  for (int r = 1; r < size; ++r)
    MPI_Irecv(&theirs[size_t(r)], sizeof(CollectiveSignature), MPI_BYTE, r, kSignatureTag, comm,
              &recv[size_t(r - 1)]);
  std::vector<bool> arrived;
  const bool all = wait_all_until(recv, Clock::now() + collective_timeout(), arrived);
  std::string verdict, missing;
  if (!all) {
    cancel_pending(recv, arrived);
    for (int r = 1; r < size; ++r)
      if (!arrived[size_t(r - 1)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    verdict = "metajit::dist: " + who(mine) + " timed out after " + timeout_text() + ": rank" +
              (missing.find(',') == std::string::npos ? " " : "s ") + missing +
              " did not arrive (METAJIT_DIST_TIMEOUT)";
  }
  for (int r = 1; r < size && verdict.empty(); ++r)
    if (!same(mine, theirs[size_t(r)]))
      verdict = "metajit::dist: ranks issued different collectives: " + describe(mine, 0) +
                ", but " + describe(theirs[size_t(r)], r) +
                "; every rank must issue the same collectives in the same order";
  Verdict v;
  v.timed_out = !all;
  std::snprintf(v.text, sizeof v.text, "%s", verdict.c_str());
  std::vector<MPI_Request> send;
  for (int r = 1; r < size; ++r)
    if (arrived[size_t(r - 1)]) {
      send.emplace_back();
      MPI_Isend(&v, sizeof v, MPI_BYTE, r, kVerdictTag, comm, &send.back());
    }
  std::vector<bool> sent;
  if (!wait_all_until(send, Clock::now() + collective_timeout(), sent)) cancel_pending(send, sent);
  return v;
}

// Any other rank: its signature to rank 0, then rank 0's verdict. It waits longer than rank 0
// does (rank 0 may have started its wait later), so that it hears rank 0's verdict when rank 0
// is there to give one.
Verdict send_and_hear(const CollectiveSignature& mine, MPI_Comm comm) {
  Verdict v;
  std::vector<MPI_Request> requests(2);
  MPI_Isend(&mine, sizeof mine, MPI_BYTE, 0, kSignatureTag, comm, &requests[0]);
  MPI_Irecv(&v, sizeof v, MPI_BYTE, 0, kVerdictTag, comm, &requests[1]);
  std::vector<bool> done;
  const Clock::duration grace =
      std::min<Clock::duration>(collective_timeout(), std::chrono::seconds(5));
  if (!wait_all_until(requests, Clock::now() + collective_timeout() + grace, done)) {
    cancel_pending(requests, done);
    const std::string text = "metajit::dist: " + who(mine) + " timed out after " + timeout_text() +
                             ": rank 0, which checks every collective, did not answer "
                             "(METAJIT_DIST_TIMEOUT)";
    v.timed_out = 1;
    std::snprintf(v.text, sizeof v.text, "%s", text.c_str());
  }
  v.text[sizeof v.text - 1] = 0;
  return v;
}

}  // namespace

Clock::duration collective_timeout() {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(config().dist_timeout_seconds));
}

std::string timeout_text() {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", config().dist_timeout_seconds);
  return text;
}

CollectiveSignature make_signature(CollectiveKind kind, int32_t dtype, int32_t op, int32_t root,
                                   int64_t count, const std::string& text) {
  CollectiveSignature s;
  s.number = next_collective_number();
  s.kind = int32_t(kind);
  s.dtype = dtype;
  s.op = op;
  s.root = root;
  s.count = count;
  std::snprintf(s.text, sizeof s.text, "%s", text.c_str());
  return s;
}

void check_collective(const CollectiveSignature& mine) {
  const World& w = world();
  if (w.size == 1) return;
  Verdict v;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    v = w.rank == 0 ? gather_and_judge(mine, w.comm, w.size) : send_and_hear(mine, w.comm);
  }
  if (!v.text[0]) return;
  if (v.timed_out) mark_world_broken();
  throw Error(std::string(v.text) + " [on rank " + std::to_string(w.rank) + "]");
}

}  // namespace metajit::dist
