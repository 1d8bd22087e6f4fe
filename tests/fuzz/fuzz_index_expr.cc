// libFuzzer target: the index-expression parser (meta_ops/index_expr.cc), which reads text that
// users write. Any text gives a tree or an IndexExprError; a tree prints canonically, its
// printed form parses back to a tree that prints and evaluates the same, and evaluation never
// traps (division by zero, INT64_MIN / -1 and overflow are all defined: docs/design.md §3).
//
// Input: byte 0 chooses the number of loop variables (low 3 bits) and whether conditions are
// allowed (bit 3); the rest is the expression text.
#include <metajit/error.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "meta_ops/index_expr.h"

using namespace metajit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int num_vars = data[0] & 7;
  const bool condition = (data[0] & 8) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  IndexExprPtr e;
  try {
    e = parse_index_expr(text, num_vars, condition, "fuzz");
  } catch (const IndexExprError&) {
    return 0;
  }
  if (!e || e->depth < 1 || e->depth > kMaxIndexExprDepth) std::abort();
  const std::string printed = ix_to_string(*e);

  // Values that reach the corners of the arithmetic: 0, -1, the extremes, a prime.
  static constexpr int64_t kCorners[] = {0, 1, -1, 7, INT64_MAX, INT64_MIN, 3, -5};
  int64_t vars[8];
  for (int k = 0; k < 8; ++k) vars[k] = kCorners[(k + data[0] / 16) % 8];
  const int64_t value = ix_eval(*e, vars);

  // The canonical text is fully parenthesised, so it nests deeper and runs longer than the
  // input: it need only parse back when it stays within the parser's depth and length limits.
  if (2 * e->depth >= kMaxIndexExprDepth || printed.size() > kMaxIndexExprLength) return 0;
  const IndexExprPtr again = parse_index_expr(printed, num_vars, condition, "fuzz: printed form");
  if (ix_to_string(*again) != printed) std::abort();
  if (ix_eval(*again, vars) != value) std::abort();
  return 0;
}
