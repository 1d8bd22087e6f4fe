// Loop partitioning of a map kernel's innermost loop by a constant divisor. Heads split from or
// merged into rows, and pieces concatenated at offsets (the qkv gradient of a transformer:
// dq, dk^T, dv written side by side), index with `(i - 256) / 64` and `(i - 256) % 64` in the
// innermost loop. Per element that is a 64-bit division and a gather, under guards that test
// both. In chunks of the divisor's length, aligned so that the numerators are multiples of it at
// each chunk's start, every such quotient is the same for the whole chunk and every remainder
// is the loop variable plus a constant: the loads become contiguous and the guards affine. The
// emitter (codegen/cpp_chunked_loops.cc) runs the chunks; a chunk whose numerators are negative
// (C division truncates: its quotients are not constant) runs the statements unchanged.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "codegen/kernel_ir.h"

namespace metajit {

struct DivisionChunks {
  int var = -1;                  // the innermost loop variable, i<var>
  int64_t divisor = 0;           // D: chunks are at most D long
  int64_t phase = 0;             // in [0, D): chunks start where (i + phase) % D == 0
  std::vector<int64_t> offsets;  // the distinct c of the (i + c) / D and (i + c) % D rewritten
};

// Divisors below this give chunks too short to be worth a loop each.
inline constexpr int64_t kMinChunkDivisor = 8;

// The division terms of `var` in the expressions of `stmts` (guard bodies included): every
// (i + c) / D and (i + c) % D with a constant D >= kMinChunkDivisor, for the D and c % D of
// the first one found (others stay as they are). Nullopt when there is none, or when an
// expression reads extras (codegen/cpp_emitter.cc loads those speculatively).
std::optional<DivisionChunks> find_division_chunks(const std::vector<const KStmt*>& stmts, int var);

// Whether every (i + c) / D and (i + c) % D of `stmts` (D = chunks.divisor) is read only where
// i + c >= 0: in the test or the body of a guard whose test has the conjunct (i + c) >= 0, as a
// reindex's bounds put around a piece at offset -c (the gradient of a slice: a transformer's
// qkv gradient). A chunk whose first numerator i + c is negative has only negative ones (they
// end at a multiple of D), so there none of those terms is read, and the chunk's first element
// needs no run of its own for c.
bool read_only_where_nonnegative(const std::vector<const KStmt*>& stmts,
                                 const DivisionChunks& chunks, int64_t c);

// Where a chunk's values live: loop variable numbers (i<k>) the emitter defines per chunk.
struct ChunkVars {
  int quotient = 0;   // + k: (s + c_k) / D
  int remainder = 0;  // + k: (s + c_k) % D - s
  int negative = 0;   // + k: (s + c_k) < 0
};

// `st` with each term of `chunks` rewritten for the part of a chunk from s on where the
// quotients are constant (the whole chunk, or all but its first element when a numerator is
// negative there: C division truncates): (i + c_k) / D becomes i<quotient + k>, (i + c_k) % D
// becomes i + i<remainder + k>, and the sign tests (i + c_k) < 0 and (i + c_k) >= 0 (a
// reindex's bounds) become i<negative + k> and its negation; k indexes chunks.offsets. Guard
// bodies too.
KStmt rewrite_for_chunk(const KStmt& st, const DivisionChunks& chunks, const ChunkVars& vars);

}  // namespace metajit
