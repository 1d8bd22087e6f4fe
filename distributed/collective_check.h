// The check every collective makes before it moves data (docs/design.md §11): each rank sends
// rank 0 what it is about to do; rank 0 compares and answers every rank, so that two ranks that
// issue different collectives get an Error naming both sides on every rank (not a hang, not a
// silent mix of buffers), and a rank that never comes ends the others after
// METAJIT_DIST_TIMEOUT with an Error naming the collective, its number and the missing ranks.
#pragma once
#include <cstdint>
#include <string>

#include "distributed/deadline_wait.h"
#include "meta_ops/node.h"

namespace metajit::dist {

// What one rank is about to do; sent as bytes, so fixed-size and trivially copyable.
struct CollectiveSignature {
  uint64_t number = 0;  // this rank's collective count (mpi_world.h)
  int32_t kind = 0;     // CollectiveKind (meta_ops/node.h)
  int32_t dtype = 0;
  int32_t op = 0;    // ReduceOp for all_reduce, else 0
  int32_t root = 0;  // broadcast's root, else 0
  int64_t count = 0;
  char text[96] = {};  // e.g. "all_reduce(add) float32[4, 3]", what messages name
};

// A signature for this rank's next collective; `text` is cut to fit.
CollectiveSignature make_signature(CollectiveKind kind, int32_t dtype, int32_t op, int32_t root,
                                   int64_t count, const std::string& text);

// Checks `mine` against every rank's (a no-op in a world of one). Throws Error on a mismatch or
// a timeout; returns when every rank has issued the same collective. The deadline for the data
// that follows is the time it returns plus the timeout.
void check_collective(const CollectiveSignature& mine);

// The timeout (METAJIT_DIST_TIMEOUT) as a duration, and its text for messages.
Clock::duration collective_timeout();
std::string timeout_text();

}  // namespace metajit::dist
