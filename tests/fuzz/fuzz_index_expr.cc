// libFuzzer target: the index-expression parser (meta_ops/index_expr.cc), which reads text that
// users write. Any text gives a tree or an IndexExprError; a tree prints canonically, its
// printed form parses back to a tree that prints and evaluates the same, and evaluation never
// traps (division by zero, INT64_MIN / -1 and overflow are all defined: docs/design.md §3).
//
// Extras ("@eK(a, b, ...)", docs/design.md "Data-dependent indexing") are evaluated over small
// arrays whose reader aborts when asked for an element outside its array: ix_eval must test the
// bounds first. ix_extra_reads_valid, as an expression, must agree with ix_extra_reads_in_range.
//
// Input: byte 0 chooses the number of loop variables (low 3 bits), whether conditions are
// allowed (bit 3) and the loop variables' values (bits 4-6). With bit 7 clear the rest is the
// expression text, parsed without extras (the format of the first seeds). With bit 7 set, byte 1
// describes the extras: their number (low 2 bits, 0-3) and the rank of each (2 bits each, from
// bit 2 up, 0-3); the rest is the text.
#include <metajit/error.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "meta_ops/index_expr.h"

using namespace metajit;

namespace {

// Values that reach the corners of the arithmetic: 0, -1, the extremes, a prime.
constexpr int64_t kCorners[] = {0, 1, -1, 7, INT64_MAX, INT64_MIN, 3, -5};

// extras[k] has `ranks[k]` axes of 1-3 elements (one axis of some arrays is empty), filled with
// the corner values: a read's value may index anything, inside or outside.
class FuzzExtras : public IxExtras {
 public:
  explicit FuzzExtras(const std::vector<int>& ranks) {
    for (size_t k = 0; k < ranks.size(); ++k) {
      Shape s;
      for (int a = 0; a < ranks[k]; ++a) s.push_back(k == 2 && a == 1 ? 0 : 1 + int64_t(k + a) % 3);
      int64_t n = 1;
      for (int64_t d : s) n *= d;
      std::vector<int64_t> v;
      for (int64_t j = 0; j < n; ++j) v.push_back(kCorners[size_t(j + int64_t(k)) % 8]);
      shapes_.push_back(std::move(s));
      values_.push_back(std::move(v));
    }
  }
  const Shape& extra_shape(int64_t k) const override {
    if (k < 0 || size_t(k) >= shapes_.size()) std::abort();  // the parser checked K
    return shapes_[size_t(k)];
  }
  int64_t extra_value(int64_t k, const int64_t* idx) const override {
    const Shape& s = extra_shape(k);
    int64_t off = 0;
    for (size_t a = 0; a < s.size(); ++a) {
      if (idx[a] < 0 || idx[a] >= s[a]) std::abort();  // a read outside the array
      off = off * s[a] + idx[a];
    }
    return values_[size_t(k)][size_t(off)];
  }

 private:
  std::vector<Shape> shapes_;
  std::vector<std::vector<int64_t>> values_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int num_vars = data[0] & 7;
  const bool condition = (data[0] & 8) != 0;
  size_t text_start = 1;
  std::vector<int> ranks;
  if (data[0] & 0x80) {
    if (size < 2) return 0;
    const int count = data[1] & 3;
    for (int k = 0; k < count; ++k) ranks.push_back((data[1] >> (2 + 2 * k)) & 3);
    text_start = 2;
  }
  const std::string_view text(reinterpret_cast<const char*>(data + text_start), size - text_start);
  IndexExprPtr e;
  try {
    e = parse_index_expr(text, num_vars, condition, "fuzz", ranks);
  } catch (const IndexExprError&) {
    return 0;
  }
  if (!e || e->depth < 1 || e->depth > kMaxIndexExprDepth) std::abort();
  if (ranks.empty() && ix_reads_extras(*e)) std::abort();  // no extras, no reads
  const std::string printed = ix_to_string(*e);

  int64_t vars[8];
  for (int k = 0; k < 8; ++k) vars[k] = kCorners[(k + (data[0] & 0x7f) / 16) % 8];
  const FuzzExtras extras(ranks);
  const int64_t value = ix_eval(*e, vars, nullptr, &extras);
  (void)ix_eval(*e, vars);  // without extras every read is 0
  // The overflow rule's test, two ways: walking the tree, and as the expression kernels use.
  const bool in_range = ix_extra_reads_in_range(*e, vars, nullptr, extras);
  const IndexExprPtr valid = ix_extra_reads_valid(
      e, [&](int64_t k, int axis) { return ix_const(extras.extra_shape(k)[size_t(axis)]); });
  if (ix_eval(*valid, vars, nullptr, &extras) != int64_t(in_range)) std::abort();
  if (!ix_reads_extras(*e) && !(in_range && ix_is_const(valid, 1))) std::abort();

  // The canonical text is fully parenthesised, so it nests deeper and runs longer than the
  // input: it need only parse back when it stays within the parser's depth and length limits.
  if (2 * e->depth >= kMaxIndexExprDepth || printed.size() > kMaxIndexExprLength) return 0;
  const IndexExprPtr again =
      parse_index_expr(printed, num_vars, condition, "fuzz: printed form", ranks);
  if (ix_to_string(*again) != printed) std::abort();
  if (ix_eval(*again, vars, nullptr, &extras) != value) std::abort();
  if (ix_extra_reads_in_range(*again, vars, nullptr, extras) != in_range) std::abort();
  return 0;
}
